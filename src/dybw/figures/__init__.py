"""The figure pipeline: experiment specs -> jobs (run or reused) -> figures and REPRODUCTION.md.

``python -m dybw.figures [--quick] [--only NAME] [--results DIR] [--out DIR]`` (``make figures``).

- :mod:`.specs`   reads ``experiments/*.yaml`` and expands each into jobs named exactly as ``run.py`` names
                  them (``results/<experiment_name>/<override_dirname>``), so results are shared;
- :mod:`.runner`  runs the missing jobs in this process (training through the local runner, or the virtual
                  clock alone through :mod:`.clock_only`) and reuses completed ones;
- :mod:`.load`    reads the results files back into data frames;
- :mod:`.plots`   draws one figure per spec (seaborn, PNG + PDF);
- :mod:`.report`  writes ``REPRODUCTION.md``: claims C1-C6, numbers from the results files, verdicts.
"""
