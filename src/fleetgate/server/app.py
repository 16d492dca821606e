"""The gateway as an ASGI application: the dispatch of each request to its endpoint.

The proxied endpoints go to `proxy.py`, the gateway's own to one module each (`catalog`,
`ollama_api`, `explain`, `count_tokens`, `health`, `metrics`, `records`, `windows`); the
admin API and the dashboard are mounted by path prefix, built on first use.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from functools import partial

from fleetgate.control import lifecycle
from fleetgate.control.plane import ControlPlane
from fleetgate.errors import GatewayError
from fleetgate.ingress.routes import INGRESS_ROUTES, Parser
from fleetgate.pipeline.core import Pipeline
from fleetgate.pipeline.exchange import Exchange
from fleetgate.server import catalog, health, ollama_api, records, windows
from fleetgate.server.context import EndpointContext
from fleetgate.server.count_tokens import count_tokens_endpoint
from fleetgate.server.explain import explain
from fleetgate.server.limits import ConnectionLimits
from fleetgate.server.metrics import metrics_endpoint
from fleetgate.server.proxy import proxy, send_error
from fleetgate.server.reply import AsgiReply, Reply
from fleetgate.store.errors import StoreUnavailable
from fleetgate.web.asgi import ClientDisconnected, Message, Receive, Scope, Send, read_body

log = logging.getLogger("fleetgate")

Handler = Callable[[Scope, Receive, Send, Exchange], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]
Endpoint = Callable[[EndpointContext, Scope, Receive, Send, Exchange], Awaitable[None]]

ENDPOINTS: dict[tuple[str, str], Endpoint] = {
    ("GET", "/v1/models"): catalog.models,
    ("POST", "/v1/routing/explain"): explain,
    ("GET", "/healthz"): health.healthz,
    ("GET", "/readyz"): health.readyz,
    ("GET", "/metrics"): metrics_endpoint,
    ("GET", "/api/tags"): ollama_api.tags_endpoint,
    ("GET", "/api/version"): ollama_api.version_endpoint,
    ("GET", "/api/ps"): ollama_api.ps_endpoint,
    ("POST", "/v1/messages/count_tokens"): count_tokens_endpoint,
    ("GET", "/v1/fleet/windows"): windows.fleet_windows,
    ("POST", "/v1/fleet/windows/refresh"): windows.refresh_windows,
}


class Gateway:
    """The ASGI app. One instance per process, over the process's pipeline."""

    def __init__(
        self,
        pipeline: Pipeline,
        control: ControlPlane | None = None,
        admin: Callable[[], App] | None = None,
        dashboard: Callable[[], App] | None = None,
    ) -> None:
        self.pipeline = pipeline
        self.control = control
        server = pipeline.holder.fleet.config.server
        self.ctx = EndpointContext(pipeline, control, server.max_body_bytes)
        # read by the connection layer (server/connections.py) that serves this app
        self.connection_limits = ConnectionLimits.of(server)
        # the admin API and the dashboard: built on first use (FastAPI and the admin models
        # cost start-up time and memory that a gateway nobody administers should not pay)
        self._admin_factory = admin if control is not None else None
        self._dashboard_factory = dashboard if control is not None else None
        self._admin_app: App | None = None
        self._dashboard_app: App | None = None
        # called once the gateway is ready (`fleetgate serve` logs its start line there)
        self.on_ready: Callable[[], None] | None = None
        self.routes: dict[tuple[str, str], Handler] = {
            key: partial(endpoint, self.ctx) for key, endpoint in ENDPOINTS.items()
        }

    # ---- ASGI entry -----------------------------------------------------------------
    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            if scope["type"] == "lifespan":
                await self._lifespan(receive, send)
            return
        ex = Exchange(scope["path"], scope["headers"])
        try:
            if ex.refused is not None:
                raise ex.refused
            # the proxied endpoints go straight to `proxy`: every async layer between the
            # server and the upstream call costs CPU on each resume of the request
            route = INGRESS_ROUTES.get(scope["path"]) if scope["method"] == "POST" else None
            if route is not None:
                body = await read_body(receive, self.ctx.max_body)
                reply = AsgiReply(scope, receive, send)
                await proxy(self.ctx, scope, route[0], route[1], body, reply, ex)
                return
            handler = self.routes.get((scope["method"], scope["path"]))
            if handler is None:
                handler = self._fallback_route(scope["method"], scope["path"])
            await handler(scope, receive, send, ex)
        except Exception as exc:
            await self._failed(AsgiReply(scope, receive, send), ex, exc)

    async def proxied(
        self, scope: Scope, route: tuple[str, Parser], body: bytes, reply: Reply
    ) -> None:
        """A proxied request from the gateway's own front (server/front.py): its whole
        body read, its answer written to `reply`; no ASGI on the way."""
        ex = Exchange(scope["path"], scope["headers"])
        try:
            if ex.refused is not None:
                raise ex.refused
            await proxy(self.ctx, scope, route[0], route[1], body, reply, ex)
        except Exception as exc:
            await self._failed(reply, ex, exc)

    async def _failed(self, reply: Reply, ex: Exchange, exc: Exception) -> None:
        """A request's handling raised `exc`: answered in the client's protocol."""
        if isinstance(exc, GatewayError):
            await send_error(self.ctx, reply, ex, exc)
        elif isinstance(exc, ClientDisconnected):  # an ordinary event, not an error
            log.debug("request %s: the client went away before its body arrived", ex.request_id)
        else:
            log.error("unhandled error in request %s", ex.request_id, exc_info=exc)
            error = GatewayError("internal_error", "Internal error; see the gateway log.")
            await send_error(self.ctx, reply, ex, error)

    def _fallback_route(self, method: str, path: str) -> Handler:
        if method == "GET" and path.startswith("/v1/requests/"):
            return partial(records.request_record, self.ctx)
        if method == "GET" and path.startswith("/v1/models/"):
            return partial(catalog.model_entry, self.ctx)
        if self._admin_factory is not None and (path == "/admin" or path.startswith("/admin/")):
            return self._admin
        if self._dashboard_factory is not None and (
            path == "/ui" or path.startswith("/ui/") or path == "/favicon.ico"
        ):  # (every browser asks for /favicon.ico, whatever the page says)
            return self._dashboard
        allowed = sorted({m for m, p in self.routes if p == path})
        if path in INGRESS_ROUTES:
            allowed = ["POST"]
        if allowed:
            raise GatewayError(
                "method_not_allowed",
                f"{method} is not allowed on {path}; use {', '.join(allowed)}.",
                headers={"Allow": ", ".join(allowed)},
            )
        raise GatewayError("not_found", f"There is no endpoint at {path}.")

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                try:
                    await self.startup()
                except StoreUnavailable as exc:  # one clear line instead of a traceback
                    await send({"type": "lifespan.startup.failed", "message": str(exc)})
                    return
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await self.shutdown()
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def startup(self) -> None:
        await lifecycle.start(self.pipeline, self.control)
        if self.on_ready is not None:
            self.on_ready()

    async def shutdown(self) -> None:
        await lifecycle.stop(self.pipeline, self.control)

    # ---- mounted apps -------------------------------------------------------------------
    async def _admin(self, scope: Scope, receive: Receive, send: Send, ex: Exchange) -> None:
        if self._admin_app is None:
            assert self._admin_factory is not None
            self._admin_app = self._admin_factory()
        started = False

        async def tracked(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self._admin_app(scope, receive, tracked)
        except Exception:
            if not started:
                raise  # answered as an internal_error by __call__
            # the framework answered already (its own 500): a second answer would break
            # the connection the client keeps alive for its next request
            log.exception("admin request %s failed after its answer began", ex.request_id)

    async def _dashboard(self, scope: Scope, receive: Receive, send: Send, ex: Exchange) -> None:
        if self._dashboard_app is None:
            assert self._dashboard_factory is not None
            self._dashboard_app = self._dashboard_factory()
        await self._dashboard_app(scope, receive, send)
