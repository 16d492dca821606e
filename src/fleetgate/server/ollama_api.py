"""Ollama's native listing endpoints, answered by the gateway from its fleet view."""

from __future__ import annotations

import time
from typing import Any

from fleetgate.fleet import Fleet

# the Ollama API level the native endpoints follow (clients read it from /api/version)
OLLAMA_API_VERSION = "0.12.6"


def _stamp(seconds: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))


def _entry(model_id: str, family: str = "") -> dict[str, Any]:
    return {
        "name": model_id,
        "model": model_id,
        "modified_at": _stamp(0),
        "size": 0,
        "digest": "",
        "details": {
            "parent_model": "",
            "format": "",
            "family": family,
            "families": None,
            "parameter_size": "",
            "quantization_level": "",
        },
    }


def tags(fleet: Fleet) -> dict[str, Any]:
    """`GET /api/tags`: every model of the fleet, under the name clients ask for."""
    return {"models": [_entry(model_id) for model_id in fleet.models]}


def version() -> dict[str, Any]:
    return {"version": OLLAMA_API_VERSION}
