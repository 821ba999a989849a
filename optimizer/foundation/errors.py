"""User-facing errors.

Everything a user can cause (a bad file, key, column or value) raises a subclass of
:class:`CloudoptError`; the command line prints its message and exits with status 2 instead of
showing a traceback. Internal invariants use ``assert``.
"""

from __future__ import annotations

from typing import Any


class CloudoptError(ValueError):
    """A problem with the user's input, with a message that names the file, key or value."""

    exit_status = 2


class ConfigError(CloudoptError):
    """An invalid configuration file, key or value."""


class TraceFormatError(CloudoptError):
    """A trace or log file that cannot be read as the expected table."""


class ModelFileError(CloudoptError):
    """A saved model directory that is missing, corrupted or does not match."""


class HistoryError(CloudoptError):
    """History of runs that cannot be read: a store that is unreachable or holds no matching
    runs, a range or selector that selects nothing, a corrupt file."""


class TrainingScriptError(CloudoptError):
    """A training script that cannot be loaded (missing file, syntax error, no entry point)."""


def check(cond: bool, key: str, message: str, value: Any) -> None:
    """Raise :class:`ConfigError` ``"<key> <message> (got <value>)"`` unless ``cond``."""
    if not cond:
        raise ConfigError(f"{key} {message} (got {value!r})")
