"""Recognises an upstream's "context length exceeded" error and the numbers it states.

Covers the texts of vLLM, SGLang, llama.cpp, Ollama, OpenRouter, OpenAI
(`context_length_exceeded`) and Anthropic ("prompt is too long"), as a whole error body or
as the data of an in-stream error event. The executor uses it to fall through to a
deployment with a strictly larger window instead of returning the 400.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Any

import orjson

from fleetgate.execute.outcome import error_message
from fleetgate.execute.usage import token_count


@dataclass(frozen=True, slots=True)
class ContextExceeded:
    source: str  # which engine's wording matched: "vllm", "sglang", "llamacpp", ...
    limit: int | None = None  # the window the upstream enforces
    prompt_tokens: int | None = None  # the input side, when stated
    requested_tokens: int | None = None  # input + output, when stated


def _stated(source: str, limit: object, prompt: object, requested: object) -> ContextExceeded:
    """What an error states, where it is a number an engine can have meant: a window is at
    least 1 (one of 0 or less, trusted, would rule the deployment out of every request)."""
    return ContextExceeded(
        source, token_count(limit) or None, token_count(prompt), token_count(requested)
    )


def _ints(match: re.Match[str]) -> list[int]:
    return [int(g) for g in match.groups() if g is not None]


# (source, pattern, the fields its groups fill); tried in order, the first match wins
_PATTERNS: list[tuple[str, str, tuple[str, ...]]] = [
    # vLLM >= 0.10, max_tokens too large for the input
    (
        "vllm",
        r"maximum context length is (\d+) tokens and your request has (\d+) input tokens",
        ("limit", "prompt"),
    ),
    # vLLM and OpenAI: "... you requested N tokens (P in the messages, C in the completion)"
    (
        "vllm",
        r"maximum context length is (\d+) tokens\. However, you requested (\d+) tokens "
        r"\((\d+) in the messages",
        ("limit", "requested", "prompt"),
    ),
    (
        "vllm",
        r"maximum context length is (\d+) tokens\. However, your "
        r"(?:messages resulted in|request has) (\d+)(?: input)? tokens",
        ("limit", "prompt"),
    ),
    (
        "vllm",
        r"decoder prompt \(length (\d+)\) is longer than the maximum model length of (\d+)",
        ("prompt", "limit"),
    ),
    (
        "vllm",
        r"prompt \((\d+) tokens\) is too long and exceeds limit of (\d+)",
        ("prompt", "limit"),
    ),
    # OpenRouter: "... However, you requested about N tokens (... in the output)"
    (
        "openrouter",
        r"endpoint's maximum context length is (\d+) tokens\. However, you requested about "
        r"(\d+) tokens",
        ("limit", "requested"),
    ),
    (
        "sglang",
        r"input \((\d+) tokens\) is longer than the model's context length \((\d+) tokens\)",
        ("prompt", "limit"),
    ),
    (
        "sglang",
        r"exceeds the model's maximum context length of (\d+) tokens\. You requested a total "
        r"of (\d+) tokens: (\d+) tokens from the input",
        ("limit", "requested", "prompt"),
    ),
    (
        "llamacpp",
        r"request \((\d+) tokens\) exceeds the available context size \((\d+) tokens\)",
        ("prompt", "limit"),
    ),
    ("llamacpp", r"exceeds the available context size", ()),
    ("anthropic", r"prompt is too long: (\d+) tokens > (\d+) maximum", ("prompt", "limit")),
    (
        "anthropic",
        r"input length and `?max_tokens`? exceed context limit: (\d+) \+ \d+ > (\d+)",
        ("prompt", "limit"),
    ),
    ("anthropic", r"prompt is too long", ()),
    ("ollama", r"input length exceeds (?:the|maximum) context length", ()),
    ("ollama", r"exceeded max context length by \d+ tokens", ()),
    # any other wording in OpenAI's style
    ("openai", r"maximum context length is (\d+) tokens", ("limit",)),
    ("openai", r"exceeds the context window", ()),
]


@functools.cache
def _rules() -> list[tuple[str, re.Pattern[str], tuple[str, ...]]]:
    """The patterns compiled, once, when the first error body is read: none at start-up,
    and none in a gateway whose upstreams never refuse a request."""
    return [(source, re.compile(p, re.IGNORECASE), f) for source, p, f in _PATTERNS]


def _error_object(data: Any) -> dict[str, Any]:
    if isinstance(data, dict):
        err = data.get("error")
        if isinstance(err, dict):
            return err
        return data
    return {}


def parse_context_error(body: bytes | None) -> ContextExceeded | None:
    """The context-exceeded facts in an error body (or in-stream error data), or None."""
    if not body:
        return None
    message = error_message(body, limit=2000)
    try:
        err = _error_object(orjson.loads(body))
    except orjson.JSONDecodeError:
        err = {}
    code = err.get("code")
    if err.get("type") == "exceed_context_size_error":  # llama.cpp states the numbers
        return _stated("llamacpp", err.get("n_ctx"), err.get("n_prompt_tokens"), None)
    for source, pattern, fields in _rules():
        match = pattern.search(message)
        if match is None:
            continue
        values = dict(zip(fields, _ints(match), strict=False))
        if source == "vllm" and code == "context_length_exceeded":
            source = "openai"  # vLLM copied OpenAI's wording; the code tells them apart
        return _stated(source, values.get("limit"), values.get("prompt"), values.get("requested"))
    if code == "context_length_exceeded":
        return ContextExceeded("openai")
    return None
