"""The gateway as an ASGI application: ingress → plan → execute → respond → record."""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import orjson
from prometheus_client import CONTENT_TYPE_LATEST

from fleetgate.auth.budgets import Hold
from fleetgate.auth.guard import presents, record_usage, usage
from fleetgate.auth.keys import ClientKey
from fleetgate.context.counts import load_tokenizers
from fleetgate.context.placement import TIER_HEADER, effective_window
from fleetgate.context.refine import ContextRefiner
from fleetgate.context.truncation import Cut, judge
from fleetgate.discovery.engine_load import EngineLoadPoller, EngineLoads
from fleetgate.discovery.fingerprint import FingerprintCache, FingerprintService
from fleetgate.discovery.service import DiscoveryService
from fleetgate.discovery.store import WindowStore
from fleetgate.errors import GatewayError, invalid
from fleetgate.execute.executor import ChainExhausted, Executor, Outcome
from fleetgate.execute.outcome import Attempt
from fleetgate.execute.upstream import UpstreamPool
from fleetgate.fleet import Deployment, Fleet, FleetHolder, resolve_secret
from fleetgate.ingress.anthropic import parse_messages
from fleetgate.ingress.openai import parse_json_object
from fleetgate.ingress.profile import RequestProfile
from fleetgate.ingress.routes import INGRESS_ROUTES, Parser, error_protocol
from fleetgate.record.calibration_sink import CalibrationSink
from fleetgate.record.metrics import Metrics
from fleetgate.record.recorder import RecentRequests, Recorder, RequestRecord
from fleetgate.routing.orderers.affinity import record_served
from fleetgate.routing.plan import RoutePlan
from fleetgate.routing.planner import build_plan, require_route
from fleetgate.routing.sticky import ReadOnlySticky, StickyTiers
from fleetgate.server import ollama_api
from fleetgate.server.anthropic_models import anthropic_entry, anthropic_listing
from fleetgate.server.asgi import (
    ClientDisconnected,
    DisconnectWatch,
    Headers,
    Message,
    Receive,
    Scope,
    Send,
    new_request_id,
    read_body,
    send_body,
)
from fleetgate.server.connections import ConnectionLimits
from fleetgate.server.count_tokens import count_message_tokens
from fleetgate.server.error_shapes import error_body, error_status, upstream_error_body
from fleetgate.server.virtuals import (
    configure_sticky,
    largest_window,
    sticky_tiers_for,
    virtual_catalog,
)
from fleetgate.state.affinity import MemoryAffinity
from fleetgate.state.runtime import MemoryState, RuntimeState
from fleetgate.store.errors import StoreUnavailable

if TYPE_CHECKING:
    from fleetgate.auth.guard import Guard
    from fleetgate.server.control import ControlPlane

log = logging.getLogger("fleetgate")

_REQUEST_ID_OK = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")
MAX_HEADER_VALUE = 256  # an X-Fleetgate-* header names a tier or a conversation: short

Handler = Callable[[Scope, Receive, Send, "Exchange"], Awaitable[None]]


class Exchange:
    """Per-request facts the handlers share: id, start time, and the routing headers."""

    __slots__ = (
        "client_key",
        "headers",
        "hold",
        "passed",
        "protocol",
        "refused",
        "request_id",
        "started",
    )

    def __init__(self, scope: Scope) -> None:
        self.started = time.perf_counter()
        self.client_key: ClientKey | None = None
        self.hold: Hold | None = None  # the request's expected cost, held against a budget
        self.headers: dict[str, str] = {}
        self.passed: dict[str, str] = {}  # the profile's `passed_headers`
        self.refused: GatewayError | None = None  # a header no request may carry
        request_id = None
        anthropic_client = False
        beta: str | None = None
        for name, value in scope["headers"]:
            if name == b"x-request-id":
                request_id = value.decode("latin-1")
                if not _REQUEST_ID_OK.match(request_id):
                    request_id = None  # outside the rule (and the log's column): ours instead
            elif name.startswith(b"x-fleetgate-"):
                if len(value) > MAX_HEADER_VALUE:
                    header = name.decode("latin-1")
                    self.refused = invalid(
                        f"`{header}` is longer than {MAX_HEADER_VALUE} characters.", header
                    )
                self.headers[name.decode("latin-1")] = value.decode("latin-1")
            elif name == b"anthropic-version":
                anthropic_client = True
            elif name == b"anthropic-beta" and value:
                # several lines are one list, as Anthropic reads them (comma-separated)
                more = value.decode("latin-1")
                beta = f"{beta},{more}" if beta else more
        # the shape errors are answered in
        self.protocol = error_protocol(scope["path"], anthropic_client)
        if beta is not None and self.protocol == "anthropic":
            self.passed["anthropic-beta"] = beta
        self.request_id = request_id or new_request_id()

    def base_headers(self) -> Headers:
        return [(b"x-request-id", self.request_id.encode())]


def _routing_headers(plan: RoutePlan, outcome: Outcome, overhead: float) -> Headers:
    dep = outcome.candidate.deployment
    tried = len(outcome.attempts)
    extra = [(k.lower().encode(), v.encode()) for k, v in plan.headers.items()]
    extra.extend((k.lower().encode(), v.encode()) for k, v in outcome.extra_headers.items())
    return [
        *extra,
        (b"x-fleetgate-route", dep.id.encode()),
        (b"x-fleetgate-provider", dep.provider.id.encode()),
        (b"x-fleetgate-attempts", str(tried).encode()),
        (b"x-fleetgate-fallback-count", str(tried - 1).encode()),
        (b"x-fleetgate-overhead-ms", f"{overhead * 1000:.3f}".encode()),
    ]


def _attempt_headers(attempts: list[Attempt]) -> Headers:
    if not attempts:
        return []
    return [
        (b"x-fleetgate-attempts", str(len(attempts)).encode()),
        (b"x-fleetgate-fallback-count", str(len(attempts) - 1).encode()),
        (b"x-fleetgate-fallback-exhausted", b"true"),
    ]


class Gateway:
    """The ASGI app. One instance per process; the fleet inside it can be swapped live."""

    def __init__(
        self,
        holder: FleetHolder,
        state: RuntimeState | None = None,
        affinity: MemoryAffinity | None = None,
    ) -> None:
        self.holder = holder
        self.state = state or MemoryState()
        balancing = holder.fleet.config.routing.balancing
        self.affinity = affinity if affinity is not None else MemoryAffinity(balancing.affinity)
        holder.on_swap(
            lambda _old, new: self.affinity.configure(new.config.routing.balancing.affinity)
        )
        self.loads = EngineLoads()
        self.load_poller = EngineLoadPoller(
            holder, self.loads, lambda dep_id: self.state.health(dep_id).inflight
        )
        self.pool = UpstreamPool()
        self.executor = Executor(self.pool, self.state)
        self.refiner = ContextRefiner(self.pool)
        self.recent = RecentRequests()
        self.metrics = Metrics(lambda: self.holder.fleet)
        calibration = CalibrationSink(
            self.state.calibration, lambda: self.holder.fleet, self.refiner.counter.template
        )
        # `recent` is filled in `_record` itself
        self.recorder = Recorder([self.metrics, calibration])
        self.sticky = sticky_tiers_for(holder.fleet)
        holder.on_swap(lambda _old, new: configure_sticky(self.sticky, new))
        self.windows = WindowStore(holder.fleet.config.model_capabilities)
        self.discovery = DiscoveryService(holder, self.windows)
        self.fingerprints = FingerprintService(
            holder, self.state.calibration, FingerprintCache()
        )
        holder.on_swap(lambda _old, _new: self.fingerprints.wake())
        holder.on_swap(self._windows_on_swap)
        holder.on_swap(lambda _old, new: self._load_tokenizers(new))
        self.executor.on_context_limit = self._context_limit_stated
        self.executor.judge_cut = self._judge_cut
        self.ready = False
        self._loop: asyncio.AbstractEventLoop | None = None  # the serving loop, from startup
        self._loading: set[asyncio.Task[None]] = set()  # local tokenizers loading
        self.max_body = holder.fleet.config.server.max_body_bytes
        # read by the connection layer (server/connections.py) that serves this app
        self.connection_limits = ConnectionLimits.of(holder.fleet.config.server)
        # set by server/control.py when the gateway runs with a store (admin API, keys)
        self.control: ControlPlane | None = None
        self.guard: Guard | None = None
        self.admin_app: Callable[[Scope, Receive, Send], Awaitable[None]] | None = None
        self.dashboard: Callable[[Scope, Receive, Send], Awaitable[None]] | None = None
        self.routes: dict[tuple[str, str], Handler] = {
            ("GET", "/v1/models"): self.models,
            ("POST", "/v1/routing/explain"): self.explain,
            ("GET", "/healthz"): self.healthz,
            ("GET", "/readyz"): self.readyz,
            ("GET", "/metrics"): self.metrics_endpoint,
            ("GET", "/api/tags"): self.ollama_tags,
            ("GET", "/api/version"): self.ollama_version,
            ("GET", "/api/ps"): self.ollama_ps,
            ("POST", "/v1/messages/count_tokens"): self.count_tokens,
            ("GET", "/v1/fleet/windows"): self.fleet_windows,
            ("POST", "/v1/fleet/windows/refresh"): self.refresh_windows,
        }

    # ---- ASGI entry -----------------------------------------------------------------
    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            if scope["type"] == "lifespan":
                await self._lifespan(receive, send)
            return
        ex = Exchange(scope)
        try:
            if ex.refused is not None:
                raise ex.refused
            # the proxied endpoints go straight to `_proxy`: every async layer between the
            # server and the upstream call costs CPU on each resume of the request
            route = INGRESS_ROUTES.get(scope["path"]) if scope["method"] == "POST" else None
            if route is not None:
                await self._proxy(scope, route[0], route[1], receive, send, ex)
                return
            handler = self.routes.get((scope["method"], scope["path"]))
            if handler is None:
                handler = self._fallback_route(scope["method"], scope["path"])
            await handler(scope, receive, send, ex)
        except GatewayError as exc:
            await self._send_error(send, ex, exc)
        except ClientDisconnected:  # an ordinary event on the internet, not an error
            log.debug("request %s: the client went away before its body arrived", ex.request_id)
        except Exception:
            log.exception("unhandled error in request %s", ex.request_id)
            await self._send_error(
                send, ex, GatewayError("internal_error", "Internal error; see the gateway log.")
            )

    def _fallback_route(self, method: str, path: str) -> Handler:
        if method == "GET" and path.startswith("/v1/requests/"):
            return self.request_record
        if method == "GET" and path.startswith("/v1/models/"):
            return self.model_entry
        if self.control is not None and (path == "/admin" or path.startswith("/admin/")):
            return self._admin
        if self.control is not None and (path == "/ui" or path.startswith("/ui/")):
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

    async def _send_error(
        self, send: Send, ex: Exchange, exc: GatewayError, extra: Headers | None = None
    ) -> None:
        headers = ex.base_headers()
        headers.extend((k.lower().encode(), v.encode()) for k, v in exc.headers.items())
        if extra:
            headers.extend(extra)
        redactor = self.holder.fleet.redactor  # upstream text may quote a credential
        exc.message = redactor.text(exc.message)
        if exc.upstream_body:
            exc.upstream_body = redactor.bytes(exc.upstream_body)
        body = error_body(ex.protocol, exc)
        if exc.code == "upstream_rejected" and exc.upstream_body:
            body = upstream_error_body(ex.protocol, exc.upstream_body) or body
        await send_body(send, error_status(ex.protocol, exc), body, headers)

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
        self._loop = asyncio.get_running_loop()
        if self.control is not None:
            await self.control.start()
        self.recorder.start()
        await self.discovery.start()
        await self.load_poller.start()
        await self.fingerprints.start()
        self._load_tokenizers(self.holder.fleet)
        self.ready = True
        if self.control is not None:
            self.control.serving()

    def _load_tokenizers(self, fleet: Fleet) -> None:
        """The deployments' local tokenizers load in a thread, in the background (swaps
        happen on the serving loop)."""
        if self._loop is None:
            return
        task = self._loop.create_task(load_tokenizers(fleet))
        self._loading.add(task)
        task.add_done_callback(self._loading.discard)

    async def shutdown(self) -> None:
        self.ready = False
        await self.discovery.stop()
        await self.load_poller.stop()
        await self.fingerprints.stop()
        await self.recorder.stop()  # flushes the last records into the store
        if self.control is not None:
            await self.control.stop()
        await self.pool.close()

    async def _admin(self, scope: Scope, receive: Receive, send: Send, ex: Exchange) -> None:
        if self.admin_app is None:
            # built on first use: FastAPI and the admin models cost start-up time and memory
            # that a gateway nobody administers should not pay
            from fleetgate.admin.app import create_admin_app

            assert self.control is not None
            self.admin_app = create_admin_app(self.control)
        started = False

        async def tracked(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.admin_app(scope, receive, tracked)
        except Exception:
            if not started:
                raise  # answered as an internal_error by __call__
            # the framework answered already (its own 500): a second answer would break
            # the connection the client keeps alive for its next request
            log.exception("admin request %s failed after its answer began", ex.request_id)

    async def _dashboard(self, scope: Scope, receive: Receive, send: Send, ex: Exchange) -> None:
        if self.dashboard is None:  # loaded on first use, like the admin app
            from fleetgate.ui.assets import Dashboard

            self.dashboard = Dashboard()
        await self.dashboard(scope, receive, send)

    def _judge_cut(
        self, profile: RequestProfile, dep: Deployment, attempt: Attempt, window: int | None
    ) -> Cut | None:
        """Whether a window cut a successful answer (context/truncation.py): logged, and
        the window it shows is learned. The executor asks it of every whole answer."""
        found = judge(
            profile.body,
            profile.endpoint,
            dep.provider.kind,
            window,
            attempt.prompt_tokens,
            attempt.completion_tokens,
            attempt.finish,
        )
        if found is None:
            return None
        log.warning(
            "%s: request %s on %s: %s",
            found.note,
            profile.request_id,
            dep.id,
            found.header_value(),
        )
        if found.window is not None and found.window != window:
            self._context_limit_stated(dep.id, found.window, "cut_short")
        return found

    def _check_stream_end(self, profile: RequestProfile, plan: RoutePlan, outcome: Outcome) -> None:
        """A stream is judged at its end (its bytes are the client's already)."""
        attempt = outcome.attempts[-1]
        if not attempt.ok:  # a stream that broke: its end never came
            return
        dep = outcome.candidate.deployment
        window = (plan.window_of or effective_window)(dep)
        outcome.cut = self._judge_cut(profile, dep, attempt, window)
        _flag_cut(plan, outcome)

    def _windows_on_swap(self, _old: Fleet, new: Fleet) -> None:
        self.windows.set_capabilities(new.config.model_capabilities)
        for deployment_id in new.deployments:  # names or limits may have changed
            self.discovery.request_refresh(deployment_id)

    def _context_limit_stated(
        self, deployment_id: str, tokens: int, source: str = "parsed_from_error"
    ) -> None:
        self.windows.note_context_error(deployment_id, tokens, source=source)
        self.discovery.request_refresh(deployment_id)

    # ---- the proxied endpoints --------------------------------------------------------
    async def _proxy(
        self,
        scope: Scope,
        endpoint: str,
        parser: Parser,
        receive: Receive,
        send: Send,
        ex: Exchange,
    ) -> None:
        profile = parser(endpoint, await read_body(receive, self.max_body))
        profile.request_id = ex.request_id
        profile.headers = ex.headers
        profile.passed_headers = ex.passed
        fleet = self.holder.fleet
        if endpoint == "ollama.show" and not ollama_api.has_worker(fleet, profile.model):
            await self._show_from_fleet(scope, send, ex, profile.model)
            return
        plan: RoutePlan | None = None
        try:
            if self.guard is not None:
                ex.client_key = await self.guard.admit(scope, profile.model)
            plan = build_plan(
                profile,
                fleet,
                self.state,
                sticky=self.sticky,
                windows=self.windows,
                affinity=self.affinity,
                loads=self.loads,
            )
            require_route(plan)
            await self.refiner.refine(plan, profile, fleet)  # exact count near a boundary
            if ex.client_key is not None and self.guard is not None:
                ex.hold = await self.guard.hold(ex.client_key, plan, profile, fleet)
        except GatewayError as exc:  # refused before any upstream call: logged all the same
            self._record(ex, profile, plan, exc.status, exc.code, [], None, 0.0)
            raise
        watch = DisconnectWatch(receive, self._loop or asyncio.get_running_loop(), scope)
        try:
            try:
                outcome = await self.executor.run(plan, profile, fleet)
                _note_context_tier(plan, outcome)
                record_served(self.affinity, plan, profile, outcome.candidate.deployment.id)
            except ChainExhausted as exc:
                self._record(ex, profile, plan, exc.status, exc.code, exc.attempts, None, 0.0)
                extra = [(k.lower().encode(), v.encode()) for k, v in plan.headers.items()]
                extra.extend(_attempt_headers(exc.attempts))
                await self._send_error(send, ex, exc, extra)
                return
            if outcome.stream is not None:
                await self._send_stream(send, ex, profile, plan, outcome)
                return
            body = outcome.body
            assert body is not None
            _flag_cut(plan, outcome)  # judged by the executor (a cut it could not mend)
            await self._release(ex, outcome, plan)  # a next request must see this one's cost
            overhead = time.perf_counter() - ex.started - outcome.upstream_seconds
            headers = ex.base_headers()
            headers.extend(_routing_headers(plan, outcome, overhead))
            # recorded before the answer leaves: whoever has it can read its record
            self._record(
                ex, profile, plan, outcome.status, None, outcome.attempts, outcome, overhead
            )
            await send_body(send, outcome.status, body, headers, outcome.content_type.encode())
        except asyncio.CancelledError:
            if not watch.cancelled:
                raise
            await watch.absorb()
        finally:
            watch.finish()
            if ex.hold is not None and not ex.hold.settled and self.guard is not None:
                assert ex.client_key is not None  # the client left before any record
                self.guard.settle(ex.client_key, 0, 0.0, ex.hold)

    async def _release(self, ex: Exchange, outcome: Outcome, plan: RoutePlan) -> None:
        """Settle the request's budget hold with its real cost, before the answer ends."""
        if ex.hold is None or self.guard is None or ex.client_key is None:
            return
        dep = outcome.candidate.deployment.id
        cost = usage(outcome.attempts, dep, plan.notes, self.holder.fleet)[1]
        await self.guard.release(ex.client_key, ex.hold, cost)

    async def _send_stream(
        self,
        send: Send,
        ex: Exchange,
        profile: RequestProfile,
        plan: RoutePlan,
        outcome: Outcome,
    ) -> None:
        assert outcome.stream is not None
        overhead = time.perf_counter() - ex.started - outcome.upstream_seconds
        headers = ex.base_headers()
        headers.extend(_routing_headers(plan, outcome, overhead))
        headers.append((b"content-type", outcome.content_type.encode()))
        headers.append((b"cache-control", b"no-cache"))
        stream = outcome.stream
        recorded = False
        try:
            # the head's write may wait for a slow client and meet its disconnect: the
            # stream is then dropped unstarted, and `end_stream` frees its connection
            start = {"type": "http.response.start", "status": outcome.status, "headers": headers}
            await send(start)
            async for chunk in stream:
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            self._check_stream_end(profile, plan, outcome)
            await self._release(ex, outcome, plan)  # a next request must see its cost
            # recorded before the stream's end reaches the client: whoever has the whole
            # answer can read its record
            self._record_stream(ex, profile, plan, outcome, overhead)
            recorded = True
            await send({"type": "http.response.body", "body": b""})
        finally:
            await stream.aclose()  # type: ignore[attr-defined]
            outcome.end_stream()  # a no-op once the stream has run its own end
            if not recorded:  # the client went away, or the stream failed mid-way
                self._record_stream(ex, profile, plan, outcome, overhead)

    def _record_stream(
        self,
        ex: Exchange,
        profile: RequestProfile,
        plan: RoutePlan,
        outcome: Outcome,
        overhead: float,
    ) -> None:
        code = "stream_interrupted" if outcome.attempts[-1].error_class else None
        self._record(ex, profile, plan, outcome.status, code, outcome.attempts, outcome, overhead)

    def _record(
        self,
        ex: Exchange,
        profile: RequestProfile,
        plan: RoutePlan | None,
        status: int,
        error_code: str | None,
        attempts: list[Attempt],
        outcome: Outcome | None,
        overhead: float,
    ) -> None:
        dep = outcome.candidate.deployment if outcome is not None else None
        key = ex.client_key
        record = RequestRecord(
            request_id=ex.request_id,
            time=time.time(),
            endpoint=profile.endpoint,
            requested_model=profile.model,
            resolution=plan.resolution if plan is not None else "rejected",
            stream=profile.stream,
            status=status,
            error_code=error_code,
            latency=time.perf_counter() - ex.started,
            overhead=overhead,
            deployment_id=dep.id if dep else None,
            provider_id=dep.provider.id if dep else None,
            attempts=attempts,
            dropped=plan.describe()["dropped"] if plan is not None and plan.dropped else [],
            client_key_id=key.id if key is not None else None,
            notes=plan.notes if plan is not None else {},
        )
        self.recent.add(record)
        self.recorder.add(record)
        if key is not None and self.guard is not None:
            self.guard.settle(key, *record_usage(record, self.holder.fleet), ex.hold)

    # ---- the gateway's own endpoints --------------------------------------------------
    def _is_admin(self, scope: Scope) -> bool:
        return self.control is not None and presents(scope, self.control.admin_key)

    def _require_admin(self, scope: Scope) -> None:
        if self.control is None or not self.control.admin_key:
            raise GatewayError(
                "admin_disabled", "This endpoint needs the admin key, and none is configured."
            )
        if not self._is_admin(scope):
            raise GatewayError("invalid_admin_key", "This endpoint needs the admin key.")

    def _listed(self, scope: Scope) -> Callable[[str], bool]:
        """Which models a catalog shows the caller: with auth on, a key (401 without one)
        sees the models it may use, nothing more."""
        key = self.guard.identify(scope) if self.guard is not None else None
        if key is None or key.allowed_models is None:
            return lambda _model: True
        return key.allows

    async def models(self, scope: Scope, receive: Receive, send: Send, ex: Exchange) -> None:
        listed = self._listed(scope)
        body = catalog(self.holder.fleet, self.windows)
        body["data"] = [entry for entry in body["data"] if listed(entry["id"])]
        await send_body(send, 200, orjson.dumps(anthropic_listing(body)), ex.base_headers())

    async def explain(self, scope: Scope, receive: Receive, send: Send, ex: Exchange) -> None:
        raw = await read_body(receive, self.max_body)
        guard = self.guard if not self._is_admin(scope) else None
        if guard is not None:
            guard.identify(scope)  # 401 before anything is said about the body
        body = parse_json_object(raw)
        model = body.get("model")
        if guard is not None and isinstance(model, str):
            guard.identify(scope, model)  # only models the key may use (403)
        result = explain_request(
            body,
            self.holder.fleet,
            self.state,
            ex.headers,
            sticky=ReadOnlySticky(self.sticky),
            windows=self.windows,
            affinity=self.affinity,
            loads=self.loads,
        )
        await send_body(send, 200, orjson.dumps(result), ex.base_headers())

    async def model_entry(self, scope: Scope, receive: Receive, send: Send, ex: Exchange) -> None:
        """`GET /v1/models/{id}`: one catalog entry (the openai SDK's `models.retrieve`)."""
        model_id = scope["path"].removeprefix("/v1/models/")
        listed = self._listed(scope)
        for entry in catalog(self.holder.fleet, self.windows)["data"]:
            if entry["id"] == model_id and listed(model_id):
                await send_body(send, 200, orjson.dumps(anthropic_entry(entry)), ex.base_headers())
                return
        raise GatewayError(
            "model_not_found",
            f"There is no model {model_id!r}; GET /v1/models lists them.",
            param="model",
        )

    async def count_tokens(self, scope: Scope, receive: Receive, send: Send, ex: Exchange) -> None:
        profile = parse_messages("messages", await read_body(receive, self.max_body))
        profile.headers = ex.headers
        profile.passed_headers = ex.passed
        if self.guard is not None:
            self.guard.identify(scope, profile.model)
        fleet = self.holder.fleet
        count = await count_message_tokens(
            profile, fleet, self.state, self.windows, self.pool, self.refiner
        )
        headers = ex.base_headers()
        headers.extend(count.headers())
        await send_body(send, 200, orjson.dumps({"input_tokens": count.tokens}), headers)

    async def _show_from_fleet(self, scope: Scope, send: Send, ex: Exchange, model: str) -> None:
        if self.guard is not None:
            self.guard.identify(scope, model)
        body = ollama_api.show(self.holder.fleet, self.windows, model)
        if body is None:
            raise GatewayError("model_not_found", f"There is no model {model!r}.", param="model")
        await send_body(send, 200, orjson.dumps(body), ex.base_headers())

    async def ollama_tags(self, scope: Scope, receive: Receive, send: Send, ex: Exchange) -> None:
        listed = self._listed(scope)
        fleet = self.holder.fleet
        body = ollama_api.tags(fleet, await ollama_api.ask_workers(self.pool, fleet, "/api/tags"))
        body["models"] = [entry for entry in body["models"] if listed(entry["model"])]
        await send_body(send, 200, orjson.dumps(body), ex.base_headers())

    async def ollama_version(
        self, scope: Scope, receive: Receive, send: Send, ex: Exchange
    ) -> None:
        await send_body(send, 200, orjson.dumps(ollama_api.version()), ex.base_headers())

    async def ollama_ps(self, scope: Scope, receive: Receive, send: Send, ex: Exchange) -> None:
        listed = self._listed(scope)
        fleet = self.holder.fleet
        listing = await ollama_api.ask_workers(self.pool, fleet, "/api/ps")
        body = ollama_api.ps(fleet, self.windows, listing)
        body["models"] = [entry for entry in body["models"] if listed(entry["model"])]
        await send_body(send, 200, orjson.dumps(body), ex.base_headers())

    async def fleet_windows(self, scope: Scope, receive: Receive, send: Send, ex: Exchange) -> None:
        if self.guard is not None and not self._is_admin(scope):
            self.guard.identify(scope)  # with auth on, a key (401 without one)
        body = windows_view(self.holder.fleet, self.windows)
        await send_body(send, 200, orjson.dumps(body), ex.base_headers())

    async def refresh_windows(
        self, scope: Scope, receive: Receive, send: Send, ex: Exchange
    ) -> None:
        self._require_admin(scope)  # it makes the gateway probe every worker
        await read_body(receive, self.max_body)
        await self.discovery.refresh()
        body = windows_view(self.holder.fleet, self.windows)
        await send_body(send, 200, orjson.dumps(body), ex.base_headers())

    async def healthz(self, scope: Scope, receive: Receive, send: Send, ex: Exchange) -> None:
        await send_body(send, 200, b'{"status":"ok"}', ex.base_headers())

    async def readyz(self, scope: Scope, receive: Receive, send: Send, ex: Exchange) -> None:
        fleet = self.holder.fleet
        body: dict[str, Any]
        if not self.ready:
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

    async def metrics_endpoint(
        self, scope: Scope, receive: Receive, send: Send, ex: Exchange
    ) -> None:
        metrics_key = resolve_secret(self.holder.fleet.config.server.metrics_key)
        if metrics_key and not (presents(scope, metrics_key) or self._is_admin(scope)):
            raise GatewayError(
                "invalid_metrics_key", "GET /metrics needs the metrics key (`server.metrics_key`)."
            )
        await self.recorder.flush()
        await send_body(
            send,
            200,
            self.metrics.render(self.recorder),
            ex.base_headers(),
            CONTENT_TYPE_LATEST.encode(),
        )

    async def request_record(
        self, scope: Scope, receive: Receive, send: Send, ex: Exchange
    ) -> None:
        request_id = scope["path"].removeprefix("/v1/requests/")
        # with auth on, a key sees its own records only (401 without one); the admin all
        if self._is_admin(scope):
            record = self.recent.newest(request_id)
        else:
            key = self.guard.identify(scope) if self.guard is not None else None
            record = self.recent.get(request_id, key.id if key is not None else None)
        if record is None:
            raise GatewayError(
                "not_found",
                f"No record of request {request_id!r} (only recent requests are kept).",
            )
        await send_body(send, 200, orjson.dumps(record.public()), ex.base_headers())


def _flag_cut(plan: RoutePlan, outcome: Outcome) -> None:
    """An answer a window cut goes out flagged: header (sent unless streamed) and note."""
    found = outcome.cut
    if found is not None:
        outcome.extra_headers[found.header] = found.header_value()
        plan.notes[found.note] = found.detail


def _note_context_tier(plan: RoutePlan, outcome: Outcome) -> None:
    """Which tier served a request whose plan weighed context windows (header + notes)."""
    if "context_estimate" not in plan.notes:
        return
    dep = outcome.candidate.deployment
    outcome.extra_headers[TIER_HEADER] = dep.tier
    plan.notes["context_tier"] = dep.tier


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


def windows_view(fleet: Fleet, windows: WindowStore) -> dict[str, Any]:
    """`GET /v1/fleet/windows`: each deployment's effective window and where it came from."""
    return {"data": [windows.view(d).public(d.id) for d in fleet.deployments.values()]}


def infer_endpoint(body: dict[str, Any]) -> str:
    if "messages" in body:
        return "chat.completions"
    if "prompt" in body:
        return "completions"
    if "input" in body:
        return "embeddings"
    return "chat.completions"


def explain_request(
    body: dict[str, Any],
    fleet: Fleet,
    state: RuntimeState,
    headers: dict[str, str],
    sticky: StickyTiers | None = None,
    windows: WindowStore | None = None,
    affinity: MemoryAffinity | None = None,
    loads: EngineLoads | None = None,
) -> dict[str, Any]:
    """The plan a request would follow, without sending anything."""
    endpoint = body.pop("endpoint", None) or infer_endpoint(body)
    parsers = {name: parser for name, parser in INGRESS_ROUTES.values()}
    if not isinstance(endpoint, str) or endpoint not in parsers:
        raise GatewayError(
            "invalid_request",
            f"`endpoint` must be one of {sorted(parsers)}.",
            param="endpoint",
        )
    try:
        raw = orjson.dumps(body)
    except TypeError as exc:  # e.g. an integer beyond 64 bits, from a lenient JSON parser
        raise invalid(f"The request body cannot be read as JSON: {exc}.") from exc
    profile = parsers[endpoint](endpoint, raw)
    profile.headers = headers
    plan = build_plan(
        profile, fleet, state, sticky=sticky, windows=windows, affinity=affinity, loads=loads
    )
    result = plan.describe()
    result["endpoint"] = endpoint
    try:
        require_route(plan)
    except GatewayError as exc:
        result["error"] = exc.body()["error"]
    return result
