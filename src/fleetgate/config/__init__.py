"""Fleet configuration: schema, loading, whole-tree checks."""

import warnings

from fleetgate.config.loader import (
    ConfigError,
    Problem,
    check_config_text,
    load_config_file,
    load_config_text,
    validate_config,
)
from fleetgate.config.schema import FleetConfig

# FastAPI gives each admin API parameter an alias equal to its name, and pydantic 2.12+ calls
# such an alias useless (pydantic/pydantic#12356): a false positive that FastAPI hides inside
# `warnings.catch_warnings()`. That block is not thread-safe: another thread's block (pydantic
# uses them while it builds a model) can restore the filters midway, and the warning reached
# the operator's terminal. A filter added here, while the process has one thread (every
# process that serves or builds the admin API loads its config first), is in every filter
# list any block later saves and restores. (Not in the package's own `__init__`: the request
# log's writer process imports the package, and the filter's pattern would load `re` there.)
warnings.filterwarnings("ignore", r"The '(validation_|serialization_)?alias' attribute with value ")

__all__ = [
    "ConfigError",
    "FleetConfig",
    "Problem",
    "check_config_text",
    "load_config_file",
    "load_config_text",
    "validate_config",
]
