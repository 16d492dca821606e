"""`GET /metrics`: the Prometheus exposition, optionally behind `server.metrics_key`."""

from __future__ import annotations

from prometheus_client import CONTENT_TYPE_LATEST

from fleetgate.auth.guard import presents
from fleetgate.errors import GatewayError
from fleetgate.fleet import resolve_secret
from fleetgate.pipeline.exchange import Exchange
from fleetgate.server.context import EndpointContext
from fleetgate.web.asgi import Receive, Scope, Send, send_body


async def metrics_endpoint(
    ctx: EndpointContext, scope: Scope, receive: Receive, send: Send, ex: Exchange
) -> None:
    pipeline = ctx.pipeline
    metrics_key = resolve_secret(pipeline.holder.fleet.config.server.metrics_key)
    if metrics_key and not (presents(scope["headers"], metrics_key) or ctx.is_admin(scope)):
        raise GatewayError(
            "invalid_metrics_key", "GET /metrics needs the metrics key (`server.metrics_key`)."
        )
    await pipeline.recorder.flush()
    await send_body(
        send,
        200,
        pipeline.metrics.render(pipeline.recorder),
        ex.base_headers(),
        CONTENT_TYPE_LATEST.encode(),
    )
