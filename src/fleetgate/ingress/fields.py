"""Field checks every ingress adapter shares (model name, stream flag)."""

from __future__ import annotations

from typing import Any

from fleetgate.errors import invalid


def require_model(body: dict[str, Any]) -> str:
    model = body.get("model")
    if model is None:
        raise invalid("`model` is required: name a model from GET /v1/models.", "model")
    if not isinstance(model, str) or not model:
        raise invalid("`model` must be a non-empty string.", "model")
    return model


def stream_flag(body: dict[str, Any], default: bool) -> bool:
    stream = body.get("stream")
    if stream is None:
        return default
    if not isinstance(stream, bool):
        raise invalid("`stream` must be true or false.", "stream")
    return stream


def positive_int(body: dict[str, Any], name: str) -> int | None:
    value = body.get(name)
    if value is None:
        return None
    if type(value) is not int or value < 1:
        raise invalid(f"`{name}` must be a positive integer.", name)
    return value
