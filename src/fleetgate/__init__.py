"""fleetgate: a self-hosted LLM gateway."""

import warnings

__version__ = "0.1.0"

# FastAPI gives each admin API parameter an alias equal to its name, and pydantic 2.12+ calls
# such an alias useless (pydantic/pydantic#12356): a false positive that FastAPI hides inside
# `warnings.catch_warnings()`. That block is not thread-safe: another thread's block (pydantic
# uses them while it builds a model) can restore the filters midway, and the warning reached
# the operator's terminal. A filter added here, while the process has one thread, is in every
# filter list any block later saves and restores.
warnings.filterwarnings("ignore", r"The '(validation_|serialization_)?alias' attribute with value ")
