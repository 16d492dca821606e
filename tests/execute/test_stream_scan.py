"""What the executor reads in a stream's bytes: every event is JSON, and the last usage.

Both scans run on every streamed answer; each has a fast path for the common form (one
`data:` line per event; the usage near the end) and must agree with reading event by event
on every other form.
"""

from __future__ import annotations

import orjson
import pytest

from fleetgate.execute.framing import NDJSON, SSE
from fleetgate.execute.outcome import Attempt
from fleetgate.execute.sse import single_line_payloads
from fleetgate.execute.usage import stream_usage


def _chunk(content: str, usage: object = None, **extra: object) -> bytes:
    event = {"object": "chat.completion.chunk", "choices": [{"delta": {"content": content}}]}
    return orjson.dumps({**event, "usage": usage, **extra})


def _sse(*payloads: bytes) -> bytes:
    return b"".join(b"data: " + p + b"\n\n" for p in payloads)


USAGE = {"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10}


@pytest.mark.parametrize(
    ("block", "payloads"),
    [
        (_sse(b'{"a":1}', b'{"b":2}', b"[DONE]"), [b'{"a":1}', b'{"b":2}', b"[DONE]"]),
        (_sse(b'{"a":1}'), [b'{"a":1}']),
        (b'event: delta\ndata: {"a":1}\n\n', None),  # a second line: read event by event
        (b'data: {"a":1}\nid: 4\n\ndata: {"b":2}\n\n', None),
        (b'data: {"a":\ndata: 1}\n\n', None),  # one payload over two data lines
        (b'data:{"a":1}\n\n', None),  # no space after the colon
        (b'data: {"a":1}\n\ndata: {"b"', None),  # ends mid-event
        (b": keep-alive\n\n", None),
    ],
)
def test_single_line_payloads_only_for_the_common_form(
    block: bytes, payloads: list[bytes] | None
) -> None:
    assert single_line_payloads(block) == payloads


@pytest.mark.parametrize(
    ("block", "json"),
    [
        (_sse(_chunk("hi"), _chunk("there"), b"[DONE]"), True),
        (_sse(_chunk("hi"), b"<html>502 Bad Gateway</html>", b"[DONE]"), False),
        (_sse(_chunk("hi"), b'{"truncated": '), False),
        (_sse(b""), False),  # an empty payload is no JSON
        # what a validator that builds no objects must still refuse
        (_sse(_chunk("hi"), b'{"a":1}{"b":2}'), False),  # two values in one payload
        (_sse(b'{"a":1} x'), False),  # text after the value
        (_sse(b'{"a":NaN}'), False),
        (_sse(b'{"a":"\\q"}'), False),  # an escape JSON has not
        (_sse(b'{"content":"caf\xe9"}'), False),  # Latin-1, not UTF-8
        (_sse(_chunk("café ☕"), b"[DONE]"), True),  # UTF-8 is
        # one event alone, as a paced stream's reads bring them
        (_sse(_chunk("café ☕")), True),
        (_sse(b"[DONE]"), True),
        (_sse(b"[DONE"), False),
        (_sse(b'{"a":"\\u00ff"}'), True),
        (_sse(b'{"a":"\xff"}'), False),  # not UTF-8
        (b'data:  {"a":1}\n\n', True),  # a space that is the payload's own
        (b'event: delta\ndata: {"a":"\xff"}\n\n', False),  # read event by event
        (b': \xff\n\nevent: delta\ndata: {"a":1}\n\n', True),  # a comment is no payload
        # other forms, read event by event
        (b"event: delta\ndata: " + _chunk("hi") + b"\n\n: ping\n\n", True),
        (b"event: delta\ndata: " + _chunk("hi") + b"\n\nevent: x\ndata: oops\n\n", False),
        (b'data: {"a":\ndata: 1}\n\n', True),
        (b'data:{"a":1}\n\ndata:[DONE]\n\n', True),
    ],
)
def test_every_event_is_json(block: bytes, json: bool) -> None:
    assert (SSE.json_events(block) is not None) is json


def _usage_of(block: bytes, framing: object = SSE) -> tuple[int | None, int | None]:
    attempt = Attempt(0, "d", "p", "m", "s")
    stream_usage(attempt, block, framing)  # type: ignore[arg-type]
    return attempt.prompt_tokens, attempt.completion_tokens


def test_the_last_event_with_usage_gives_it() -> None:
    block = _sse(_chunk("hi"), _chunk("", USAGE), b"[DONE]")
    assert _usage_of(block) == (7, 3)
    # OpenAI's chunks carry `"usage": null` until the last: an empty one after it is skipped
    later_null = _sse(_chunk("", USAGE), _chunk("more", None), b"[DONE]")
    assert _usage_of(later_null) == (7, 3)
    # the last report wins over an earlier one (Anthropic: message_start, message_delta)
    first = orjson.dumps({"type": "message_start", "message": {"usage": {"input_tokens": 5}}})
    delta = orjson.dumps({"type": "message_delta", "usage": {"output_tokens": 9}})
    anthropic = b"event: message_start\ndata: " + first + b"\n\nevent: message_delta\ndata: "
    # ... and the input count is message_start's: message_delta has the output count alone
    assert _usage_of(anthropic + delta + b"\n\n") == (5, 9)
    ping = b"event: ping\ndata: {}\n\n"
    assert _usage_of(anthropic + delta + b"\n\n" + ping) == (5, 9)
    assert _usage_of(b"event: message_delta\ndata: " + delta + b"\n\n") == (None, 9)


def test_usage_split_over_crlf_and_mid_event_starts() -> None:
    crlf = _sse(_chunk("hi"), _chunk("", USAGE)).replace(b"\n", b"\r\n")
    assert _usage_of(crlf) == (7, 3)
    # a tail that starts mid-line (NDJSON): its whole usage object is still read
    line = _chunk("x" * 50, USAGE) + b"\n"
    assert _usage_of(line[20:], NDJSON) == (7, 3)


def test_a_usage_marker_outside_the_payload_is_passed_over() -> None:
    # `"usage"` in a comment line of the last event; the usage is in the event before
    block = _sse(_chunk("", USAGE)) + b': "usage" later\ndata: ' + _chunk("x") + b"\n\n"
    assert _usage_of(block) == (7, 3)


def test_ollama_and_llamacpp_counts() -> None:
    ollama = b"\n".join(
        [
            orjson.dumps({"message": {"content": "hi"}, "done": False}),
            orjson.dumps({"done": True, "prompt_eval_count": 11, "eval_count": 4}),
        ]
    )
    assert _usage_of(ollama + b"\n", NDJSON) == (11, 4)
    # llama.cpp: `timings` after the last `"usage"`
    usage_then_timings = _sse(
        _chunk("", USAGE),
        orjson.dumps({"choices": [], "timings": {"prompt_n": 13, "predicted_n": 2}}),
    )
    assert _usage_of(usage_then_timings) == (13, 2)
    # both in one event: its `usage` is the count
    both = _sse(_chunk("", USAGE, timings={"prompt_n": 13, "predicted_n": 2}))
    assert _usage_of(both) == (7, 3)


@pytest.mark.parametrize(
    ("framing", "block", "events"),
    [
        (SSE, _sse(_chunk("hi"), _chunk("there"), b"[DONE]"), 3),
        # `data:` in an answer's text is no event (a count of the marker said 3)
        (SSE, _sse(_chunk("data: x"), b"[DONE]"), 2),
        (SSE, b"event: delta\ndata: " + _chunk("hi") + b"\n\n: ping\n\n", 1),
        (SSE, b'data: {"a":\ndata: 1}\n\ndata:[DONE]\n\n', 2),
        (SSE, b": keep-alive\n\n", 0),
        (SSE, _sse(_chunk("hi")), 1),  # one event alone
        (SSE, _sse(b"[DONE]"), 1),
        (NDJSON, b'{"a":1}\n{"b":2}\n\n{"done":true}\n', 3),
    ],
)
def test_json_events_counts_the_data_events(framing: object, block: bytes, events: int) -> None:
    assert framing.json_events(block) == events  # type: ignore[attr-defined]
