"""The stream fast path (`translate.text_chunks`): plain text chunks read without a full
parse and framed from prebuilt bytes give exactly what the event-by-event translators give,
whatever the upstream's JSON style, and a chunk that is more than text is never read as one.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import random
import time
import types
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import contextmanager
from typing import Any
from unittest import mock

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fleetgate.translate import anthropic_chat as ac
from fleetgate.translate import ollama_chat as oc
from fleetgate.translate import responses_chat as rc
from fleetgate.translate.events import (
    Encoder,
    Event,
    encode_ndjson,
    encode_sse,
    translate_stream,
)
from fleetgate.translate.text_chunks import TextChunks, plain_text_delta

STAGES: dict[str, tuple[Callable[[str], Any], Encoder]] = {
    "messages": (ac.ChatToMessagesStream, encode_sse),
    "responses": (rc.ChatToResponsesStream, encode_sse),
    # an Ollama stream's durations count from the attempt's start: here, the stream's
    "ollama chat": (lambda m: oc.ChatToOllamaChatStream(m, time.perf_counter_ns()), encode_ndjson),
    "ollama generate": (
        lambda m: oc.ChatToGenerateStream(m, time.perf_counter_ns()),
        encode_ndjson,
    ),
}
# durations an Ollama `done` line measures itself (they differ from run to run)
_MEASURED = ("total_duration", "prompt_eval_duration", "eval_duration")


@contextmanager
def fixed_ids() -> Iterator[None]:
    """Ids and timestamps that repeat from one run to the next."""
    counter = itertools.count()

    def new_id(prefix: str) -> str:
        return f"{prefix}{next(counter):024d}"

    with (
        mock.patch.object(ac, "new_id", new_id),
        mock.patch.object(rc, "new_id", new_id),
        mock.patch.object(oc, "_stamp", lambda: "2025-01-01T00:00:00.000000000Z"),
        # a Responses stream stamps `created_at` with the clock's second: the gateway's run
        # and the reference's may fall on either side of a second's edge
        mock.patch.object(rc, "time", types.SimpleNamespace(time=lambda: 1735689600.0)),
    ):
        yield


async def _pieces(data: bytes, cuts: list[int]) -> AsyncIterator[bytes]:
    start = 0
    for cut in [*sorted(cuts), len(data)]:
        yield data[start:cut]
        start = cut


def through_gateway(stage: str, upstream: bytes, cuts: list[int]) -> bytes:
    """What `translate_stream` (fast path included) sends the client."""
    factory, encode = STAGES[stage]

    async def run() -> bytes:
        parts = [
            p async for p in translate_stream(_pieces(upstream, cuts), factory("m"), False, encode)
        ]
        return b"".join(parts)

    with fixed_ids():
        return asyncio.run(run())


def reference(stage: str, upstream: bytes) -> bytes:
    """The same stream fed to the translator one parsed event at a time (no fast path)."""
    factory, encode = STAGES[stage]
    events: list[Event] = []
    done = False
    with fixed_ids():
        translator = factory("m")
        for raw in upstream.split(b"\n\n"):
            if not raw.startswith(b"data: "):
                continue
            if raw[6:] == b"[DONE]":
                events += translator.finish()
                done = True
                break
            try:
                payload = orjson.loads(raw[6:])
            except orjson.JSONDecodeError:
                continue  # what the gateway does with an event that is not JSON
            events += translator.feed((None, payload))
        if not done:
            events += translator.finish()
        return encode(events)


def parsed(stage: str, body: bytes) -> list[Any]:
    """The client's events as (name, payload), measured durations left out."""
    if STAGES[stage][1] is encode_ndjson:
        lines = [orjson.loads(line) for line in body.splitlines()]
        return [{k: v for k, v in line.items() if k not in _MEASURED} for line in lines]
    out = []
    for raw in body.split(b"\n\n"):
        if raw:
            head, data = raw.split(b"\ndata: ")
            out.append((head.removeprefix(b"event: ").decode(), orjson.loads(data)))
    return out


# ---- upstream streams in the JSON styles engines write ----------------------------------

TICK = 3  # chunks per second of a `ticking` engine's timestamp
STYLES = (
    "orjson",
    "python-json",
    "llama.cpp",
    "sglang",
    "openrouter",
    "ticking",
    "obfuscated",
    "counted",
)


def _chunk(
    style: str, n: int, delta: dict[str, Any] | None, finish: Any = None, **top: Any
) -> bytes:
    """One chat chunk, number `n` of its stream, as the engine of `style` writes it (no
    choice for a `delta` of None: the usage chunk)."""
    choice: dict[str, Any] = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
    created = 1700000000 + (n // TICK if style == "ticking" else 0)
    head = {"id": "chatcmpl-q1", "object": "chat.completion.chunk", "created": created}
    chunk: dict[str, Any] = {**head, "model": "up", "choices": [choice], **top}
    if style == "llama.cpp":  # choices first, content in the middle of the line
        choice = {"finish_reason": finish, "index": 0, "delta": delta}
        chunk = {"choices": [choice], **head, "model": "up", "system_fingerprint": "b1", **top}
    if delta is None:
        chunk["choices"] = []
        return b"data: " + orjson.dumps(chunk) + b"\n\n"
    elif style == "sglang":
        full = {"role": None, "content": None, "reasoning_content": None, "tool_calls": None}
        choice["delta"] = {**full, **delta}
        chunk.setdefault("usage", None)
    elif style == "openrouter":
        choice["delta"] = {"role": "assistant", **delta}
    elif style == "obfuscated":  # OpenAI's padding: a different tail every chunk
        chunk["obfuscation"] = "xY\\/"[: n % 5] * (n % 3)
    elif style == "counted":  # a field inside the choice that changes every chunk
        choice["seq"] = n
    if style == "python-json":  # \uXXXX escapes, ", " and ": " separators
        return b"data: " + json.dumps(chunk).encode() + b"\n\n"
    return b"data: " + orjson.dumps(chunk) + b"\n\n"


# texts that stress escaping: quotes, backslashes, control characters, non-BMP, U+2028
tricky_text = st.text(min_size=0, max_size=8) | st.sampled_from(
    ['"', "\\", '\\"', "a\nb", "\t\r\x00\x1f", "😀", "\u2028\u2029", "é", "content", '"}],'],
)
step = st.one_of(
    st.tuples(st.just("text"), tricky_text),
    st.tuples(st.just("reasoning"), st.text(min_size=1, max_size=5)),
    st.tuples(st.just("tool"), st.text(min_size=1, max_size=6)),
    st.tuples(st.just("empty"), st.just("")),
)


def upstream_stream(style: str, steps: list[tuple[str, str]], finish: str) -> bytes:
    events = [_chunk(style, 0, {"role": "assistant", "content": ""})]
    calls = 0
    for n, (kind, value) in enumerate(steps, 1):
        if kind == "text":
            events.append(_chunk(style, n, {"content": value}))
        elif kind == "reasoning":
            events.append(_chunk(style, n, {"reasoning_content": value}))
        elif kind == "tool":
            call = {"index": calls, "id": f"call_{calls}", "type": "function"}
            call["function"] = {"name": "f", "arguments": ""}
            events.append(_chunk(style, n, {"tool_calls": [call]}))
            piece = {"index": calls, "function": {"arguments": orjson.dumps(value).decode()}}
            events.append(_chunk(style, n, {"tool_calls": [piece]}))
            calls += 1
        else:
            events.append(_chunk(style, n, {}))
    events.append(_chunk(style, len(steps) + 1, {}, finish))
    usage = {"prompt_tokens": 7, "completion_tokens": len(steps), "total_tokens": 7 + len(steps)}
    events.append(_chunk(style, len(steps) + 2, None, usage=usage))
    return b"".join(events) + b"data: [DONE]\n\n"


@settings(max_examples=300, deadline=None)
@given(
    st.sampled_from(sorted(STAGES)),
    st.sampled_from(STYLES),
    st.lists(step, max_size=12),
    st.sampled_from(["stop", "length", "tool_calls"]),
    st.randoms(use_true_random=False),
)
def test_the_fast_path_gives_what_the_translator_gives(
    stage: str, style: str, steps: list[tuple[str, str]], finish: str, rnd: random.Random
) -> None:
    upstream = upstream_stream(style, steps, finish)
    cuts = rnd.sample(range(len(upstream)), k=min(len(upstream), rnd.choice([0, 1, 3, 40])))
    got = through_gateway(stage, upstream, cuts)
    want = reference(stage, upstream)
    assert parsed(stage, got) == parsed(stage, want)
    if style != "python-json" and STAGES[stage][1] is encode_sse:
        assert got == want  # the same escapes upstream and here: the very same bytes


def _stream(*chunks: bytes) -> bytes:
    return b"".join(chunks) + b"data: [DONE]\n\n"


def _texts(stage: str, body: bytes) -> list[str]:
    events = parsed(stage, body)
    if stage == "messages":
        deltas = [d["delta"] for k, d in events if k == "content_block_delta"]
        return [d["text"] for d in deltas if d["type"] == "text_delta"]
    if stage == "responses":
        return [d["delta"] for k, d in events if k == "response.output_text.delta"]
    if stage == "ollama chat":
        return [line["message"]["content"] for line in events if line["message"]["content"]]
    return [line["response"] for line in events if line["response"]]


@pytest.mark.parametrize("stage", sorted(STAGES))
@pytest.mark.parametrize("style", ["orjson", "python-json", "llama.cpp"])
def test_escapes_and_unicode_reach_the_client_exactly(stage: str, style: str) -> None:
    texts = ['say "hi"', "back\\slash", "two\nlines\t", "\u2028", "😀 é", "\x00", '}],"x']
    chunks = [_chunk(style, 0, {"role": "assistant", "content": ""})]
    chunks += [_chunk(style, n, {"content": t}) for n, t in enumerate(texts, 1)]
    body = through_gateway(stage, _stream(*chunks), [])
    assert _texts(stage, body) == texts


def _learned(style: str = "orjson") -> tuple[TextChunks, bytes]:
    texts = TextChunks()
    raw = _chunk(style, 1, {"content": "one"}).rstrip(b"\n")
    payload = orjson.loads(raw[6:])
    assert plain_text_delta(payload) == "one"
    assert texts.learn(raw, payload, "one") == b'"one"'
    return texts, raw


def test_a_chunk_in_the_frame_carrying_more_than_text_is_not_read_as_text() -> None:
    texts, raw = _learned()
    start = raw.index(b'"one"')
    call = b'{"index":0,"id":"call_9","type":"function","function":{"name":"f","arguments":"{}"}}'
    forged = raw[:start] + b'"a","tool_calls":[' + call + b"]" + raw[start + 5 :]
    assert orjson.loads(forged[6:])["choices"][0]["delta"]["tool_calls"]  # valid JSON
    assert texts.match(forged) is None
    assert texts.match(raw[:start] + b'"two \\"quoted\\""' + raw[start + 5 :]) == (
        'two "quoted"',
        b'"two \\"quoted\\""',
    )
    # through the gateway the call is seen, as without the fast path
    role = _chunk("orjson", 0, {"role": "assistant", "content": ""})
    body = through_gateway("messages", _stream(role, raw + b"\n\n", forged + b"\n\n"), [])
    events = parsed("messages", body)
    blocks = [d["content_block"]["type"] for k, d in events if k == "content_block_start"]
    assert blocks == ["text", "tool_use"] and _texts("messages", body) == ["one", "a"]


def test_chunks_that_are_not_plain_text_are_never_learned_or_matched() -> None:
    cases = [
        {"choices": [{"index": 0, "delta": {"content": ""}, "finish_reason": None}]},
        {"choices": [{"index": 0, "delta": {"content": "a"}, "finish_reason": "stop"}]},
        {"choices": [{"index": 0, "delta": {"content": "a"}}], "usage": {"prompt_tokens": 1}},
        {"choices": [{"index": 0, "delta": {"content": "a"}}], "timings": {"prompt_ms": 1.0}},
        {"choices": [{"index": 0, "delta": {"content": "a", "reasoning_content": "r"}}]},
        {"choices": [{"index": 0, "delta": {"content": "a", "tool_calls": [{"index": 0}]}}]},
        {"choices": [{"index": 0, "delta": {"content": "a"}}], "error": {"message": "boom"}},
        {"choices": [{"index": 0, "delta": {"content": "a"}, "logprobs": {"content": []}}]},
        {"choices": [{"delta": {"content": "a"}}, {"delta": {"content": "b"}}]},
    ]
    for chunk in cases:
        assert plain_text_delta(chunk) is None, chunk
    texts, raw = _learned()
    empty = raw.replace(b'"one"', b'""')
    assert texts.match(empty) is None  # an empty text goes the translator's way
    assert texts.match(raw.replace(b'"one"', b'"bad \x01 byte"')) is None  # not JSON
    assert texts.match(raw.replace(b'"one"', b'"\xff"')) is None  # not UTF-8


def test_a_duplicate_content_key_is_read_as_json_reads_it() -> None:
    line = (
        b'data: {"choices":[{"index":0,"delta":{"content":"first","content":"last"},'
        b'"finish_reason":null}]}'
    )
    payload = orjson.loads(line[6:])
    texts = TextChunks()
    assert texts.learn(line, payload, "last") == b'"last"'
    assert texts.match(line.replace(b'"last"', b'"next"')) == ("next", b'"next"')
    assert texts.match(line.replace(b'"first"', b'"other"')) is None


def _read_all(style: str, chunks: int) -> TextChunks:
    texts = TextChunks()
    for n in range(chunks):
        raw = _chunk(style, n, {"content": f"w{n}"}).rstrip(b"\n")
        if texts.match(raw) is None:
            texts.learn(raw, orjson.loads(raw[6:]), f"w{n}")
    return texts


def test_a_padding_field_is_learned_as_free_and_other_changes_stop_the_learning() -> None:
    padded = _read_all("obfuscated", 200)  # learned twice: the frame, then its free field
    assert (padded.learnings, padded.hits) == (2, 198)
    counted = _read_all("counted", 200)  # a new frame every chunk: not worth learning
    assert (counted.learnings, counted.hits) == (2, 0)
    # a field some translator reads (here the id) is never free, even when only it changes
    texts = TextChunks()
    for n in range(10):
        raw = b'data: {"choices":[{"index":0,"delta":{"content":"w"}}],"id":"c%d"}' % n
        if texts.match(raw) is None:
            texts.learn(raw, orjson.loads(raw[6:]), "w")
    assert (texts.learnings, texts.hits) == (2, 0)


def test_a_chunk_whose_free_field_carries_more_is_not_read_as_text() -> None:
    texts = TextChunks()
    for n in range(3):
        raw = _chunk("obfuscated", n + 1, {"content": "w"}).rstrip(b"\n")
        if texts.match(raw) is None:
            texts.learn(raw, orjson.loads(raw[6:]), "w")
    raw = _chunk("obfuscated", 4, {"content": "hit"}).rstrip(b"\n")
    assert texts.match(raw) == ("hit", b'"hit"')
    start = raw.rindex(b'"obfuscation":') + len(b'"obfuscation":')
    usage = b'"p","usage":{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4}}'
    forged = raw[:start] + usage
    assert orjson.loads(forged[6:])["usage"]["prompt_tokens"] == 3  # valid JSON
    assert texts.match(forged) is None
    assert texts.match(raw[:start] + b'"\\\\"}') == ("hit", b'"hit"')  # an escape in the pad

    ticking = TextChunks()
    with mock.patch(f"{__name__}.TICK", 20):
        for n in range(200):  # a timestamp that ticks every 20 chunks: learned again each time
            raw = _chunk("ticking", n, {"content": f"w{n}"}).rstrip(b"\n")
            if ticking.match(raw) is None:
                ticking.learn(raw, orjson.loads(raw[6:]), f"w{n}")
    assert ticking.learnings == 10 and ticking.hits == 190


@pytest.mark.parametrize("stage", sorted(STAGES))
def test_the_first_text_goes_out_with_the_first_upstream_read(stage: str) -> None:
    """One upstream read, one client write, at once: nothing waits for a later chunk."""
    upstream = [
        _chunk("orjson", 0, {"role": "assistant", "content": "Hi"}),
        _chunk("orjson", 1, {"content": " there"}),
        _chunk("orjson", 2, {"content": " you"}),
    ]
    factory, encode = STAGES[stage]

    async def run() -> list[list[str]]:
        reads: asyncio.Queue[bytes] = asyncio.Queue()

        async def source() -> AsyncIterator[bytes]:
            while True:
                yield await reads.get()

        stream = translate_stream(source(), factory("m"), False, encode)
        seen = []
        for chunk in upstream:  # the next read only once the last one went out
            reads.put_nowait(chunk)
            out = await asyncio.wait_for(anext(stream), 5)
            seen.append(_texts(stage, out))
        await stream.aclose()
        return seen

    assert asyncio.run(run()) == [["Hi"], [" there"], [" you"]]
