"""dybw's Hydra launchers: the joblib and submitit plugins' launchers with what a dybw job needs on top
(:mod:`dybw.launchers`), and Hydra's own basic launcher saying where its jobs run.  ``run.py`` selects them
when ``hydra/launcher=joblib``, ``submitit_slurm`` or ``submitit_local`` is chosen, or none is (``basic``);
Hydra finds them here, in its ``hydra_plugins`` namespace package."""
