"""Suspected silent truncation: the worker reports far fewer prompt tokens than were sent.

Ollama cuts a prompt longer than its context and still answers 200. The gateway's lower
bound for a prompt is one token per 8 bytes of its text, whitespace not counted (real
tokenizers give more; English averages about 4 bytes a token). A reported prompt count
(`prompt_eval_count`, `usage.prompt_tokens`, `usage.input_tokens`) below it means the
worker did not read the whole prompt. Prompts under 32 bound tokens are not judged.
"""

from __future__ import annotations

from typing import Any

import orjson

TRUNCATION_HEADER = "X-Fleetgate-Truncation-Suspected"
BYTES_PER_TOKEN_BOUND = 8
MIN_BOUND = 32
CHECKED_ENDPOINTS = frozenset(
    {"ollama.chat", "ollama.generate", "chat.completions", "completions", "messages", "responses"}
)


def _text_bytes(value: Any) -> int:
    """Bytes of text, whitespace left out (tokenizers merge long runs of it)."""
    if isinstance(value, str):
        size = len(value.encode("utf-8")) if not value.isascii() else len(value)
        return size - value.count(" ") - value.count("\n") - value.count("\t")
    if isinstance(value, list):
        return sum(_text_bytes(v) for v in value)
    if isinstance(value, dict):
        return _text_bytes(value.get("text")) + _text_bytes(value.get("content"))
    return 0


def prompt_lower_bound(body: dict[str, Any]) -> int:
    """Fewest tokens the prompt text can be (one per 8 bytes)."""
    size = sum(
        _text_bytes(body.get(key))
        for key in ("messages", "prompt", "system", "instructions", "input", "suffix")
    )
    return size // BYTES_PER_TOKEN_BOUND


def reported_prompt_tokens(data: Any) -> int | None:
    if not isinstance(data, dict):
        return None
    value = data.get("prompt_eval_count")
    if value is None:
        usage = data.get("usage")
        if not isinstance(usage, dict):
            response = data.get("response")  # a Responses `response.completed` event
            usage = response.get("usage") if isinstance(response, dict) else None
        if isinstance(usage, dict):
            value = usage.get("prompt_tokens", usage.get("input_tokens"))
    return value if type(value) is int and value >= 0 else None


def suspect(body: dict[str, Any], answer: bytes) -> tuple[int, int] | None:
    """(reported, lower bound) when the answer's prompt count is below the bound."""
    if b"_tokens" not in answer and b"prompt_eval_count" not in answer:
        return None
    bound = prompt_lower_bound(body)  # cheaper than parsing the answer: first
    if bound < MIN_BOUND:
        return None
    try:
        reported = reported_prompt_tokens(orjson.loads(answer))
    except orjson.JSONDecodeError:
        return None
    if reported is None or reported >= bound:
        return None
    return reported, bound


def last_ndjson_line(tail: bytes) -> bytes:
    lines = [line for line in tail.split(b"\n") if line.strip()]
    return lines[-1] if lines else b""
