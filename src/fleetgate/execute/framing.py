"""How a streamed answer is cut into events (SSE or NDJSON) and how its errors look.

The executor reads the first event of a stream before answering, to fall back on an
in-stream error; this module tells it where events end, which payload an event holds,
whether that payload is an error, and what a gateway error event looks like in the
client's protocol.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import msgspec
import orjson

from fleetgate.execute import ndjson, sse
from fleetgate.execute.rewrite import ModelRewriter

SSE_CONTENT_TYPE = "text/event-stream"

# Whether a payload is one JSON value, without building it: msgspec skips over what it
# is not asked to keep (`Raw`), checking the grammar as it goes, a quarter of the CPU of
# `orjson.loads` on a completion chunk. It does not look inside the strings it skips for
# UTF-8: `json_events` checks the payloads' bytes with `utf8` instead.
check_json = msgspec.json.Decoder(msgspec.Raw).decode
DECODE_ERRORS = (msgspec.DecodeError, UnicodeDecodeError)


def utf8(block: bytes) -> None:
    """Raises UnicodeDecodeError unless `block` is UTF-8 (as JSON text must be)."""
    if not block.isascii():
        block.decode()


@dataclass(frozen=True, slots=True)
class Framing:
    name: str  # "sse" | "ndjson"
    separator: bytes  # what ends one event
    payload: Callable[[bytes], bytes | None]  # the JSON an event carries (None: none)
    suspect_error: Callable[[bytes], bool]  # cheap byte test; confirmed by parsing
    # every payload of a block of whole events at once, when its events have the common
    # form (None: read them event by event)
    payloads: Callable[[bytes], list[bytes] | None] = lambda _block: None
    # what begins an event whose one line is its payload (SSE's `data: `; b"": none)
    prefix: bytes = b""

    def is_error(self, data: bytes) -> bool:
        if data == sse.DONE or not self.suspect_error(data):
            return False
        try:
            obj = orjson.loads(data)
        except orjson.JSONDecodeError:
            return False
        # `"error": null` is a normal field of e.g. a Responses event, not a failure
        return isinstance(obj, dict) and (
            bool(obj.get("error")) or obj.get("type") == "error" or obj.get("object") == "error"
        )

    def first_data(self, block: bytes) -> bytes | None:
        """The payload of the first event of `block` that carries data (`[DONE]` is none);
        None while none has come."""
        sep = self.separator
        at = 0
        while at < len(block):
            end = block.find(sep, at)
            end = len(block) if end < 0 else end
            data = self.payload(block[at:end])
            at = end + len(sep)
            if data is not None and data != sse.DONE:
                return data
        return None

    def json_events(self, block: bytes) -> int | None:
        """How many data events a block of whole events holds (`[DONE]` included) when
        every one carries JSON (or is `[DONE]`); None when one does not. The executor
        checks each block it relays with this, and counts the answer's events with it."""
        prefix = self.prefix
        sep = self.separator
        start, stop = len(prefix), -len(sep)
        payloads: list[bytes] | None = None
        try:
            # events of one `data: ` line each (slices compared: cheaper than startswith
            # and endswith, which parse their arguments)
            if prefix and block[:start] == prefix and block[stop:] == sep:
                data = block[start:stop]
                if sse.LF not in data:  # one, as a paced stream's reads bring them
                    if not block.isascii():
                        block.decode()
                    if data != sse.DONE:
                        check_json(data)
                    return 1
                payloads = sse.data_payloads(data)
            elif not prefix:
                payloads = self.payloads(block)
            if payloads is None:
                return self._each_event(block)
            return self._checked(block, payloads)
        except DECODE_ERRORS:
            return None

    def line_events(self, block: bytes, data: bytes) -> int | None:
        """`json_events` of a block that is `prefix`, `data` and the separator, `data`
        holding a line break: one-line payloads read with one split
        (`sse.data_payloads`), else event by event."""
        payloads = sse.data_payloads(data)
        if payloads is None:
            return self._each_event(block)
        try:
            return self._checked(block, payloads)
        except DECODE_ERRORS:
            return None

    @staticmethod
    def _checked(block: bytes, payloads: list[bytes]) -> int:
        """How many `payloads` a block of them and ASCII framing holds; raises
        DECODE_ERRORS when one is not JSON or the block is not UTF-8."""
        if not block.isascii():
            block.decode()
        done = sse.DONE
        for data in payloads:
            if data != done:
                check_json(data)
        return len(payloads)

    def _each_event(self, block: bytes) -> int | None:
        """`json_events`, event by event."""
        payload = self.payload
        done = sse.DONE
        events = 0
        try:
            for event in block.split(self.separator):
                if not event:
                    continue  # the split after the last separator
                data = payload(event)
                if data is not None:
                    events += 1
                    if data != done:
                        utf8(data)  # payloads only: a comment's bytes are nobody's JSON
                        check_json(data)
        except DECODE_ERRORS:
            return None
        return events

    def rewrite(self, rewriter: ModelRewriter, block: bytes) -> bytes:
        """Set the client's model name in a block of whole events."""
        if rewriter.identity:
            return block
        # the compact pair first, as `ModelRewriter.json` does, without its call: a
        # relayed stream's every block comes here
        rewritten = block.replace(rewriter.compact, rewriter.compact_to)
        if rewritten is not block:
            return rewritten
        return self.rewrite_other(rewriter, block)

    def rewrite_other(self, rewriter: ModelRewriter, block: bytes) -> bytes:
        """`rewrite` of a block the compact pair (`ModelRewriter.compact`) is not in."""
        rewritten = rewriter.json(block, compact_tried=True)
        if rewritten is not block or b'"model"' not in block:
            return rewritten
        # an upstream that answers with another name: rewrite event by event
        if self.name == "ndjson":
            lines = block.split(b"\n")
            return b"\n".join(rewriter.json(line) if line else line for line in lines)
        out = []
        for event in block.split(b"\n\n"):
            lines = event.split(b"\n")
            for i, line in enumerate(lines):
                if line.startswith(b"data:"):
                    data = line[5:].lstrip(b" ")
                    if data.startswith(b"{"):
                        lines[i] = b"data: " + rewriter.json(data)
            out.append(b"\n".join(lines))
        return b"\n\n".join(out)


class NotJson(Exception):
    """A stream event, after output had started, whose data is not JSON."""


def _ndjson_payload(line: bytes) -> bytes | None:
    line = line.strip()
    return line or None


SSE = Framing(
    "sse", b"\n\n", sse.event_data, sse.is_error_event, sse.single_line_payloads, b"data: "
)
NDJSON = Framing("ndjson", b"\n", _ndjson_payload, ndjson.is_error_line)


def framing_for(content_type: str) -> Framing | None:
    """The framing of a streamed upstream answer; None when it is one whole body."""
    if content_type.startswith(SSE_CONTENT_TYPE):
        return SSE
    if content_type.startswith(ndjson.CONTENT_TYPE):
        return NDJSON
    return None


def stream_error_event(endpoint: str, framing: Framing, code: str, message: str) -> bytes:
    """A gateway error, as the last event of a stream in the client's protocol."""
    if framing is NDJSON:
        return ndjson.error_line(message)
    body: dict[str, Any]
    if endpoint == "messages":
        body = {"type": "error", "error": {"type": "api_error", "message": message}}
        return b"event: error\ndata: " + orjson.dumps(body) + b"\n\n"
    if endpoint == "responses":
        body = {"type": "error", "code": code, "message": message, "param": None}
        return b"event: error\ndata: " + orjson.dumps(body) + b"\n\n"
    err = {"error": {"message": message, "type": "upstream_error", "code": code, "param": None}}
    return b"data: " + orjson.dumps(err) + b"\n\n"
