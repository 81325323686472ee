"""The figure pipeline: experiment specs -> jobs (run or reused) -> figures and REPRODUCTION.md.

``python -m dybw.figures [--quick] [--only NAME] [--results DIR] [--out DIR]`` (``make figures``).

- :mod:`.specs`   reads ``experiments/*.yaml`` and expands each into jobs named exactly as ``run.py`` names
                  them (``results/<experiment_name>/<override_dirname>``), so results are shared;
- :mod:`.runner`  runs the missing jobs in this process (training through the local runner, or the virtual
                  clock alone through :mod:`.clock_only`) and reuses completed ones;
- :mod:`.load`    reads the results files back into data frames;
- :mod:`.registry` finds a figure by the name a spec gives; :mod:`.scaffold` is what every drawing
                  function shares (its :class:`~.scaffold.Context`, the :class:`~.scaffold.Drawn` it returns);
- the drawing modules, one per figure family, draw one figure per spec (seaborn, PNG + PDF):
                  :mod:`.convergence`, :mod:`.backups`, :mod:`.speedup`, :mod:`.ratio`, :mod:`.static_b`,
                  :mod:`.durations`, :mod:`.agreement`, :mod:`.min_neighbors`, :mod:`.wall_vs_virtual`,
                  :mod:`.baselines`, :mod:`.network`;
- :mod:`.frames`  computes the data frames that a figure and ``REPRODUCTION.md`` both read;
- :mod:`.claims`  checks the paper's claims C1-C6 on the results: numbers and verdicts (by :mod:`.rules`);
- :mod:`.sections` writes the sections of ``REPRODUCTION.md`` beyond the claims;
- :mod:`.report`  assembles ``REPRODUCTION.md`` and ``reproduction.json`` from the claims and the sections.
"""
