"""Anthropic Messages and OpenAI Responses answers (whole bodies and SSE events) for fakes."""

from __future__ import annotations

import time
from typing import Any

# one SSE event: (the `event:` name or None, the JSON payload of its `data:` line)
Event = tuple[str | None, dict[str, Any]]

_ANTHROPIC_STOP = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use"}


def anthropic_error(err_type: str, message: str) -> dict[str, Any]:
    """An Anthropic-shaped error body (vLLM wraps its own error `type` in it)."""
    return {"type": "error", "error": {"type": err_type, "message": message}}


def anthropic_answer(
    mid: str, model: str, pieces: list[str], input_tokens: int, output_tokens: int, finish: str
) -> tuple[dict[str, Any], list[Event]]:
    """The Messages body, and the stream of the same answer (one text delta per piece)."""
    stop = _ANTHROPIC_STOP.get(finish, "end_turn")
    message = {
        "id": mid,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [{"type": "text", "text": "".join(pieces)}],
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": {"input_tokens": input_tokens, "output_tokens": output_tokens},
    }
    start = {
        **message,
        "content": [],
        "stop_reason": None,
        "usage": {"input_tokens": input_tokens, "output_tokens": 0},
    }
    block = {"type": "text", "text": ""}
    events: list[Event] = [
        ("message_start", {"type": "message_start", "message": start}),
        (
            "content_block_start",
            {"type": "content_block_start", "index": 0, "content_block": block},
        ),
    ]
    events += [
        (
            "content_block_delta",
            {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": p}},
        )
        for p in pieces
    ]
    events += [
        ("content_block_stop", {"type": "content_block_stop", "index": 0}),
        (
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": stop, "stop_sequence": None},
                "usage": message["usage"],
            },
        ),
        ("message_stop", {"type": "message_stop"}),
    ]
    return message, events


def responses_error_event(code: str | int, message: str) -> dict[str, Any]:
    """The Responses stream's `error` event."""
    return {"type": "error", "code": code, "message": message, "param": None}


def responses_answer(
    rid: str,
    mid: str,
    model: str,
    pieces: list[str],
    input_tokens: int,
    output_tokens: int,
    finish: str,
) -> tuple[dict[str, Any], list[Event]]:
    """The Responses body, and its event stream (one `output_text.delta` per piece)."""
    text = "".join(pieces)
    status = "incomplete" if finish == "length" else "completed"
    usage = {
        "input_tokens": input_tokens,
        "output_tokens": output_tokens,
        "total_tokens": input_tokens + output_tokens,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens_details": {"reasoning_tokens": 0},
    }
    part = {"type": "output_text", "text": text, "annotations": []}
    item = {"id": mid, "type": "message", "status": status, "role": "assistant", "content": [part]}
    created = int(time.time())

    def response(state: str, output: list[Any], use: Any) -> dict[str, Any]:
        incomplete = {"reason": "max_output_tokens"} if state == "incomplete" else None
        return {
            "id": rid,
            "object": "response",
            "created_at": created,
            "model": model,
            "status": state,
            "output": output,
            "parallel_tool_calls": True,
            "tool_choice": "auto",
            "tools": [],
            "usage": use,
            "error": None,
            "incomplete_details": incomplete,
        }

    where = {"item_id": mid, "output_index": 0, "content_index": 0}
    running = response("in_progress", [], None)
    events: list[Event] = [
        ("response.created", {"type": "response.created", "response": running}),
        ("response.in_progress", {"type": "response.in_progress", "response": running}),
        (
            "response.output_item.added",
            {
                "type": "response.output_item.added",
                "output_index": 0,
                "item": {**item, "status": "in_progress", "content": []},
            },
        ),
        (
            "response.content_part.added",
            {"type": "response.content_part.added", **where, "part": {**part, "text": ""}},
        ),
    ]
    events += [
        (
            "response.output_text.delta",
            {"type": "response.output_text.delta", **where, "delta": p, "logprobs": []},
        )
        for p in pieces
    ]
    final = "response.incomplete" if status == "incomplete" else "response.completed"
    events += [
        (
            "response.output_text.done",
            {"type": "response.output_text.done", **where, "text": text, "logprobs": []},
        ),
        (
            "response.content_part.done",
            {"type": "response.content_part.done", **where, "part": part},
        ),
        (
            "response.output_item.done",
            {"type": "response.output_item.done", "output_index": 0, "item": item},
        ),
        (final, {"type": final, "response": response(status, [item], usage)}),
    ]
    for i, (_, payload) in enumerate(events):
        payload["sequence_number"] = i
    return response(status, [item], usage), events
