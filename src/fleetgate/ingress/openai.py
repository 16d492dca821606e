"""OpenAI-compatible ingress: chat completions, completions, embeddings."""

from __future__ import annotations

from typing import Any

import orjson

from fleetgate.errors import GatewayError, invalid
from fleetgate.ingress.needs import derive_needs
from fleetgate.ingress.profile import RequestProfile
from fleetgate.routing.preferences import parse_request_preferences

_OUTPUT_FIELDS = ("max_completion_tokens", "max_tokens")

# endpoint -> (field the endpoint requires, accepted JSON types, description)
_REQUIRED: dict[str, tuple[str, tuple[type, ...], str]] = {
    "chat.completions": ("messages", (list,), "a non-empty array of messages"),
    "completions": ("prompt", (str, list), "a string or an array"),
    "embeddings": ("input", (str, list), "a string or an array"),
}


def parse_json_object(raw: bytes) -> dict[str, Any]:
    if not raw:
        raise GatewayError("invalid_json", "The request body is empty; send a JSON object.")
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise GatewayError("invalid_json", f"The request body is not valid JSON: {exc}") from exc
    if not isinstance(body, dict):
        raise GatewayError("invalid_json", "The request body must be a JSON object.")
    return body


def _positive_int(body: dict[str, Any], name: str) -> int | None:
    value = body.get(name)
    if value is None:
        return None
    if type(value) is not int or value < 1:
        raise invalid(f"`{name}` must be a positive integer.", name)
    return value


def parse_openai(endpoint: str, raw: bytes) -> RequestProfile:
    body = parse_json_object(raw)
    model = body.get("model")
    if model is None:
        raise invalid("`model` is required: name a model from GET /v1/models.", "model")
    if not isinstance(model, str) or not model:
        raise invalid("`model` must be a non-empty string.", "model")
    stream = body.get("stream", False)
    if stream is None:
        stream = False
    if not isinstance(stream, bool):
        raise invalid("`stream` must be true or false.", "stream")
    if stream and endpoint == "embeddings":
        raise invalid("Embeddings cannot be streamed; drop `stream`.", "stream")
    name, types, what = _REQUIRED[endpoint]
    value = body.get(name)
    if value is None:
        raise invalid(f"`{name}` is required: {what}.", name)
    if not isinstance(value, types) or (isinstance(value, list) and not value):
        raise invalid(f"`{name}` must be {what}.", name)
    if endpoint == "chat.completions":
        for i, message in enumerate(value):
            if not isinstance(message, dict) or not isinstance(message.get("role"), str):
                raise invalid(
                    f"`messages[{i}]` must be an object with a string `role`.",
                    f"messages[{i}]",
                )
    reserve = None
    for field_name in _OUTPUT_FIELDS:
        reserve = _positive_int(body, field_name) or reserve
    # routing preferences are for fleetgate, never for the upstream
    preferences = parse_request_preferences(body.pop("provider", None))
    return RequestProfile(
        protocol="openai",
        endpoint=endpoint,
        model=model,
        stream=stream,
        body=body,
        output_reserve=reserve,
        needs=derive_needs(body),
        preferences=preferences,
    )
