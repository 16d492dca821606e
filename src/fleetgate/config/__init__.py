"""Fleet configuration: schema, loading, whole-tree checks."""

from fleetgate.config import chain_checks as _chain_checks  # noqa: F401  (registers them)
from fleetgate.config import checks as _checks  # noqa: F401  (registers the checks)
from fleetgate.config import context_checks as _context_checks  # noqa: F401
from fleetgate.config import preference_checks as _preference_checks  # noqa: F401
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
