"""Fleet configuration: schema, loading, whole-tree checks."""

from fleetgate.config.loader import (
    ConfigError,
    Problem,
    check_config_text,
    load_config_file,
    load_config_text,
    validate_config,
)
from fleetgate.config.schema import FleetConfig

__all__ = [
    "ConfigError",
    "FleetConfig",
    "Problem",
    "check_config_text",
    "load_config_file",
    "load_config_text",
    "validate_config",
]
