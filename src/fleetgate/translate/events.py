"""Stream events as translators see them, and the byte framing around them.

A translated stream is a chain: upstream bytes are cut into events (SSE or NDJSON), each
event's JSON goes through one or more `StreamStage`s, and what comes out is framed in the
client's protocol. Nothing is buffered beyond one partial event.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any, Protocol

import orjson

from fleetgate.execute.sse import CR, DONE, LF
from fleetgate.translate.text_chunks import TextChunks, plain_text_delta

# one event: (the SSE `event:` name or None, its JSON payload); NDJSON ignores the name
Event = tuple[str | None, dict[str, Any]]


class StreamStage(Protocol):
    """Turns the events of one protocol's stream into those of another, incrementally."""

    def feed(self, event: Event) -> list[Event]:
        """Events to emit for one upstream event (an error event included)."""
        ...

    def finish(self) -> list[Event]:
        """Events to emit when the upstream stream has ended (`[DONE]` or its last byte)."""
        ...


class Chain:
    """Stages run one after the other: the first consumes upstream events."""

    __slots__ = ("stages",)

    def __init__(self, stages: Sequence[StreamStage]) -> None:
        self.stages = stages

    def feed(self, event: Event) -> list[Event]:
        events = [event]
        for stage in self.stages:
            events = [out for e in events for out in stage.feed(e)]
        return events

    def finish(self) -> list[Event]:
        events: list[Event] = []
        for stage in self.stages:
            events = [out for e in events for out in stage.feed(e)] + stage.finish()
        return events


_HEADS: dict[str | None, bytes] = {None: b"data: "}  # event name -> its lines' start


def encode_sse(events: list[Event]) -> bytes:
    out = []
    for name, payload in events:
        head = _HEADS.get(name)
        if head is None:
            head = _HEADS[name] = b"event: " + str(name).encode() + b"\ndata: "
        data = b"[DONE]" if payload is DONE_PAYLOAD else orjson.dumps(payload)
        out.append(head + data + b"\n\n")
    return b"".join(out)


def encode_ndjson(events: list[Event]) -> bytes:
    return b"".join([orjson.dumps(payload) + b"\n" for _, payload in events])


# the payload of OpenAI's closing `data: [DONE]` event (compared by identity)
DONE_PAYLOAD: dict[str, Any] = {}
DONE_EVENT: Event = (None, DONE_PAYLOAD)

Encoder = Callable[[list[Event]], bytes]


def _sse_payload(event: bytes) -> tuple[str | None, bytes | None]:
    name = None
    data: list[bytes] = []
    for line in event.split(b"\n"):
        if line.startswith(b"data:"):
            data.append(line[5:].lstrip(b" "))
        elif line.startswith(b"event:"):
            name = line[6:].strip().decode("utf-8", "replace")
    return name, (b"\n".join(data) if data else None)


async def translate_stream(
    upstream: AsyncIterator[bytes], stage: StreamStage, ndjson_in: bool, encode: Encoder
) -> AsyncIterator[bytes]:
    """Upstream bytes in, the client's bytes out: one stage call per whole event.

    A stage that frames plain text deltas itself (`TextStage`) gets the usual chat chunk,
    more text, without it being parsed in full or re-encoded (`text_chunks`).
    """
    sep = b"\n" if ndjson_in else b"\n\n"
    text_delta: Callable[[str, bytes], bytes | None] | None = getattr(stage, "text_delta", None)
    texts = TextChunks() if text_delta is not None and not ndjson_in else None
    text_delta = text_delta or _no_text_delta
    carry = b""
    finished = False
    feed = stage.feed
    loads = orjson.loads
    try:
        async for chunk in upstream:
            block = carry + (chunk.replace(b"\r\n", b"\n") if CR in chunk else chunk)
            whole = block.split(sep)
            carry = whole.pop()  # what follows the last separator: part of the next event
            if not whole:
                continue
            out: list[bytes] = []
            for raw in whole:
                found = None
                if texts is not None:
                    found = texts.match(raw)
                    if found is not None:
                        piece = text_delta(*found)
                        if piece is not None:
                            out.append(piece)
                            continue
                if not ndjson_in and raw[:6] == b"data: " and LF not in raw:
                    data = raw[6:]  # the usual one-line event, decoded here: it is hot
                    if data != DONE:
                        try:
                            payload = loads(data)
                        except orjson.JSONDecodeError:
                            continue
                        if type(payload) is not dict:
                            continue
                        if texts is not None and found is None:
                            text = plain_text_delta(payload)
                            if text is not None:
                                quoted = texts.learn(raw, payload, text)
                                piece = text_delta(text, quoted)
                                if piece is not None:
                                    out.append(piece)
                                    continue
                        events = feed((None, payload))
                        if events:
                            out.append(encode(events))
                        continue
                event = _decode(raw, ndjson_in)
                if event is None:
                    continue
                if event is DONE_EVENT:
                    if not finished:
                        finished = True
                        events = stage.finish()
                        if events:
                            out.append(encode(events))
                    continue
                events = feed(event)
                if events:
                    out.append(encode(events))
            if out:
                yield b"".join(out)
        tail: list[Event] = []
        event = _decode(carry, ndjson_in) if carry.strip() else None
        if event is not None and event is not DONE_EVENT:
            tail.extend(feed(event))
        if not finished:
            tail.extend(stage.finish())
        if tail:
            yield encode(tail)
    finally:
        closer = getattr(upstream, "aclose", None)
        if closer is not None:
            await closer()


def _no_text_delta(text: str, quoted: bytes) -> None:
    return None


def _decode(raw: bytes, ndjson_in: bool) -> Event | None:
    """One whole upstream event; DONE_EVENT for `[DONE]`; None for comments and junk."""
    name = None
    if ndjson_in:
        data: bytes | None = raw.strip()
        if not data:
            return None
    elif raw.startswith(b"data: ") and LF not in raw:  # the usual one-line event
        data = raw[6:]
    else:
        name, data = _sse_payload(raw)
        if data is None:
            return None  # a comment or keep-alive
    if data == DONE:
        return DONE_EVENT
    try:
        payload = orjson.loads(data)
    except orjson.JSONDecodeError:
        return None
    return (name, payload) if type(payload) is dict else None
