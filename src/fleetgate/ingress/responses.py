"""OpenAI Responses ingress: `POST /v1/responses`."""

from __future__ import annotations

from fleetgate.errors import invalid
from fleetgate.ingress.fields import (
    check_user_ids,
    positive_int,
    require_model,
    stream_flag,
    take_preferences,
)
from fleetgate.ingress.needs import responses_needs
from fleetgate.ingress.openai import parse_json_object
from fleetgate.ingress.profile import RequestProfile


def parse_responses(endpoint: str, raw: bytes) -> RequestProfile:
    body = parse_json_object(raw)
    model = require_model(body)
    value = body.get("input")
    if value is None and body.get("previous_response_id") is None:
        raise invalid("`input` is required: a string or an array of input items.", "input")
    if value is not None and not isinstance(value, (str, list)):
        raise invalid("`input` must be a string or an array of input items.", "input")
    instructions = body.get("instructions")
    if instructions is not None and not isinstance(instructions, str):
        raise invalid("`instructions` must be a string.", "instructions")
    check_user_ids(body)
    preferences = take_preferences(body)
    return RequestProfile(
        protocol="openai",
        endpoint=endpoint,
        model=model,
        stream=stream_flag(body, default=False),
        body=body,
        output_reserve=positive_int(body, "max_output_tokens"),
        needs=responses_needs(body),
        preferences=preferences,
    )
