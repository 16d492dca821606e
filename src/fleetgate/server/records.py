"""`GET /v1/requests/{id}`: which deployments a recent request tried, and how each went."""

from __future__ import annotations

import orjson

from fleetgate.errors import GatewayError
from fleetgate.pipeline.exchange import Exchange
from fleetgate.server.context import EndpointContext
from fleetgate.web.asgi import Receive, Scope, Send, send_body


async def request_record(
    ctx: EndpointContext, scope: Scope, receive: Receive, send: Send, ex: Exchange
) -> None:
    request_id = scope["path"].removeprefix("/v1/requests/")
    recent = ctx.pipeline.recent
    # with auth on, a key sees its own records only (401 without one); the admin all
    if ctx.is_admin(scope):
        record = recent.newest(request_id)
    else:
        key = ctx.identify(scope)
        record = recent.get(request_id, key.id if key is not None else None)
    if record is None:
        raise GatewayError(
            "not_found",
            f"No record of request {request_id!r} (only recent requests are kept).",
        )
    await send_body(send, 200, orjson.dumps(record.public()), ex.base_headers())
