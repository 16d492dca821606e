"""The proxied endpoints (`/v1/chat/completions`, `/v1/messages`, `/api/chat`, …): the
front's side of the pipeline. Given the request's body, it runs the pipeline's stages and
relays the answer or the stream to the front's `Reply` (the gateway's own front, or ASGI);
a client that leaves mid-way is noticed by its disconnect."""

from __future__ import annotations

import asyncio
import time

from fleetgate.errors import GatewayError
from fleetgate.execute.executor import ChainExhausted, Outcome
from fleetgate.ingress.profile import RequestProfile
from fleetgate.ingress.routes import Parser
from fleetgate.pipeline.exchange import Exchange
from fleetgate.pipeline.respond import exhausted_headers, refusal, routing_headers
from fleetgate.routing.plan import RoutePlan
from fleetgate.server import ollama_api
from fleetgate.server.context import EndpointContext
from fleetgate.server.reply import Reply
from fleetgate.web.asgi import Headers, Scope


async def send_error(
    ctx: EndpointContext,
    reply: Reply,
    ex: Exchange,
    exc: GatewayError,
    extra: Headers | None = None,
) -> None:
    """A refusal in the client's protocol, after the request id and the error's headers."""
    status, body, error_headers = refusal(ex.protocol, exc, ctx.pipeline.holder.fleet.redactor)
    headers = ex.base_headers()
    headers.extend(error_headers)
    if extra:
        headers.extend(extra)
    await reply.whole(status, body, headers)


async def proxy(
    ctx: EndpointContext,
    scope: Scope,
    endpoint: str,
    parser: Parser,
    body: bytes,
    reply: Reply,
    ex: Exchange,
) -> None:
    pipeline = ctx.pipeline
    profile = parser(endpoint, body)
    profile.request_id = ex.request_id
    profile.headers = ex.headers
    profile.passed_headers = ex.passed
    if endpoint == "ollama.show" and not ollama_api.has_worker(
        pipeline.holder.fleet, profile.model
    ):
        await ollama_api.show_from_fleet(ctx, scope, reply, ex, profile.model)
        return
    plan = await pipeline.plan(ex, profile, scope["headers"])
    watch = reply.watch(pipeline.loop or asyncio.get_running_loop())
    try:
        try:
            outcome = await pipeline.execute(ex, profile, plan)
        except ChainExhausted as exc:
            await send_error(ctx, reply, ex, exc, exhausted_headers(plan, exc.attempts))
            return
        if outcome.stream is not None:
            await _send_stream(ctx, reply, ex, profile, plan, outcome)
            return
        body = outcome.body
        assert body is not None
        overhead = await pipeline.answered(ex, profile, plan, outcome)
        headers = ex.base_headers()
        headers.extend(routing_headers(plan, outcome, overhead))
        await reply.whole(outcome.status, body, headers, outcome.content_type.encode())
    except asyncio.CancelledError:
        if not watch.cancelled:
            raise
        await watch.absorb()
    finally:
        watch.finish()
        pipeline.settle_unfinished(ex)


async def _send_stream(
    ctx: EndpointContext,
    reply: Reply,
    ex: Exchange,
    profile: RequestProfile,
    plan: RoutePlan,
    outcome: Outcome,
) -> None:
    assert outcome.stream is not None
    pipeline = ctx.pipeline
    overhead = time.perf_counter() - ex.started - outcome.upstream_seconds
    headers = ex.base_headers()
    headers.extend(routing_headers(plan, outcome, overhead))
    headers.append((b"content-type", outcome.content_type.encode()))
    headers.append((b"cache-control", b"no-cache"))
    stream = outcome.stream
    recorded = False
    try:
        # the head's write may wait for a slow client and meet its disconnect: the
        # stream is then dropped unstarted, and `end_stream` frees its connection
        await reply.start(outcome.status, headers)
        write = reply.write
        tap = outcome.tap
        if tap is not None and reply.writes_at_once:  # the relay writes the events itself
            tap.write, tap.drain = write, reply.drain
        async for chunk in stream:
            if write(chunk):
                await reply.drain()
        # recorded before the stream's end reaches the client: whoever has the whole
        # answer can read its record
        await pipeline.stream_ended(ex, profile, plan, outcome, overhead)
        recorded = True
        await reply.end()
    finally:
        await stream.aclose()  # type: ignore[attr-defined]
        outcome.end_stream()  # a no-op once the stream has run its own end
        if not recorded:  # the client went away, or the stream failed mid-way
            pipeline.record_stream(ex, profile, plan, outcome, overhead)
