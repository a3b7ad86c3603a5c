"""User-facing errors: one line that names the thing and how to fix it, never a traceback wall."""

from __future__ import annotations


class LengthpredError(Exception):
    """A bad input or setup problem the user can fix; scripts print it as one line and exit 2."""


class ConfigError(LengthpredError):
    """A config value that is invalid before any work starts."""


class DataError(LengthpredError):
    """A data file, record or field that cannot be used."""


class ModelError(LengthpredError):
    """A model that cannot be found or loaded."""
