"""Prefix keys for prompt-cache affinity: running hashes of a request's leading blocks.

An engine's prefix cache (vLLM automatic prefix caching, SGLang RadixAttention, llama.cpp's
prompt cache) reuses the longest cached prefix of a prompt. A conversation's next turn
repeats the previous prompt and adds to it, so the hash of the previous request's whole
prompt is the hash of one of the next request's leading blocks. The blocks are: the tool
schemas and system prompt (one block), then each message; a plain prompt is cut into whole
chunks of `_CHUNK` characters. Key `i` is the hash of blocks 0..i.

The cost is bounded: a text longer than three samples is hashed by its length and three
samples (head, middle, tail), at most `MAX_BLOCKS` blocks are hashed, and only the last
`KEYED_BLOCKS` block ends get a key (a turn that adds more messages than that starts
afresh). Two different prompts can then share a key; the price is an engine cache miss,
never a wrong answer.
Keys are computed on first use (only a plan with deployments of equal rank asks), from the
body the ingress adapter parsed, and kept on the profile.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from typing import Any

import orjson

from fleetgate.ingress.profile import RequestProfile

MAX_BLOCKS = 256
KEYED_BLOCKS = 16  # keys for the last this many block ends (where a previous turn ended)
_SAMPLE = 1024  # characters per sample of a long text
_CHUNK = 1024  # characters per block of a plain prompt (hashed whole)
_MAX_CHUNKS = 64


def prefix_keys(profile: RequestProfile) -> tuple[int, ...]:
    """The profile's prefix keys (64-bit, shortest prefix first); () when the endpoint has
    no prompt to cache."""
    keys = profile.prefix
    if keys is None:
        blocks = _BLOCKS.get(profile.endpoint)
        keys = _running_hashes(blocks(profile.body)) if blocks is not None else ()
        profile.prefix = keys
    return keys


def _running_hashes(blocks: list[str]) -> tuple[int, ...]:
    # CRC-32 continues over appended data, so at a block's end it is the checksum of
    # everything before: the blocks before the keyed ones cost one C call in all, each keyed
    # one a call of its own. With the length hashed so far beside it, two prefixes share a
    # key only when they are as long and their CRCs collide (2^-32): rare enough when a
    # collision costs a cache miss, never a wrong answer.
    del blocks[MAX_BLOCKS:]
    first_keyed = max(0, len(blocks) - KEYED_BLOCKS)
    data = "".join(blocks[:first_keyed]).encode("utf-8", "surrogatepass")
    crc, length = zlib.crc32(data), len(data)
    keys: list[int] = []
    for block in blocks[first_keyed:]:
        data = block.encode("utf-8", "surrogatepass")
        crc = zlib.crc32(data, crc)
        length += len(data)
        keys.append(crc << 32 | (length & 0xFFFFFFFF))
    return tuple(keys)


def _text(value: Any) -> str:
    """One JSON value as text to hash: long texts sampled, `cache_control` markers left out
    (clients move them to the newest turn, which must not change the earlier turns' keys)."""
    if type(value) is str:
        n = len(value)
        if n > 3 * _SAMPLE:
            mid = (n - _SAMPLE) // 2
            value = value[:_SAMPLE] + value[mid : mid + _SAMPLE] + value[-_SAMPLE:]
        return f"{n}\x1f{value}"
    if isinstance(value, dict):
        return (
            "{"
            + "\x1e".join(f"{k}\x1d{_text(v)}" for k, v in value.items() if k != "cache_control")
            + "}"
        )
    if isinstance(value, list):
        return "[" + "\x1e".join(_text(v) for v in value) + "]"
    return orjson.dumps(value).decode()


def _tools(body: dict[str, Any]) -> str:
    # schemas are small and many: one serialisation beats walking them
    tools = body.get("tools") or body.get("functions")
    return orjson.dumps(tools).decode() if tools else ""


_MESSAGE_EXTRA = ("name", "tool_calls", "tool_call_id", "images")


def _message(message: Any) -> str:
    if type(message) is not dict:
        return _text(message)
    content = message.get("content")
    if type(content) is str and len(content) <= 3 * _SAMPLE:  # the common case, inline
        text = f"{message.get('role')}\x1c{len(content)}\x1f{content}"
    else:
        text = f"{message.get('role')}\x1c{_text(content)}"
    if len(message) > 2:  # more than role and content
        for key in _MESSAGE_EXTRA:
            if key in message:
                text += f"\x1c{key}\x1d{_text(message[key])}"
    return text


def _messages(value: Any) -> list[str]:
    return [_message(m) for m in value[:MAX_BLOCKS]] if isinstance(value, list) else []


def _chat(body: dict[str, Any]) -> list[str]:
    tools = _tools(body)
    return [tools, *_messages(body.get("messages"))] if tools else _messages(body.get("messages"))


def _anthropic(body: dict[str, Any]) -> list[str]:
    return [_tools(body) + "\x1c" + _text(body.get("system")), *_messages(body.get("messages"))]


def _responses(body: dict[str, Any]) -> list[str]:
    head = _tools(body) + "\x1c" + _text(body.get("instructions"))
    value = body.get("input")
    return [head, _text(value)] if isinstance(value, str) else [head, *_messages(value)]


def _prompt(body: dict[str, Any]) -> list[str]:
    system = body.get("system")  # Ollama's generate
    blocks = [_text(system)] if system else []
    prompt = body.get("prompt")
    if isinstance(prompt, str):
        # whole chunks only: a longer next prompt repeats them (a short prompt is one block)
        full = min(len(prompt) // _CHUNK, _MAX_CHUNKS)
        blocks.extend(prompt[i * _CHUNK : (i + 1) * _CHUNK] for i in range(full))
        if not full:
            blocks.append(prompt)
    return blocks


_BLOCKS: dict[str, Callable[[dict[str, Any]], list[str]]] = {
    "chat.completions": _chat,
    "ollama.chat": _chat,
    "messages": _anthropic,
    "responses": _responses,
    "completions": _prompt,
    "ollama.generate": _prompt,
}
