"""Ollama's native listing endpoints, answered by the gateway for the whole fleet.

`/api/tags`, `/api/ps` and `/api/show` list every model an Ollama client can reach through
the gateway, under the name it asks for. Where a real Ollama worker serves a model, the
entry is that worker's own (its `size`, `digest`, `details`, `size_vram`), asked live with
a short timeout; other deployments (vLLM, llama.cpp, hosted APIs) get an entry built from
the fleet: the engines keep their model loaded, so `/api/ps` lists them with their window.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import orjson

from fleetgate.config.capabilities import IMAGE_INPUT, TOOLS
from fleetgate.discovery.evidence import ollama_name
from fleetgate.discovery.store import WindowStore
from fleetgate.errors import GatewayError
from fleetgate.execute.http1 import UpstreamIOError
from fleetgate.execute.upstream import UpstreamPool, call
from fleetgate.fleet import Deployment, Fleet, Provider
from fleetgate.pipeline.exchange import Exchange
from fleetgate.server.catalog import largest_window
from fleetgate.server.context import EndpointContext
from fleetgate.server.reply import Reply
from fleetgate.web.asgi import Receive, Scope, Send, send_body

# the Ollama API level the native endpoints follow (clients read it from /api/version)
OLLAMA_API_VERSION = "0.12.6"
_ASK_SECONDS = 2.0
# how long an engine that is not Ollama is said to keep its model loaded
_RESIDENT = 365 * 24 * 3600

Listing = dict[str, list[dict[str, Any]]]  # provider id -> the entries its worker listed


def _stamp(seconds: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))


def _details(family: str = "") -> dict[str, Any]:
    return {
        "parent_model": "",
        "format": "",
        "family": family,
        "families": None,
        "parameter_size": "",
        "quantization_level": "",
    }


def _entry(model_id: str) -> dict[str, Any]:
    return {
        "name": model_id,
        "model": model_id,
        "modified_at": _stamp(0),
        "size": 0,
        "digest": "",
        "details": _details(),
    }


def _workers(fleet: Fleet) -> list[Provider]:
    return [p for p in fleet.providers.values() if p.kind == "ollama"]


async def ask_workers(pool: UpstreamPool, fleet: Fleet, path: str) -> Listing:
    """`GET path` on every Ollama worker at once; a worker that fails lists nothing."""
    workers = _workers(fleet)

    async def ask(provider: Provider) -> list[dict[str, Any]]:
        client = pool.client(provider)
        url = provider.base_url.removesuffix("/v1") + path
        try:
            async with asyncio.timeout(_ASK_SECONDS):
                status, raw = await call(client, "GET", url)
            if status != 200:
                return []
            body = orjson.loads(raw)
        except (UpstreamIOError, TimeoutError, orjson.JSONDecodeError):
            return []
        models = body.get("models") if isinstance(body, dict) else None
        return [m for m in models if isinstance(m, dict)] if isinstance(models, list) else []

    answers = await asyncio.gather(*(ask(p) for p in workers))
    return {p.id: a for p, a in zip(workers, answers, strict=True)}


def _worker_entry(dep: Deployment, listing: Listing) -> dict[str, Any] | None:
    want = ollama_name(dep.upstream_model)
    for entry in listing.get(dep.provider.id, ()):
        names = {ollama_name(str(entry.get(k))) for k in ("name", "model") if entry.get(k)}
        if want in names:
            return entry
    return None


def _reachable(fleet: Fleet) -> list[str]:
    """Each name once: a virtual model that shadows a real one takes its place (the name
    reaches the virtual model, as in `GET /v1/models`)."""
    real = [m for m in fleet.models if m.lower() not in fleet.virtual_models]
    return [*real, *(vm.name for vm in fleet.virtual_models.values())]


def tags(fleet: Fleet, listing: Listing) -> dict[str, Any]:
    """`GET /api/tags`: every model and virtual model, with its Ollama worker's facts."""
    models = []
    for model_id in _reachable(fleet):
        entry = _entry(model_id)
        model = fleet.models.get(model_id)
        for dep in model.deployments if model is not None else ():
            found = _worker_entry(dep, listing)
            if found is not None:
                entry = {**found, "name": model_id, "model": model_id}
                break
        models.append(entry)
    return {"models": models}


def version() -> dict[str, Any]:
    return {"version": OLLAMA_API_VERSION}


def ps(fleet: Fleet, windows: WindowStore, listing: Listing) -> dict[str, Any]:
    """`GET /api/ps`: the models loaded now: on an Ollama worker (its own entry, with the
    largest loaded context), and every model on an engine that keeps it loaded."""
    models = []
    now = time.time()
    for model_id, model in fleet.models.items():
        best: dict[str, Any] | None = None
        for dep in model.deployments:
            if dep.provider.kind == "ollama":
                found = _worker_entry(dep, listing)
                if found is None:
                    continue
                entry = {**found, "name": model_id, "model": model_id}
            else:
                window = windows.window(dep)
                entry = {**_entry(model_id), "expires_at": _stamp(now + _RESIDENT), "size_vram": 0}
                if window:
                    entry["context_length"] = window
            if best is None or entry.get("context_length", 0) > best.get("context_length", 0):
                best = entry
        if best is not None:
            models.append(best)
    return {"models": models}


def has_worker(fleet: Fleet, model_id: str) -> bool:
    """Whether a real Ollama worker serves the model (it then answers `/api/show` itself);
    never for a virtual model's name, which the fleet answers for."""
    if model_id.lower() in fleet.virtual_models:
        return False
    model = fleet.models.get(model_id)
    return model is not None and any(d.provider.kind == "ollama" for d in model.deployments)


def show(fleet: Fleet, windows: WindowStore, model_id: str) -> dict[str, Any] | None:
    """`POST /api/show` for a model no Ollama worker serves, or a virtual model: what the
    fleet knows of it (the largest window and the capabilities its deployments have)."""
    virtual = fleet.virtual_models.get(model_id.lower())
    model = fleet.models.get(model_id)
    if virtual is not None:
        deployments = virtual.deployments
        window = largest_window(deployments, windows) or virtual.context_length
        source = "# a virtual model of fleetgate"
    elif model is not None:
        deployments = model.deployments
        window = largest_window(deployments, windows) or model.context_length
        source = "# served by fleetgate"
    else:
        return None
    capabilities = ["completion"]
    if any(TOOLS in d.capabilities for d in deployments):
        capabilities.append("tools")
    if any(IMAGE_INPUT in d.capabilities for d in deployments):
        capabilities.append("vision")
    info: dict[str, Any] = {"general.architecture": "fleetgate"}
    if window:
        info["fleetgate.context_length"] = window
    return {
        "license": "",
        "modelfile": f"{source}\nFROM {model_id}\n",
        "parameters": "",
        "template": "",
        "details": _details(),
        "model_info": info,
        "capabilities": capabilities,
        "modified_at": _stamp(0),
    }


# ---- the endpoints ----------------------------------------------------------------------
async def show_from_fleet(
    ctx: EndpointContext, scope: Scope, reply: Reply, ex: Exchange, model: str
) -> None:
    """`/api/show` of a model no Ollama worker serves: its entry built from the fleet."""
    ctx.identify(scope, model)
    body = show(ctx.pipeline.holder.fleet, ctx.pipeline.windows, model)
    if body is None:
        raise GatewayError("model_not_found", f"There is no model {model!r}.", param="model")
    await reply.whole(200, orjson.dumps(body), ex.base_headers())


async def tags_endpoint(
    ctx: EndpointContext, scope: Scope, receive: Receive, send: Send, ex: Exchange
) -> None:
    listed = ctx.listed(scope)
    fleet = ctx.pipeline.holder.fleet
    body = tags(fleet, await ask_workers(ctx.pipeline.pool, fleet, "/api/tags"))
    body["models"] = [entry for entry in body["models"] if listed(entry["model"])]
    await send_body(send, 200, orjson.dumps(body), ex.base_headers())


async def version_endpoint(
    ctx: EndpointContext, scope: Scope, receive: Receive, send: Send, ex: Exchange
) -> None:
    await send_body(send, 200, orjson.dumps(version()), ex.base_headers())


async def ps_endpoint(
    ctx: EndpointContext, scope: Scope, receive: Receive, send: Send, ex: Exchange
) -> None:
    listed = ctx.listed(scope)
    fleet = ctx.pipeline.holder.fleet
    listing = await ask_workers(ctx.pipeline.pool, fleet, "/api/ps")
    body = ps(fleet, ctx.pipeline.windows, listing)
    body["models"] = [entry for entry in body["models"] if listed(entry["model"])]
    await send_body(send, 200, orjson.dumps(body), ex.base_headers())
