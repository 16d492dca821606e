"""Which capabilities an OpenAI-style request body uses (the `needs` of its profile)."""

from __future__ import annotations

from typing import Any

from fleetgate import capabilities as cap

# body field -> need, for fields whose mere presence (non-null) is the need. `max_tokens`
# is not a need: every OpenAI-compatible server takes it, and dropping it would lift the
# output budget the context-fit logic relies on.
_PRESENCE: dict[str, str] = {
    "temperature": "temperature",
    "top_p": "top_p",
    "top_k": "top_k",
    "min_p": "min_p",
    "top_a": "top_a",
    "frequency_penalty": "frequency_penalty",
    "presence_penalty": "presence_penalty",
    "repetition_penalty": "repetition_penalty",
    "seed": "seed",
    "logit_bias": "logit_bias",
    "reasoning": "reasoning",
    "reasoning_effort": "reasoning",
    "include_reasoning": "include_reasoning",
    "parallel_tool_calls": "parallel_tool_calls",
    "verbosity": "verbosity",
    "top_logprobs": cap.TOP_LOGPROBS,
}

_IMAGE_PARTS = frozenset({"image_url", "input_image", "image"})
_AUDIO_PARTS = frozenset({"input_audio", "audio"})


def derive_needs(body: dict[str, Any]) -> frozenset[str]:
    """The capabilities the body uses; malformed shapes add nothing (upstream judges them)."""
    needs = {need for name, need in _PRESENCE.items() if body.get(name) is not None}
    if body.get("tools"):
        needs.add(cap.TOOLS)
    tool_choice = body.get("tool_choice")
    if tool_choice is not None and tool_choice != "auto":  # "auto" is every server's default
        needs.add(cap.TOOL_CHOICE)
    stop = body.get("stop")
    if stop:  # "" and [] mean no stop sequence
        needs.add("stop")
    logprobs = body.get("logprobs")
    if logprobs is True or (type(logprobs) is int and logprobs > 0):
        needs.add(cap.LOGPROBS)  # chat: true; legacy completions: an integer
    response_format = body.get("response_format")
    if isinstance(response_format, dict):
        kind = response_format.get("type")
        if kind in ("json_object", "json_schema"):
            needs.add(cap.RESPONSE_FORMAT)
        schema = response_format.get("json_schema")
        if kind == "json_schema" and isinstance(schema, dict) and schema.get("strict") is True:
            needs.add(cap.STRUCTURED_OUTPUTS)
    messages = body.get("messages")
    if isinstance(messages, list):
        needs |= _modalities(messages)
    return frozenset(needs)


def _modalities(messages: list[Any]) -> set[str]:
    found: set[str] = set()
    for message in messages:
        content = message.get("content") if isinstance(message, dict) else None
        if not isinstance(content, list):
            continue
        for part in content:
            kind = part.get("type") if isinstance(part, dict) else None
            if kind in _IMAGE_PARTS:
                found.add(cap.IMAGE_INPUT)
            elif kind in _AUDIO_PARTS:
                found.add(cap.AUDIO_INPUT)
    return found
