"""Traces of the endpoints that work for a client without being proxied (a token count, a
routing explanation): a SERVER span each, a child of the client's `traceparent`, made off
the request path like every span (the loop turn after the answer) and exported with them."""

from __future__ import annotations

import asyncio
import time

from fleetgate.pipeline.exchange import Exchange
from fleetgate.server.context import EndpointContext
from fleetgate.trace_context import TraceContext


def begin(ctx: EndpointContext, ex: Exchange) -> TraceContext | None:
    """The request's trace, when tracing is on (a child of the client's, or a new one)."""
    tracing = ctx.pipeline.tracing
    if tracing is None:
        return None
    return tracing.begin(ex.traceparent, ex.tracestate, ex.started, ex.path)


def end(
    ctx: EndpointContext,
    ex: Exchange,
    trace: TraceContext | None,
    status: int,
    error: str | None,
    attrs: tuple[tuple[str, object], ...] = (),
) -> None:
    """Hand a sampled request's spans to the telemetry sink, once this loop turn is over."""
    sink = ctx.pipeline.telemetry
    if trace is None or sink is None or not trace.sampled:
        return
    latency = time.perf_counter() - ex.started
    trace.wall_ns = time.time_ns() - int(latency * 1e9)  # its start, on the wall clock
    recorder = ctx.pipeline.recorder

    def take() -> None:
        sink.take_endpoint(trace, status, error, latency, attrs)
        recorder.wake()

    asyncio.get_running_loop().call_soon(take)
