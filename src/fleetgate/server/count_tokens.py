"""`POST /v1/messages/count_tokens`: the prompt tokens of an Anthropic Messages request.

Routed like the request itself would be; the first candidate that can count answers:
natively (llama.cpp and Anthropic serve the endpoint; tools included), else through its
engine's tokenizer (vLLM, SGLang: the request translated to chat, tool schemas estimated),
else the gateway's estimate. The `X-Fleetgate-Token-Count` header says which
(`exact` or `estimate`), `X-Fleetgate-Route` which deployment counted.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from dataclasses import dataclass

import orjson

from fleetgate.config.schema import ContextConfig
from fleetgate.context.capabilities import context_settings
from fleetgate.context.estimate import estimate_context_tokens
from fleetgate.context.refine import TOKENIZING_KINDS, ContextRefiner, TokenizeError
from fleetgate.discovery.store import WindowStore
from fleetgate.errors import GatewayError
from fleetgate.execute.http1 import UpstreamIOError
from fleetgate.execute.upstream import UpstreamPool, call
from fleetgate.fleet import Deployment, Fleet
from fleetgate.ingress.anthropic import parse_messages
from fleetgate.ingress.profile import RequestProfile
from fleetgate.pipeline.exchange import Exchange
from fleetgate.routing.plan import Candidate
from fleetgate.routing.planner import build_plan, require_route
from fleetgate.server import endpoint_trace
from fleetgate.server.context import EndpointContext
from fleetgate.state.runtime import RuntimeState
from fleetgate.translate.anthropic_chat import messages_to_chat
from fleetgate.translate.registry import ANTHROPIC, native_protocols
from fleetgate.web.asgi import Receive, Scope, Send, read_body, send_body

COUNT_HEADER = "X-Fleetgate-Token-Count"
# kinds whose /v1/messages/count_tokens answers the templated prompt length
_NATIVE_COUNTERS = frozenset({"llamacpp", "anthropic"})


@dataclass(frozen=True, slots=True)
class TokenCount:
    tokens: int
    exact: bool
    deployment_id: str | None

    def headers(self) -> list[tuple[bytes, bytes]]:
        out = [(COUNT_HEADER.lower().encode(), b"exact" if self.exact else b"estimate")]
        if self.deployment_id is not None:
            out.append((b"x-fleetgate-route", self.deployment_id.encode()))
        return out


async def _native(
    pool: UpstreamPool, dep: Deployment, profile: RequestProfile, traced: Mapping[str, str]
) -> int:
    client = pool.client(dep.provider)
    body = orjson.dumps({**profile.body, "model": dep.upstream_model})
    url = client.base_url + "/messages/count_tokens"
    # the client's `anthropic-beta` too: a beta feature's fields count only with it
    headers = {**profile.passed_headers, **traced}
    status, raw = await call(client, "POST", url, body, headers)
    if status != 200:
        raise TokenizeError(f"count_tokens answered {status}")
    tokens = orjson.loads(raw).get("input_tokens")
    if type(tokens) is not int or tokens < 0:
        raise TokenizeError("no input_tokens in the answer")
    return tokens


async def count_message_tokens(
    profile: RequestProfile,
    fleet: Fleet,
    state: RuntimeState,
    windows: WindowStore,
    pool: UpstreamPool,
    refiner: ContextRefiner,
) -> TokenCount:
    plan = build_plan(profile, fleet, state, windows=windows)
    require_route(plan)  # an unknown model is a 404 here as for the request itself
    settings = context_settings(fleet)
    trace = profile.trace  # the count's calls join the request's trace
    traced = trace.count_headers() if trace is not None else {}
    try:
        return await _count(plan.candidates, profile, pool, refiner, settings, traced)
    finally:
        if trace is not None and trace.sampled:
            trace.marks["counted"] = time.perf_counter()


async def _count(
    candidates: list[Candidate],
    profile: RequestProfile,
    pool: UpstreamPool,
    refiner: ContextRefiner,
    settings: ContextConfig,
    traced: Mapping[str, str],
) -> TokenCount:
    """The first candidate's count that answers, else the estimate."""
    chat: RequestProfile | None = None
    for candidate in candidates:
        dep = candidate.deployment
        kind = dep.provider.kind
        try:
            async with asyncio.timeout(settings.refine.timeout_seconds):
                if kind in _NATIVE_COUNTERS and ANTHROPIC in native_protocols(dep.provider):
                    return TokenCount(await _native(pool, dep, profile, traced), True, dep.id)
                if kind in TOKENIZING_KINDS:
                    if chat is None:
                        body = messages_to_chat(profile.body)
                        chat = RequestProfile(
                            "openai", "chat.completions", profile.model, False, body
                        )
                    tokens = await refiner.count(dep, chat, settings, traced)
                    # tool schemas are estimated on these engines: not an exact count then
                    return TokenCount(tokens, not chat.body.get("tools"), dep.id)
        except (
            TimeoutError,
            UpstreamIOError,
            TokenizeError,
            orjson.JSONDecodeError,
            ValueError,
        ):
            continue
    estimate = estimate_context_tokens(profile.body, profile.endpoint, settings)
    return TokenCount(estimate.prompt_tokens, False, None)


async def count_tokens_endpoint(
    ctx: EndpointContext, scope: Scope, receive: Receive, send: Send, ex: Exchange
) -> None:
    """`POST /v1/messages/count_tokens`: the Messages body's prompt tokens."""
    trace = endpoint_trace.begin(ctx, ex)
    try:
        profile = parse_messages("messages", await read_body(receive, ctx.max_body))
        profile.headers = ex.headers
        profile.passed_headers = ex.passed
        profile.trace = trace
        ctx.identify(scope, profile.model)
        pipeline = ctx.pipeline
        count = await count_message_tokens(
            profile,
            pipeline.holder.fleet,
            pipeline.state,
            pipeline.windows,
            pipeline.pool,
            pipeline.refiner,
        )
    except GatewayError as exc:
        endpoint_trace.end(ctx, ex, trace, exc.status, exc.code)
        raise
    headers = ex.base_headers()
    headers.extend(count.headers())
    await send_body(send, 200, orjson.dumps({"input_tokens": count.tokens}), headers)
    attrs = (
        ("fleetgate.requested_model", profile.model),
        ("fleetgate.deployment", count.deployment_id),
        ("fleetgate.context.tokens", count.tokens),
        ("fleetgate.context.source", "exact" if count.exact else "estimate"),
    )
    endpoint_trace.end(ctx, ex, trace, 200, None, attrs)
