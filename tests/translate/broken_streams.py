"""Upstream streams that fail after output had started, as engines and Anthropic send them.

A chat engine (vLLM) writes its error as one more `data:` event, then `[DONE]`; Anthropic
writes `event: error` and ends the stream. Served by `tests.security.servers.Scripted`.
"""

from __future__ import annotations

from typing import Any

import orjson

from fleetgate.testing.protocol_shapes import anthropic_error

SSE = {"Content-Type": "text/event-stream"}
TEXT = "Hello"  # what the answer had said before the error


def _event(payload: dict[str, Any] | bytes, name: str | None = None) -> bytes:
    data = payload if isinstance(payload, bytes) else orjson.dumps(payload)
    head = b"event: " + name.encode() + b"\n" if name else b""
    return head + b"data: " + data + b"\n\n"


def chat_stream_failing(message: str, code: int) -> bytes:
    """A chat stream that says `TEXT`, then vLLM's in-stream error, then `[DONE]`."""
    frame = {"id": "chatcmpl-up", "object": "chat.completion.chunk", "created": 0, "model": "u"}
    deltas = [{"role": "assistant", "content": ""}, {"content": TEXT}]
    chunks = [
        {**frame, "choices": [{"index": 0, "delta": d, "finish_reason": None}]} for d in deltas
    ]
    error = {
        "error": {"message": message, "type": "InternalServerError", "param": None, "code": code}
    }
    return b"".join(_event(c) for c in chunks) + _event(error) + _event(b"[DONE]")


def anthropic_stream_failing(err_type: str, message: str) -> bytes:
    """An Anthropic stream that says `TEXT`, then its `error` event; nothing follows."""
    message_start = {
        "type": "message_start",
        "message": {
            "id": "msg_up",
            "type": "message",
            "role": "assistant",
            "model": "claude-x",
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {"input_tokens": 3, "output_tokens": 1},
        },
    }
    block = {
        "type": "content_block_start",
        "index": 0,
        "content_block": {"type": "text", "text": ""},
    }
    delta = {
        "type": "content_block_delta",
        "index": 0,
        "delta": {"type": "text_delta", "text": TEXT},
    }
    return b"".join(
        [
            _event(message_start, "message_start"),
            _event(block, "content_block_start"),
            _event(delta, "content_block_delta"),
            _event(anthropic_error(err_type, message), "error"),
        ]
    )


def sse_events(raw: bytes) -> list[tuple[str | None, Any]]:
    """A stream's events as (name, payload), `[DONE]` as (None, "[DONE]")."""
    out: list[tuple[str | None, Any]] = []
    for block in raw.replace(b"\r\n", b"\n").split(b"\n\n"):
        name, data = None, None
        for line in block.split(b"\n"):
            if line.startswith(b"event:"):
                name = line[6:].strip().decode()
            elif line.startswith(b"data:"):
                data = line[5:].strip()
        if data is not None:
            out.append((name, "[DONE]" if data == b"[DONE]" else orjson.loads(data)))
    return out
