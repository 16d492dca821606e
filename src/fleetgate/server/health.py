"""`GET /healthz` (the process answers) and `GET /readyz` (it serves the fleet)."""

from __future__ import annotations

from typing import Any

import orjson

from fleetgate.pipeline.exchange import Exchange
from fleetgate.server.context import EndpointContext
from fleetgate.web.asgi import Receive, Scope, Send, send_body


async def healthz(
    ctx: EndpointContext, scope: Scope, receive: Receive, send: Send, ex: Exchange
) -> None:
    await send_body(send, 200, b'{"status":"ok"}', ex.base_headers())


async def readyz(
    ctx: EndpointContext, scope: Scope, receive: Receive, send: Send, ex: Exchange
) -> None:
    fleet = ctx.pipeline.holder.fleet
    body: dict[str, Any]
    if not ctx.pipeline.ready:
        body = {"status": "starting"}
        status = 503
    else:
        status = 200
        body = {
            "status": "ready",
            "models": len(fleet.models),
            "deployments": len(fleet.deployments),
        }
    await send_body(send, status, orjson.dumps(body), ex.base_headers())
