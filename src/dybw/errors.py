"""Errors a user can act on.

Every user-facing problem is one of these; `run.py` prints ``str(error)`` as a single line and exits
non-zero without a traceback. Messages name the field, the value and what is allowed.
"""


class DybwError(Exception):
    """Base class of every error dybw reports to the user in one line."""


class ConfigError(DybwError):
    """A configuration value is invalid (raised before any worker starts)."""

    def __init__(self, field: str, value, allowed: str):
        self.field, self.value, self.allowed = field, value, allowed
        super().__init__(f"{field}={value!r} is invalid: {allowed}")


class DataError(DybwError):
    """A dataset file is missing, corrupted or cannot be downloaded."""
