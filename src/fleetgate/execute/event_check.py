"""The check each relayed block of a stream gets, and, for an answer that may be continued,
where the events that may end it are.

Every block of whole events the relay hands on is checked first: each event's payload must
be JSON (`Framing.json_events`, which also counts the events). An answer that a later
candidate could continue (`execute/resume.py`) needs one more fact from each block: where
the first event that may end the answer starts (a stop reason, Anthropic's block or
message end, Ollama's last line, an error event), so that those events are held back until
the stream's end shows whether the answer was cut.

That fact comes out of the same check. msgspec decodes each payload into a small type that
says what a normal event of the upstream's protocol is (a chat chunk whose stop reason is
null, a Messages delta, an Ollama line that is not done, no error), checking the JSON
grammar as it goes and skipping every field it is not asked about; an event that is not of
that type raises, and only then is the block read event by event to find what the event
is. The events in the middle of a stream cost a typed decode instead of a `Raw` one (a few
tens of nanoseconds), and no byte search.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

import msgspec
import orjson

from fleetgate.execute.framing import DECODE_ERRORS, Framing, check_json, utf8
from fleetgate.execute.sse import DONE

NOTHING, ENDS, RESUMES, ERROR = 0, 1, 2, 3  # what an event that is not a normal one is


class _Choice(msgspec.Struct, gc=False):
    finish_reason: None = None


class _Chunk(msgspec.Struct, gc=False):
    """A chat or completions chunk in the middle of an answer (every choice still open)."""

    choices: list[_Choice]  # an error object has none
    error: None = None


class _MessageEvent(msgspec.Struct, gc=False):
    """A Messages event that neither ends nor starts a block, nor is an error."""

    type: Literal["content_block_delta", "message_delta", "message_start", "ping"]


class _OllamaLine(msgspec.Struct, gc=False):
    """An Ollama line before the last."""

    done: Literal[False] = False
    error: None = None


def _is_error(obj: dict[str, Any]) -> bool:
    # as `Framing.is_error` says: `"error": null` is no failure
    return bool(obj.get("error")) or obj.get("type") == "error" or obj.get("object") == "error"


def _chunk_is(obj: dict[str, Any]) -> int:
    choices = obj.get("choices")
    if isinstance(choices, list) and any(
        isinstance(c, dict) and c.get("finish_reason") is not None for c in choices
    ):
        return ENDS
    return NOTHING


_MESSAGE_ENDS = frozenset({"content_block_stop", "message_stop"})


def _message_is(obj: dict[str, Any]) -> int:
    kind = obj.get("type")
    if kind == "content_block_start":
        return RESUMES  # a block after a block's end: that end was not the answer's
    return ENDS if kind in _MESSAGE_ENDS else NOTHING


def _ollama_is(obj: dict[str, Any]) -> int:
    return ENDS if obj.get("done") is True else NOTHING


Decode = Callable[[bytes], object]
Kind = Callable[[dict[str, Any]], int]
_chunk = msgspec.json.Decoder(_Chunk).decode
# upstream endpoint -> (the decode of its normal events, what another event is)
_SHAPES: dict[str, tuple[Decode, Kind]] = {
    "chat.completions": (_chunk, _chunk_is),
    "completions": (_chunk, _chunk_is),
    "messages": (msgspec.json.Decoder(_MessageEvent).decode, _message_is),
    "ollama.chat": (msgspec.json.Decoder(_OllamaLine).decode, _ollama_is),
}


_UNREAD = object()


def _index(parts: list[bytes], part: bytes) -> int:
    """Where `part` (one of `parts`, itself) is in `parts`."""
    return next(i for i, p in enumerate(parts) if p is part)


def _decodes(decode: Decode, data: bytes) -> bool:
    """Whether `data` is a normal event (JSON of the normal type)."""
    try:
        decode(data)
    except msgspec.ValidationError:
        return False
    return True


def _parsed(data: bytes) -> object:
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        return _UNREAD


class EndCheck:
    """The check of one continuable stream's blocks: `events` as `Framing.json_events`,
    and after a block that has an event that may end the answer (`pending`), `take` says
    what of it goes to the client now and holds the rest."""

    __slots__ = ("_decode", "_kind", "at", "errored", "framing", "held", "pending", "resumes")

    def __init__(self, framing: Framing, endpoint: str) -> None:
        self.framing = framing
        self._decode, self._kind = _SHAPES.get(endpoint, _SHAPES["chat.completions"])
        self.held: list[bytes] = []  # the events held back, as read
        self.pending = False  # the last block has an end, or events are held
        self.at = -1  # where the first end after the last block start is, in the last block
        self.resumes = False  # the last block has a Messages block start
        self.errored = False  # an error event came

    def events(self, block: bytes) -> int | None:
        """How many data events a block of whole events holds, None when one is not JSON
        (as `Framing.json_events`); notes where the first that may end the answer is."""
        decode = self._decode
        done = DONE
        framing = self.framing
        payloads: list[bytes] | None = None
        parts: list[bytes] = []
        data = event = b""
        events = 0
        try:
            payloads = framing.payloads(block)
            if payloads is not None:  # each `data: <payload>\n\n`
                utf8(block)
                for data in payloads:
                    if data != done:
                        decode(data)
                return len(payloads)
            payload = framing.payload
            parts = block.split(framing.separator)
            for event in parts:
                if not event:
                    continue
                data = payload(event)
                if data is not None:
                    events += 1
                    if data != done:
                        utf8(data)
                        decode(data)
        except msgspec.ValidationError:  # JSON perhaps, but not a normal event: read on
            if payloads is not None:
                i = _index(payloads, data)
                return self._read(payloads, i, 8, None, i)
            return self._read(
                parts, _index(parts, event), len(framing.separator), payload, events - 1
            )
        except DECODE_ERRORS:
            return None
        return events

    def _read(
        self,
        parts: list[bytes],
        i: int,
        framing: int,
        payload: Callable[[bytes], bytes | None] | None,
        events: int,
    ) -> int | None:
        """`events` of a block whose part `i` is not a normal event: the parts before it are
        (`events` data events), the rest are read one by one (part `i` is not decoded as a
        normal event again). A part takes its bytes and `framing` bytes of the block
        (`payload` reads its data; None: it is the data)."""
        at = sum(map(len, parts[:i])) + i * framing  # where part `i` starts in the block
        decode = self._decode
        odd = parts[i]
        try:
            for part in parts[i:]:
                data = part if payload is None else payload(part)
                if data is not None:
                    events += 1
                    if data != DONE:
                        utf8(data)
                        if part is odd or not _decodes(decode, data):
                            check_json(data)
                            self._note(_parsed(data), at)
                at += len(part) + framing
        except DECODE_ERRORS:
            return None
        return events

    def _note(self, obj: object, at: int) -> None:
        if obj is _UNREAD:
            kind = ENDS  # JSON orjson cannot hold (an integer past 64 bits): held, to be safe
        elif not isinstance(obj, dict):
            return
        else:
            kind = ERROR if _is_error(obj) else self._kind(obj)
        if kind == NOTHING:
            return
        self.pending = True
        if kind == RESUMES:
            if not self.errored:
                self.at = -1
                self.resumes = True
            return
        if kind == ERROR:
            self.errored = True
        if self.at < 0:
            self.at = at

    def take(self, whole: bytes) -> bytes:
        """What of a checked block goes to the client now; what may end the answer is held
        (`held`) until the stream's end."""
        held = self.held
        at, self.at = self.at, -1
        resumes, self.resumes = self.resumes, False
        if held and not resumes:
            held.append(whole)
            return b""
        out = whole if at < 0 else whole[:at]
        if held:  # a block starts after the held end: what was held was no end
            out = b"".join(held) + out
            held.clear()
        if at >= 0:
            held.append(whole[at:])
        self.pending = bool(held)
        return out

    def rest(self) -> bytes:
        """What is held, for the client after all."""
        out = b"".join(self.held)
        self.held.clear()
        return out
