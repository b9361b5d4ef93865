"""The broker's settings: `Settings` (its fields in parts, one module per concern), loading
from flags, environment and a TOML file, and the types they share."""

from app.settings.model import (
    CONFIG_FILE_VARIABLE,
    Settings,
    describe_validation_error,
    load_settings,
)
from app.settings.values import GIB, KIB, MIB, ReplicationMode, Scope, SettingsError

__all__ = [
    "CONFIG_FILE_VARIABLE",
    "GIB",
    "KIB",
    "MIB",
    "ReplicationMode",
    "Scope",
    "Settings",
    "SettingsError",
    "describe_validation_error",
    "load_settings",
]
