"""`GET /v1/models` and `GET /v1/models/{id}`: each model once, with its largest window."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import orjson

from fleetgate.discovery.store import WindowStore
from fleetgate.errors import GatewayError
from fleetgate.fleet import Deployment, Fleet
from fleetgate.pipeline.exchange import Exchange
from fleetgate.server.anthropic_models import anthropic_entry, anthropic_listing
from fleetgate.server.context import EndpointContext
from fleetgate.web.asgi import Receive, Scope, Send, send_body


def largest_window(deployments: Iterable[Deployment], windows: WindowStore | None) -> int | None:
    """The largest window among `deployments`: discovered when a store is given, else declared."""
    if windows is None:
        found = [d.context_window for d in deployments]
    else:
        found = [windows.window(d) for d in deployments]
    return max((w for w in found if w), default=None)


def virtual_catalog(fleet: Fleet, windows: WindowStore | None = None) -> list[dict[str, Any]]:
    """`GET /v1/models` rows of the enabled virtual models, with their largest route window."""
    rows = []
    for vm in fleet.virtual_models.values():
        entry: dict[str, Any] = {
            "id": vm.name,
            "object": "model",
            "created": 0,
            "owned_by": "fleetgate",
        }
        context_length = largest_window(vm.deployments, windows)
        if context_length is not None:
            entry["context_length"] = context_length
        rows.append(entry)
    return rows


def catalog(fleet: Fleet, windows: WindowStore | None = None) -> dict[str, Any]:
    """`GET /v1/models`: each name once, with its largest context window (the discovered
    windows when a store is given). A virtual model that shadows a real one takes its row:
    the name reaches the virtual model, never the real one."""
    data = []
    for model in fleet.models.values():
        if model.id.lower() in fleet.virtual_models:  # keyed by lower-cased name
            continue
        context_length = largest_window(model.deployments, windows)
        entry: dict[str, Any] = {
            "id": model.id,
            "object": "model",
            "created": model.created,
            "owned_by": model.owned_by,
        }
        if context_length is not None:
            entry["context_length"] = context_length
        data.append(entry)
    data.extend(virtual_catalog(fleet, windows))
    return {"object": "list", "data": data}


async def models(
    ctx: EndpointContext, scope: Scope, receive: Receive, send: Send, ex: Exchange
) -> None:
    listed = ctx.listed(scope)
    body = catalog(ctx.pipeline.holder.fleet, ctx.pipeline.windows)
    body["data"] = [entry for entry in body["data"] if listed(entry["id"])]
    await send_body(send, 200, orjson.dumps(anthropic_listing(body)), ex.base_headers())


async def model_entry(
    ctx: EndpointContext, scope: Scope, receive: Receive, send: Send, ex: Exchange
) -> None:
    """`GET /v1/models/{id}`: one catalog entry (the openai SDK's `models.retrieve`)."""
    model_id = scope["path"].removeprefix("/v1/models/")
    listed = ctx.listed(scope)
    for entry in catalog(ctx.pipeline.holder.fleet, ctx.pipeline.windows)["data"]:
        if entry["id"] == model_id and listed(model_id):
            await send_body(send, 200, orjson.dumps(anthropic_entry(entry)), ex.base_headers())
            return
    raise GatewayError(
        "model_not_found",
        f"There is no model {model_id!r}; GET /v1/models lists them.",
        param="model",
    )
