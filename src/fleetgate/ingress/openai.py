"""OpenAI-compatible ingress: chat completions, completions, embeddings."""

from __future__ import annotations

from typing import Any

import orjson

from fleetgate.errors import GatewayError, invalid
from fleetgate.ingress.fields import (
    check_user_ids,
    positive_int,
    require_model,
    stream_flag,
    take_preferences,
)
from fleetgate.ingress.needs import derive_needs
from fleetgate.ingress.profile import RequestProfile

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


def parse_openai(endpoint: str, raw: bytes) -> RequestProfile:
    body = parse_json_object(raw)
    model = require_model(body)
    stream = stream_flag(body, default=False)
    if stream and endpoint == "embeddings":
        raise invalid("Embeddings cannot be streamed; drop `stream`.", "stream")
    name, types, what = _REQUIRED[endpoint]
    value = body.get(name)
    if value is None:
        raise invalid(f"`{name}` is required: {what}.", name)
    if not isinstance(value, types) or (isinstance(value, list) and not value):
        raise invalid(f"`{name}` must be {what}.", name)
    if endpoint == "chat.completions" and isinstance(value, list):
        for i, message in enumerate(value):
            if not isinstance(message, dict) or not isinstance(message.get("role"), str):
                raise invalid(
                    f"`messages[{i}]` must be an object with a string `role`.",
                    f"messages[{i}]",
                )
    reserve = None
    for field_name in _OUTPUT_FIELDS:
        reserve = positive_int(body, field_name) or reserve
    check_user_ids(body)
    preferences = take_preferences(body)
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
