"""A conservative, provider-independent estimate of the context a request needs.

Text costs ceil(bytes / 4 x (1 + margin)); token-id arrays cost one token per id; each
message adds a chat-template overhead; each image or audio part a fixed reserve; tool
schemas cost the bytes of their JSON. The output reserve is the request's own limit
(`max_completion_tokens`, `max_tokens`, `max_output_tokens`, Ollama `options.num_predict`)
or a configured default. The function is pure and cheap (see benchmarks/bench_estimate.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import orjson

from fleetgate.config.schema import ContextConfig

_IMAGE_PARTS = frozenset({"image_url", "input_image", "image"})
_AUDIO_PARTS = frozenset({"input_audio", "audio"})
_OUTPUT_FIELDS = ("max_completion_tokens", "max_tokens", "max_output_tokens")
# endpoints that generate no output tokens
_NO_OUTPUT = frozenset({"embeddings", "ollama.embed"})
# endpoints whose list-valued `prompt` / `input` is a batch of separate sequences
_BATCHED = frozenset({"completions", "embeddings", "ollama.embed"})


@dataclass(frozen=True, slots=True)
class ContextEstimate:
    """Tokens a request needs: its input side plus the output it may generate."""

    prompt_tokens: int  # text, token ids, tool schemas, template overhead, media reserves
    output_reserve: int
    exact: bool = False  # True when prompt_tokens came from the engine's tokenizer
    media_parts: int = 0  # image and audio parts; an exact count skips such requests

    @property
    def total(self) -> int:
        return self.prompt_tokens + self.output_reserve

    def header(self) -> str:
        """The value of X-Fleetgate-Context-Estimate, e.g. `1234; estimate`."""
        return f"{self.total}; {'exact' if self.exact else 'estimate'}"


class _Tally:
    """Running totals of one walk over a body."""

    __slots__ = ("audio", "images", "messages", "text_bytes", "token_ids")

    def __init__(self) -> None:
        self.text_bytes = 0
        self.token_ids = 0
        self.images = 0
        self.audio = 0
        self.messages = 0


def _text_bytes(text: str) -> int:
    return len(text) if text.isascii() else len(text.encode("utf-8"))


def _json_bytes(value: Any) -> int:
    try:
        return len(orjson.dumps(value))
    except TypeError:
        return 0


def _content(value: Any, tally: _Tally) -> None:
    """A message `content` (string or parts), a prompt, an input or a system value."""
    if isinstance(value, str):
        tally.text_bytes += _text_bytes(value)
    elif isinstance(value, list):
        for part in value:
            if isinstance(part, str):
                tally.text_bytes += _text_bytes(part)
            elif isinstance(part, int):
                tally.token_ids += 1  # a prompt given as token ids
            elif isinstance(part, dict):
                _part(part, tally)
            elif isinstance(part, list):
                _content(part, tally)  # a batch of prompts / token-id arrays
    elif value is not None:
        tally.text_bytes += _json_bytes(value)


def _part(part: dict[str, Any], tally: _Tally) -> None:
    kind = part.get("type")
    if kind in _IMAGE_PARTS:
        tally.images += 1
        return
    if kind in _AUDIO_PARTS:
        tally.audio += 1
        return
    text = part.get("text")
    if isinstance(text, str):
        tally.text_bytes += _text_bytes(text)
        return
    if "role" in part:  # a message inside a Responses `input` array
        _message(part, tally)
        return
    content = part.get("content")
    if content is not None:  # e.g. an Anthropic tool_result
        _content(content, tally)
        return
    # anything else (tool calls and their outputs, documents): its JSON, conservatively
    tally.text_bytes += _json_bytes(part)


def _message(message: dict[str, Any], tally: _Tally) -> None:
    tally.messages += 1
    _content(message.get("content"), tally)
    for key in ("tool_calls", "function_call"):
        calls = message.get(key)
        if calls:
            tally.text_bytes += _json_bytes(calls)
    reasoning = message.get("reasoning_content")
    if isinstance(reasoning, str):
        tally.text_bytes += _text_bytes(reasoning)
    images = message.get("images")  # Ollama: base64 images next to the content
    if isinstance(images, list):
        tally.images += len(images)


def _is_batch(value: Any) -> bool:
    return isinstance(value, list) and len(value) > 1 and isinstance(value[0], (str, list))


def _longest(batch: list[Any], tally: _Tally) -> None:
    """Each sequence of a batch needs the window alone: count the longest one."""
    best = _Tally()
    for item in batch:
        one = _Tally()
        _content(item, one)
        if one.text_bytes / 4 + one.token_ids > best.text_bytes / 4 + best.token_ids:
            best = one
    tally.text_bytes += best.text_bytes
    tally.token_ids += best.token_ids


def _positive(value: Any) -> int | None:
    if type(value) is int and value > 0:
        return value
    return None


def output_reserve(body: dict[str, Any], endpoint: str, default: int) -> int:
    """The output tokens the request may generate."""
    if endpoint in _NO_OUTPUT:
        return 0
    for name in _OUTPUT_FIELDS:
        value = _positive(body.get(name))
        if value is not None:
            return value
    options = body.get("options")
    if isinstance(options, dict):
        value = _positive(options.get("num_predict"))
        if value is not None:
            return value
    return default


def estimate_context_tokens(
    body: dict[str, Any], endpoint: str, settings: ContextConfig
) -> ContextEstimate:
    """The context window a request needs, on the safe side."""
    tally = _Tally()
    messages = body.get("messages")
    if isinstance(messages, list):
        for message in messages:
            if isinstance(message, dict):
                _message(message, tally)
    for name in ("system", "instructions", "prompt", "input", "suffix"):
        value = body.get(name)
        if value is None:
            continue
        if name == "system":
            tally.messages += 1  # a separate system turn in the template
        if endpoint in _BATCHED and _is_batch(value):
            _longest(value, tally)
        else:
            _content(value, tally)
    for name in ("tools", "functions"):
        tools = body.get(name)
        if tools:
            tally.text_bytes += _json_bytes(tools)
    text_tokens = math.ceil(tally.text_bytes / 4 * (1 + settings.margin_percent / 100))
    prompt = (
        text_tokens
        + tally.token_ids
        + tally.messages * settings.message_overhead
        + tally.images * settings.image_tokens
        + tally.audio * settings.audio_tokens
    )
    reserve = output_reserve(body, endpoint, settings.default_output_reserve)
    return ContextEstimate(prompt, reserve, media_parts=tally.images + tally.audio)
