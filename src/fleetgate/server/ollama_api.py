"""Ollama's native listing endpoints, answered by the gateway from its fleet view."""

from __future__ import annotations

import time
from typing import Any

from fleetgate.discovery.store import WindowStore
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


def ps(fleet: Fleet, windows: WindowStore) -> dict[str, Any]:
    """`GET /api/ps`: the fleet's models loaded on some worker, with the largest loaded context."""
    loaded: dict[str, int] = {}
    for dep in fleet.deployments.values():
        ev = windows.evidence(dep.id)
        if ev is not None and ev.loaded:
            loaded[dep.model] = max(loaded.get(dep.model, 0), ev.loaded_context or 0)
    models = []
    for model_id, context in loaded.items():
        entry = {**_entry(model_id), "expires_at": _stamp(time.time() + 300), "size_vram": 0}
        if context:
            entry["context_length"] = context
        models.append(entry)
    return {"models": models}
