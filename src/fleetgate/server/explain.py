"""`POST /v1/routing/explain`: the plan a request body would follow, sending nothing."""

from __future__ import annotations

import orjson

from fleetgate.errors import GatewayError
from fleetgate.ingress.openai import parse_json_object
from fleetgate.pipeline.exchange import Exchange
from fleetgate.server import endpoint_trace
from fleetgate.server.context import EndpointContext
from fleetgate.web.asgi import Receive, Scope, Send, read_body, send_body


async def explain(
    ctx: EndpointContext, scope: Scope, receive: Receive, send: Send, ex: Exchange
) -> None:
    trace = endpoint_trace.begin(ctx, ex)
    model = None
    try:
        raw = await read_body(receive, ctx.max_body)
        client = ctx.pipeline.guard is not None and not ctx.is_admin(scope)
        if client:
            ctx.identify(scope)  # 401 before anything is said about the body
        body = parse_json_object(raw)
        model = body.get("model")
        if client and isinstance(model, str):
            ctx.identify(scope, model)  # only models the key may use (403)
        result = ctx.pipeline.explain(body, ex.headers)
    except GatewayError as exc:
        endpoint_trace.end(ctx, ex, trace, exc.status, exc.code)
        raise
    await send_body(send, 200, orjson.dumps(result), ex.base_headers())
    # the model's name only when the fleet knows it (a client's typo is no attribute)
    known = isinstance(model, str) and model in ctx.pipeline.holder.fleet.models
    endpoint_trace.end(
        ctx, ex, trace, 200, None, (("fleetgate.requested_model", model if known else None),)
    )
