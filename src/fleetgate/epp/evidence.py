"""What the picker learns from an answer it did not carry: Envoy shows it the response (in
observability mode, never waiting for it), and the same evidence as the proxy's is drawn
from it: status, time to first byte, usage and stop reason, streamed or whole."""

from __future__ import annotations

import time

import orjson

from fleetgate.execute.failures import error_event
from fleetgate.execute.framing import Framing, framing_for
from fleetgate.execute.outcome import (
    RESET,
    STREAM_BROKEN,
    Attempt,
    classify_status,
    error_message,
    parse_retry_after,
)
from fleetgate.execute.usage import (
    USAGE_TAIL,
    stop_in_stream,
    stop_reason,
    stream_usage,
    take_usage,
)
from fleetgate.redact import Redactor

WHOLE_LIMIT = 4 * 1024 * 1024  # a whole answer larger than this is not read for usage
HEAD_LIMIT = 8 * 1024  # a stream's first bytes kept, for an error event in place of an answer


class ResponseWatch:
    """One response as Envoy shows it: headers first, then its body chunk by chunk."""

    __slots__ = (
        "body",
        "chunks",
        "ended",
        "events",
        "first",
        "first_byte",
        "framing",
        "head",
        "headers_at",
        "retry_after",
        "served",
        "status",
        "tail",
        "too_big",
    )

    def __init__(self) -> None:
        self.status = 0
        self.served: str | None = None  # the endpoint that answered, when reported
        self.retry_after: float | None = None
        self.framing: Framing | None = None  # a stream's; None: a whole answer
        self.headers_at: float | None = None
        self.first_byte: float | None = None
        self.body = bytearray()  # a whole answer, or an error's body
        self.tail = b""  # a stream's last bytes
        self.head = b""  # a stream's first bytes, until its first data event is whole
        self.first: bytes | None = None  # that event's data
        self.events = 0
        self.chunks = 0
        self.ended = False  # its end was seen (the headers' or the body's end of stream)
        self.too_big = False

    def headers(self, status: int, content_type: str, retry_after: str | None) -> None:
        self.status = status
        self.headers_at = time.perf_counter()
        self.retry_after = parse_retry_after(retry_after)
        if status < 300:
            self.framing = framing_for(content_type)

    def chunk(self, data: bytes) -> None:
        if not data:
            return
        self.chunks += 1
        if self.first_byte is None:
            self.first_byte = time.perf_counter()
        framing = self.framing
        if framing is not None:
            if self.first is None and len(self.head) < HEAD_LIMIT:
                head = self.head = self.head + data
                whole = head.rfind(framing.separator)
                if whole >= 0:
                    self.first = framing.first_data(head[:whole])
                    if self.first is not None:
                        self.head = b""  # what it was read from is not needed any more
            self.events += data.count(framing.separator)
            self.tail = (self.tail + data)[-USAGE_TAIL:]
        elif not self.too_big:
            if len(self.body) + len(data) > WHOLE_LIMIT:
                self.too_big = True
                self.body.clear()
            else:
                self.body += data

    def fill(self, attempt: Attempt, started: float, redactor: Redactor) -> None:
        """The attempt's row from what was seen: status, timings, usage, stop reason; an
        error's body (or a stream's error event in place of its answer) read through
        `redactor`, as the proxy reads it."""
        now = time.perf_counter()
        attempt.status = self.status or None
        attempt.latency = now - started
        if self.status >= 300 or not self.status:
            attempt.error_class = classify_status(self.status) if self.status else "reset"
            attempt.retry_after = self.retry_after
            body = redactor.bytes(bytes(self.body))
            attempt.message = error_message(body) if body else f"status {self.status}"
            attempt.upstream_body = body or None
            return
        if not self.ended:  # the call ended first: the client did not get it whole
            attempt.error_class = STREAM_BROKEN if self.framing is not None else RESET
            attempt.message = (
                "the answer ended before its last byte: its upstream broke or its client "
                "left (the data plane does not say which)"
            )
        if self.framing is not None:
            data = self.first
            if data is not None and self.framing.is_error(data):  # an error, not an answer
                error_event(attempt, redactor.bytes(data))
                return
            first = self.first_byte if self.first_byte is not None else self.headers_at
            attempt.ttft = (first or now) - started
            stream_usage(attempt, self.tail, self.framing)
            attempt.finish = stop_in_stream(self.tail)
            return
        attempt.ttft = attempt.latency  # a whole answer: its first byte is its end
        if self.too_big:
            return
        try:
            data = orjson.loads(self.body)
        except orjson.JSONDecodeError:
            return
        take_usage(attempt, data)
        attempt.finish = stop_reason(data)
