"""Prefix keys for prompt-cache affinity: running hashes of a request's leading blocks.

An engine's prefix cache (vLLM automatic prefix caching, SGLang RadixAttention, llama.cpp's
prompt cache) reuses the longest cached prefix of a prompt. A conversation's next turn
repeats the previous prompt and adds to it, so the hash of the previous request's whole
prompt is the hash of one of the next request's leading blocks. The blocks are: the tool
schemas and system prompt (one block), then each message; a plain prompt is cut into whole
chunks of `_CHUNK` characters. Key `i` is the hash of blocks 0..i.

The cost is bounded: a text longer than three samples is hashed by its length and three
samples (head, middle, tail), and at most `MAX_BLOCKS` blocks are hashed. Two different
prompts can then share a key; the price is an engine cache miss, never a wrong answer.
Keys are computed on first use (only a plan with deployments of equal rank asks), from the
body the ingress adapter parsed, and kept on the profile.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from hashlib import blake2b
from typing import Any

import orjson

from fleetgate.ingress.profile import RequestProfile

MAX_BLOCKS = 256
_SAMPLE = 1024  # characters per sample of a long text
_CHUNK = 1024  # characters per block of a plain prompt (hashed whole)
_MAX_CHUNKS = 64

Block = Callable[[Any], None]  # feeds one block's pieces to the running hash


def prefix_keys(profile: RequestProfile) -> tuple[bytes, ...]:
    """The profile's prefix keys (8 bytes each, shortest prefix first); () when the
    endpoint has no prompt to cache."""
    keys = profile.prefix
    if keys is None:
        blocks = _BLOCKS.get(profile.endpoint)
        keys = _running_hashes(blocks(profile.body)) if blocks is not None else ()
        profile.prefix = keys
    return keys


def _running_hashes(blocks: Iterator[list[Any]]) -> tuple[bytes, ...]:
    h = blake2b(digest_size=8)
    keys: list[bytes] = []
    for pieces in blocks:
        for piece in pieces:
            _feed(h, piece)
        keys.append(h.copy().digest())
        if len(keys) == MAX_BLOCKS:
            break
    return tuple(keys)


def _feed(h: Any, value: Any) -> None:
    """Feed one JSON value: texts sampled, `cache_control` markers left out (clients move
    them to the newest turn, which must not change the keys of the earlier ones)."""
    if isinstance(value, str):
        n = len(value)
        h.update(n.to_bytes(4, "little", signed=False) if n < 1 << 32 else b"\xff" * 4)
        if n > 3 * _SAMPLE:
            mid = (n - _SAMPLE) // 2
            value = value[:_SAMPLE] + value[mid : mid + _SAMPLE] + value[-_SAMPLE:]
        h.update(value.encode("utf-8", "surrogatepass"))
    elif isinstance(value, dict):
        h.update(b"{")
        for key, item in value.items():
            if key != "cache_control":
                h.update(key.encode("utf-8", "surrogatepass"))
                _feed(h, item)
        h.update(b"}")
    elif isinstance(value, list):
        h.update(b"[")
        for item in value:
            _feed(h, item)
        h.update(b"]")
    else:
        h.update(orjson.dumps(value))


def _tools(body: dict[str, Any]) -> list[Any]:
    # schemas are small and many: one serialisation beats walking them
    tools = body.get("tools") or body.get("functions")
    return [orjson.dumps(tools).decode()] if tools else []


def _chat(body: dict[str, Any]) -> Iterator[list[Any]]:
    tools = _tools(body)
    if tools:
        yield tools
    for message in body.get("messages") or ():
        if isinstance(message, dict):
            yield [message.get("role"), message.get("content"), *_extra(message)]


def _extra(message: dict[str, Any]) -> list[Any]:
    return [message[k] for k in ("name", "tool_calls", "tool_call_id", "images") if k in message]


def _anthropic(body: dict[str, Any]) -> Iterator[list[Any]]:
    yield [*_tools(body), body.get("system")]
    for message in body.get("messages") or ():
        if isinstance(message, dict):
            yield [message.get("role"), message.get("content")]


def _responses(body: dict[str, Any]) -> Iterator[list[Any]]:
    yield [*_tools(body), body.get("instructions")]
    value = body.get("input")
    if isinstance(value, str):
        yield [value]
    elif isinstance(value, list):
        for item in value:
            yield [item]


def _prompt(body: dict[str, Any]) -> Iterator[list[Any]]:
    system = body.get("system")  # Ollama's generate
    if system:
        yield [system]
    prompt = body.get("prompt")
    if not isinstance(prompt, str):
        return
    # whole chunks only: the next, longer prompt repeats them (a short prompt is one block)
    full = min(len(prompt) // _CHUNK, _MAX_CHUNKS)
    if not full:
        yield [prompt]
    for i in range(full):
        yield [prompt[i * _CHUNK : (i + 1) * _CHUNK]]


_BLOCKS: dict[str, Callable[[dict[str, Any]], Iterator[list[Any]]]] = {
    "chat.completions": _chat,
    "ollama.chat": _chat,
    "messages": _anthropic,
    "responses": _responses,
    "completions": _prompt,
    "ollama.generate": _prompt,
}
