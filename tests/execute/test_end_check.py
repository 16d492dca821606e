"""Where a continuable answer's ends are, found by the JSON check each relayed block gets.

`EndCheck.events` counts a block's events and checks they are JSON, as `Framing.json_events`
does, and notes the first event that may end the answer (held back until the stream's end
says whether the answer was cut): a stop reason, a Messages block or message end, Ollama's
last line, an error event. Only the event's fields count, never its text.
"""

from __future__ import annotations

import orjson
import pytest

from fleetgate.execute.event_check import EndCheck
from fleetgate.execute.framing import NDJSON, SSE, Framing


def _chunk(content: str, finish: str | None = None, **extra: object) -> bytes:
    choice = {"index": 0, "delta": {"content": content}, "finish_reason": finish}
    return (
        b"data: "
        + orjson.dumps({"object": "chat.completion.chunk", "choices": [choice], **extra})
        + b"\n\n"
    )


def _message(kind: str, **fields: object) -> bytes:
    return (
        b"event: " + kind.encode() + b"\ndata: " + orjson.dumps({"type": kind, **fields}) + b"\n\n"
    )


def _line(**fields: object) -> bytes:
    return orjson.dumps({"model": "m", **fields}) + b"\n"


TEXT = _message("content_block_delta", index=0, delta={"type": "text_delta", "text": "hi"})
STOP = _message("content_block_stop", index=0)
START = _message("content_block_start", index=1, content_block={"type": "text", "text": ""})


def _taken(check: EndCheck, *blocks: bytes) -> bytes:
    """What of `blocks` goes to the client as the relay reads them."""
    out = b""
    for block in blocks:
        assert check.events(block) is not None
        out += check.take(block) if check.pending else block
    return out


@pytest.mark.parametrize(
    ("endpoint", "framing", "middle", "end"),
    [
        ("chat.completions", SSE, _chunk("a") + _chunk("b"), _chunk("", "length")),
        ("completions", SSE, _chunk("a"), _chunk("", "stop") + b"data: [DONE]\n\n"),
        ("messages", SSE, TEXT + TEXT, STOP + _message("message_stop")),
        ("ollama.chat", NDJSON, _line(done=False) * 2, _line(done=True, eval_count=3)),
    ],
)
def test_the_first_event_that_may_end_the_answer_is_held(
    endpoint: str, framing: Framing, middle: bytes, end: bytes
) -> None:
    check = EndCheck(framing, endpoint)
    assert check.events(middle) == framing.json_events(middle)
    assert not check.pending  # the events in the middle: nothing to hold
    block = middle + end
    assert check.events(block) == framing.json_events(block)
    assert check.pending and check.take(block) == middle
    assert _taken(check, middle) == b""  # once something is held, so is what follows
    assert check.rest() == end + middle and not check.errored


def test_words_of_an_end_in_the_text_end_nothing() -> None:
    check = EndCheck(SSE, "chat.completions")
    said = _chunk('"finish_reason":"stop" and "error": here') + _chunk("", None, error=None)
    assert check.events(said) == 2 and not check.pending


def test_an_error_event_is_an_end_and_an_error() -> None:
    check = EndCheck(SSE, "chat.completions")
    error = b'data: {"error":{"message":"overloaded","code":503}}\n\n'
    assert _taken(check, _chunk("a") + error) == _chunk("a")
    assert check.errored and check.rest() == error
    # vLLM's error object, with no "error" key
    check = EndCheck(SSE, "chat.completions")
    assert _taken(check, b'data: {"object":"error","message":"x"}\n\n') == b""
    assert check.errored


def test_a_messages_block_start_after_a_block_end_releases_it() -> None:
    check = EndCheck(SSE, "messages")
    # the block's end is held, the next block's start says it was not the answer's end
    assert _taken(check, TEXT + STOP) == TEXT
    assert _taken(check, START + TEXT) == STOP + START + TEXT
    assert not check.pending
    # in one block: the end after the last start is what is held
    check = EndCheck(SSE, "messages")
    assert _taken(check, TEXT + STOP + START + TEXT + STOP) == TEXT + STOP + START + TEXT
    assert check.rest() == STOP


@pytest.mark.parametrize(
    "block",
    [b"data: {not json}\n\n", _chunk("a") + b'data: {"choices": [}\n\n', b"data: \xff\n\n"],
)
def test_an_event_that_is_not_json_is_said(block: bytes) -> None:
    assert EndCheck(SSE, "chat.completions").events(block) is None


def test_an_event_of_another_shape_that_is_json_ends_nothing() -> None:
    check = EndCheck(SSE, "chat.completions")
    odd = b"data: [1, 2]\n\n" + b'data: {"choices": null}\n\n' + _chunk("a")
    assert check.events(odd) == 3 and not check.pending


def test_an_event_orjson_cannot_read_is_held_to_be_safe() -> None:
    """JSON with an integer past 64 bits: msgspec checks it, orjson cannot build it."""
    check = EndCheck(SSE, "chat.completions")
    odd = b'data: {"choices": [{"finish_reason": "stop"}], "seed": 123456789012345678901234}\n\n'
    assert check.events(_chunk("a") + odd) == 2
    assert check.pending and check.take(_chunk("a") + odd) == _chunk("a")
