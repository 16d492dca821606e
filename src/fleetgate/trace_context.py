"""W3C trace context on the request path: the client's `traceparent`, the ids of this
request's spans, and the `traceparent` each upstream attempt carries.

This is all the request path does for tracing, and it imports no OpenTelemetry package:
ids are random numbers, the sampling decision a comparison. The spans themselves are built
from the request record, off the request path (`telemetry/`), with these ids and the times
the stages noted.
"""

from __future__ import annotations

import random
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

# version 00: `00-<32 hex trace id>-<16 hex parent id>-<2 hex flags>`; a later version may
# append fields after a dash, which this reader ignores (the W3C rule for versions it lacks)
_TRACEPARENT = re.compile(r"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?")
_ZERO_TRACE = "0" * 32
_ZERO_SPAN = "0" * 16
MAX_TRACESTATE = 512  # longer lists are dropped, as W3C allows, rather than cut


_LOW64 = (1 << 64) - 1
# a knob's number in a JSON body: an int or a float exactly (`type(v) in NUMBER`, not
# `isinstance`: a bool is an int)
NUMBER = (int, float)
# the marks and knobs of every unsampled trace: only a sampled one's are written
_UNSAMPLED: dict[str, Any] = {}


def new_span_bytes(_bits: Callable[[int], int] = random.getrandbits) -> bytes:
    """A span id as the spans carry it (8 bytes); an all-zero id is invalid."""
    return (_bits(64) or 1).to_bytes(8, "big")


def new_span_id() -> str:
    """A span id as `traceparent` carries it (16 hex digits): `.hex()` of the bytes is a
    third of a `:016x` format's cost."""
    return new_span_bytes().hex()


@dataclass(slots=True)
class TraceContext:
    """One request's trace: its ids, whether it is sampled, and when its stages ran (the
    request path notes times with `perf_counter`; `wall_ns` and `perf` tie that clock to
    the wall clock the spans need)."""

    trace_id: str
    span_id: str  # the request's SERVER span
    parent_id: str | None  # the client's span, when it sent a `traceparent`
    sampled: bool
    state: str | None = None  # the client's `tracestate`, passed on unchanged
    path: str = ""  # the request's path (its SERVER span's route)
    perf: float = 0.0  # perf_counter at the request's start
    # the wall clock then, in ns: set once the request has ended (its end's wall clock less
    # its latency), when its spans are made
    wall_ns: int = 0
    # perf_counter marks: "plan", "planned", and "count", "counted" around an
    # exact count (only while sampled)
    marks: dict[str, float] = field(default_factory=dict)
    kept: tuple[str, ...] = ()  # the plan's candidates, in order (deployment ids)
    params: dict[str, Any] = field(default_factory=dict)  # max_tokens, temperature, top_p
    count_span: str | None = None  # the exact count's span, the parent its calls name
    # the trace id's 16 bytes and the SERVER span's 8, as the spans carry them (a new
    # trace's, from the draw that made them; empty for a client's trace: read from the hex)
    ids: bytes = b""

    def count_headers(self) -> dict[str, str]:
        """The headers of an exact count's engine calls: the `traceparent` of the count's
        own span (made here) when sampled, else of the request's span, as its attempts."""
        span_id = self.span_id
        if self.sampled:
            span_id = self.count_span = new_span_id()
            self.marks["count"] = time.perf_counter()
        return self.upstream_headers({}, span_id)

    def traceparent(self, span_id: str) -> str:
        """The `traceparent` of a span of this trace (an attempt's, for its upstream)."""
        return f"00-{self.trace_id}-{span_id}-{'01' if self.sampled else '00'}"

    def upstream_headers(self, headers: dict[str, str], span_id: str) -> dict[str, str]:
        """`headers` (left as they are: they may be the provider's own) with this trace's
        `traceparent` for the span `span_id`, and the client's `tracestate`."""
        headers = dict(headers)
        headers["traceparent"] = self.traceparent(span_id)
        if self.state:
            headers["tracestate"] = self.state
        return headers

    def wall(self, mark: float) -> int:
        """A perf_counter time of this request as wall-clock ns."""
        return self.wall_ns + int((mark - self.perf) * 1e9)


def parse_traceparent(value: str) -> tuple[str, str, bool] | None:
    """(trace id, parent span id, sampled) of a valid `traceparent`, else None."""
    match = _TRACEPARENT.fullmatch(value.strip())
    if match is None:
        return None
    version, trace_id, parent_id, flags, rest = match.groups()
    if version == "ff" or (version == "00" and rest is not None):
        return None
    if trace_id == _ZERO_TRACE or parent_id == _ZERO_SPAN:
        return None
    return trace_id, parent_id, bool(int(flags, 16) & 1)


class Tracing:
    """Starts each request's trace: a child of the client's, when it sent a valid one,
    else a new one. Sampling is parent-based: a client's sampled (or unsampled) trace is
    kept (or not) as it says; a new trace is kept when its id falls under `ratio`, the
    rule of OpenTelemetry's trace-id ratio sampler, so every replica decides alike."""

    __slots__ = ("_all", "_bound", "parent_based")

    def __init__(self, ratio: float, parent_based: bool = True) -> None:
        self._bound = round(max(0.0, min(1.0, ratio)) * (1 << 64))
        self._all = self._bound > _LOW64
        self.parent_based = parent_based

    def begin(
        self, traceparent: str | None, tracestate: str | None, perf: float, path: str = ""
    ) -> TraceContext:
        parent = parse_traceparent(traceparent) if traceparent else None
        if parent is not None:
            trace_id, parent_id, sampled = parent
            if not self.parent_based:
                sampled = self._keeps(trace_id)
            state = tracestate if tracestate and len(tracestate) <= MAX_TRACESTATE else None
            span_id, raw = new_span_id(), b""
        else:
            # the trace id and the span id from one draw: 128 bits, then 64
            value = random.getrandbits(192)
            raw = value.to_bytes(24, "big")
            ids = raw.hex()
            trace_id, span_id, parent_id, state = ids[:32], ids[32:], None, None
            if trace_id == _ZERO_TRACE or span_id == _ZERO_SPAN:  # invalid ids: once in 2^64
                value |= 1 << 64 | 1
                raw = value.to_bytes(24, "big")
                ids = raw.hex()
                trace_id, span_id = ids[:32], ids[32:]
            # the id's low 64 bits, as `_keeps` (a ratio of 1 keeps every trace)
            sampled = self._all or value >> 64 & _LOW64 < self._bound
        if not sampled:  # its ids are passed on, nothing more: no span will be made
            return TraceContext(
                trace_id, span_id, parent_id, False, state, path, perf, 0, _UNSAMPLED, _UNSAMPLED
            )
        return TraceContext(
            trace_id, span_id, parent_id, True, state, path, perf, 0, {}, (), {}, None, raw
        )

    def _keeps(self, trace_id: str) -> bool:
        return int(trace_id[16:], 16) < self._bound
