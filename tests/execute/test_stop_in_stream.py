"""The stop reason of a stream, read from its end's bytes by one backward search.

It must give what reading the events in order gives: the last stop reason, in every
protocol's spelling, never one quoted inside a string.
"""

from __future__ import annotations

import orjson
from hypothesis import given
from hypothesis import strategies as st

from fleetgate.execute.usage import LENGTH, stop_in_stream


def _sse(*events: object) -> bytes:
    return b"".join(b"data: " + orjson.dumps(e) + b"\n\n" for e in events)


def _chat(finish: str | None, content: str = "x") -> dict[str, object]:
    return {"choices": [{"index": 0, "delta": {"content": content}, "finish_reason": finish}]}


USAGE = {"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 2}}


def test_each_protocols_last_stop_reason() -> None:
    assert stop_in_stream(_sse(_chat(None), _chat("stop"), USAGE) + b"data: [DONE]\n\n") == "stop"
    assert stop_in_stream(_sse(_chat(None), _chat("length"))) == LENGTH
    delta = {"type": "message_delta", "delta": {"stop_reason": "max_tokens"}}
    assert stop_in_stream(b"event: message_delta\n" + _sse(delta)) == LENGTH
    ollama = b'{"done":true,"done_reason":"stop","eval_count":4}\n'
    assert stop_in_stream(ollama) == "stop"
    details = {"incomplete_details": {"reason": "max_output_tokens"}}
    responses = _sse({"type": "response.incomplete", "response": details})
    assert stop_in_stream(responses) == LENGTH
    spaced = b'data: {"incomplete_details" : { "reason" : "content_filter"}}\n\n'
    assert stop_in_stream(spaced) == "content_filter"


def test_no_reason_and_reasons_that_are_not_keys() -> None:
    assert stop_in_stream(_sse(_chat(None), _chat(None))) is None
    assert stop_in_stream(b"") is None
    # a reason quoted inside a string is text, not a key
    quoted = _sse(_chat(None, content='he wrote "finish_reason": "stop" and "reason": "x"'))
    assert stop_in_stream(quoted) is None
    # a key cut off at the tail's start cannot be told apart from another: none
    assert stop_in_stream(b'reason":"stop"}]}\n\n') is None
    assert stop_in_stream(b'_reason":"stop"}]}\n\n') is None
    # a bare `"reason"` outside incomplete_details is no stop reason
    assert stop_in_stream(_sse({"error": {"reason": "oops"}})) is None


_EVENTS = st.one_of(
    st.builds(_chat, st.sampled_from([None, "stop", "length", "tool_calls"]), st.text(max_size=30)),
    st.just(USAGE),
    st.builds(
        lambda r: {"type": "message_delta", "delta": {"stop_reason": r}},
        st.sampled_from(["end_turn", "max_tokens", None]),
    ),
    st.builds(
        lambda r: {"response": {"incomplete_details": {"reason": r}}},
        st.sampled_from(["max_output_tokens", "content_filter"]),
    ),
)


def _reference(events: list[dict[str, object]]) -> str | None:
    """The last stop reason, event by event, parsed."""
    found = None
    for event in events:
        reason = None
        choices = event.get("choices")
        if isinstance(choices, list) and choices:
            reason = choices[0]["finish_reason"]
        delta = event.get("delta")
        if isinstance(delta, dict):
            reason = delta.get("stop_reason")
        response = event.get("response")
        if isinstance(response, dict):
            reason = response["incomplete_details"]["reason"]
        if isinstance(reason, str):
            found = LENGTH if reason in ("length", "max_tokens", "max_output_tokens") else reason
    return found


@given(st.lists(_EVENTS, max_size=12))
def test_agrees_with_reading_every_event(events: list[dict[str, object]]) -> None:
    assert stop_in_stream(_sse(*events)) == _reference(events)
