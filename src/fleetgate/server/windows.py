"""`GET /v1/fleet/windows` and `POST /v1/fleet/windows/refresh`: each deployment's
effective context window and where it came from."""

from __future__ import annotations

from typing import Any

import orjson

from fleetgate.discovery.store import WindowStore
from fleetgate.fleet import Fleet
from fleetgate.pipeline.exchange import Exchange
from fleetgate.server.context import EndpointContext
from fleetgate.web.asgi import Receive, Scope, Send, read_body, send_body


def windows_view(fleet: Fleet, windows: WindowStore) -> dict[str, Any]:
    return {"data": [windows.view(d).public(d.id) for d in fleet.deployments.values()]}


async def fleet_windows(
    ctx: EndpointContext, scope: Scope, receive: Receive, send: Send, ex: Exchange
) -> None:
    if ctx.pipeline.guard is not None and not ctx.is_admin(scope):
        ctx.identify(scope)  # with auth on, a key (401 without one)
    body = windows_view(ctx.pipeline.holder.fleet, ctx.pipeline.windows)
    await send_body(send, 200, orjson.dumps(body), ex.base_headers())


async def refresh_windows(
    ctx: EndpointContext, scope: Scope, receive: Receive, send: Send, ex: Exchange
) -> None:
    ctx.require_admin(scope)  # it makes the gateway probe every worker
    await read_body(receive, ctx.max_body)
    await ctx.pipeline.discovery.refresh()
    body = windows_view(ctx.pipeline.holder.fleet, ctx.pipeline.windows)
    await send_body(send, 200, orjson.dumps(body), ex.base_headers())
