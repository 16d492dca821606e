"""Ollama native ingress: `/api/chat`, `/api/generate`, `/api/embed` (and the older
`/api/embeddings`), `/api/show`.

Ollama streams chat and generate answers unless the body says `"stream": false`.
`options.num_ctx` (the context the worker should load the model with) must be a positive
JSON integer; the caps on it are applied by routing, which knows the workers.
"""

from __future__ import annotations

from typing import Any

from fleetgate.errors import invalid
from fleetgate.ingress.fields import require_model, stream_flag, take_preferences
from fleetgate.ingress.needs import ollama_needs
from fleetgate.ingress.openai import parse_json_object
from fleetgate.ingress.profile import RequestProfile

_STREAMING = frozenset({"ollama.chat", "ollama.generate"})


def _options(body: dict[str, Any]) -> dict[str, Any]:
    options = body.get("options")
    if options is None:
        return {}
    if not isinstance(options, dict):
        raise invalid("`options` must be an object of model parameters.", "options")
    return options


def requested_num_ctx(options: dict[str, Any]) -> int | None:
    """`options.num_ctx`, validated: a positive JSON integer (not a float, string or bool)."""
    value = options.get("num_ctx")
    if value is None:
        return None
    if type(value) is not int or value < 1:
        raise invalid(
            f"`options.num_ctx` must be a positive integer, got {value!r}.", "options.num_ctx"
        )
    return value


def parse_ollama(endpoint: str, raw: bytes) -> RequestProfile:
    body = parse_json_object(raw)
    if "model" not in body and isinstance(body.get("name"), str):
        body["model"] = body.pop("name")  # older Ollama clients name the model `name`
    model = require_model(body)
    if endpoint == "ollama.chat":
        messages = body.get("messages", [])
        if not isinstance(messages, list):
            raise invalid("`messages` must be an array of messages.", "messages")
        for i, message in enumerate(messages):
            if not isinstance(message, dict) or not isinstance(message.get("role"), str):
                raise invalid(
                    f"`messages[{i}]` must be an object with a string `role`.", f"messages[{i}]"
                )
    elif endpoint in ("ollama.generate", "ollama.embeddings"):
        prompt = body.get("prompt")
        if prompt is not None and not isinstance(prompt, str):
            raise invalid("`prompt` must be a string.", "prompt")
    elif endpoint == "ollama.embed":
        value = body.get("input")
        if not isinstance(value, (str, list)) or (isinstance(value, list) and not value):
            raise invalid("`input` is required: a string or a non-empty array.", "input")
    options = _options(body)
    requested_num_ctx(options)
    reserve = options.get("num_predict")
    preferences = take_preferences(body)
    return RequestProfile(
        protocol="ollama",
        endpoint=endpoint,
        model=model,
        stream=stream_flag(body, default=True) if endpoint in _STREAMING else False,
        body=body,
        output_reserve=reserve if type(reserve) is int and reserve > 0 else None,
        needs=ollama_needs(endpoint, body),
        preferences=preferences,
    )
