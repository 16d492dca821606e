"""fleetgate: a self-hosted LLM gateway."""

__version__ = "0.1.0"
