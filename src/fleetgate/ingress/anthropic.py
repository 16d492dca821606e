"""Anthropic Messages ingress: `POST /v1/messages`."""

from __future__ import annotations

from fleetgate.errors import invalid
from fleetgate.ingress.fields import (
    check_user_ids,
    positive_int,
    require_model,
    stream_flag,
    take_preferences,
)
from fleetgate.ingress.needs import anthropic_needs
from fleetgate.ingress.openai import parse_json_object
from fleetgate.ingress.profile import RequestProfile


def parse_messages(endpoint: str, raw: bytes) -> RequestProfile:
    body = parse_json_object(raw)
    model = require_model(body)
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise invalid("`messages` must be a non-empty array of messages.", "messages")
    for i, message in enumerate(messages):
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            raise invalid(
                f"`messages[{i}]` must be an object with a string `role`.", f"messages[{i}]"
            )
    system = body.get("system")
    if system is not None and not isinstance(system, (str, list)):
        raise invalid("`system` must be a string or an array of text blocks.", "system")
    check_user_ids(body)
    preferences = take_preferences(body)
    return RequestProfile(
        protocol="anthropic",
        endpoint=endpoint,
        model=model,
        stream=stream_flag(body, default=False),
        body=body,
        output_reserve=positive_int(body, "max_tokens"),
        needs=anthropic_needs(body),
        preferences=preferences,
    )
