"""Errors a user can act on.

Every user-facing problem is one of these; `run.py` prints ``str(error)`` as a single line and exits
non-zero without a traceback. Messages name the field, the value and what is allowed.
"""


class DybwError(Exception):
    """Base class of every error dybw reports to the user in one line."""


class ConfigError(DybwError):
    """A configuration value is invalid (raised before any worker starts)."""

    def __init__(self, field: str, value, allowed: str, missing: bool = False):
        self.field, self.value, self.allowed = field, value, allowed
        super().__init__(f"{field} is missing: {allowed}" if missing else f"{field}={value!r} is invalid: {allowed}")


class Diverged(DybwError):
    """A loss or a parameter became NaN or infinite (the job's status becomes ``diverged``)."""


class DataError(DybwError):
    """A dataset file is missing, corrupted or cannot be downloaded."""


class DataMissing(DataError):
    """Dataset files are missing and could not be downloaded: ``str()`` is every detail (files, MD5s, the
    download errors); ``short`` is the line a user reads first, saying what to do."""

    def __init__(self, details: str, short: str):
        super().__init__(details)
        self.short = short


class Terminated(KeyboardInterrupt):
    """SIGTERM (a cluster scheduler's stop), raised where the run is so that it ends like Ctrl-C:
    measured results flushed, status ``interrupted`` -- but named as what it was, exit code 143."""


def interruption(error: KeyboardInterrupt) -> str:
    """The summary's message for a run stopped by ``error`` (Ctrl-C or SIGTERM)."""
    if isinstance(error, Terminated):
        return str(error) or "interrupted by SIGTERM"  # a subclass may say who sent it (dybw.slurm)
    return "interrupted by the user (SIGINT)"
