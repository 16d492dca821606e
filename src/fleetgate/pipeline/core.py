"""The request pipeline of one process: admit → plan → refine → hold → execute → record.

A front (the ASGI proxy, the endpoint picker) reads a request, builds its `Exchange` and
`RequestProfile`, and calls these stages; it turns what they return into bytes. The
pipeline holds the runtime parts every front shares: the fleet holder, runtime state,
affinity, engine loads, the upstream pool and executor, the refiner, discovery, and the
recorder with its metrics.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from fleetgate.auth.guard import Guard, record_usage, usage
from fleetgate.context.counts import load_tokenizers
from fleetgate.context.placement import effective_window
from fleetgate.context.refine import ContextRefiner
from fleetgate.context.truncation import Cut, judge
from fleetgate.discovery.engine_load import EngineLoadPoller, EngineLoads
from fleetgate.discovery.fingerprint import FingerprintCache, FingerprintService
from fleetgate.discovery.health_check import HealthChecker
from fleetgate.discovery.replicas import ReplicaNames
from fleetgate.discovery.service import DiscoveryService
from fleetgate.discovery.store import WindowStore
from fleetgate.errors import GatewayError
from fleetgate.execute.executor import ChainExhausted, Executor, Outcome
from fleetgate.execute.outcome import Attempt
from fleetgate.execute.upstream import UpstreamPool
from fleetgate.fleet import Deployment, Fleet, FleetHolder, build_fleet
from fleetgate.ingress.profile import RequestProfile
from fleetgate.pipeline.exchange import Exchange
from fleetgate.pipeline.explain import explain_request
from fleetgate.pipeline.respond import flag_cut, note_context_tier
from fleetgate.record.access_log import AccessLog
from fleetgate.record.calibration_sink import CalibrationSink
from fleetgate.record.metrics import Metrics
from fleetgate.record.recorder import RecentRequests, Recorder, RequestRecord
from fleetgate.routing.orderers.affinity import record_served
from fleetgate.routing.plan import RoutePlan
from fleetgate.routing.planner import build_plan, require_route
from fleetgate.routing.sticky import ReadOnlySticky, configure_sticky, sticky_tiers_for
from fleetgate.state.affinity import MemoryAffinity
from fleetgate.state.runtime import MemoryState, RuntimeState
from fleetgate.telemetry.settings import telemetry_settings
from fleetgate.trace_context import NUMBER, TraceContext, Tracing

if TYPE_CHECKING:
    from fleetgate.telemetry.export import TelemetrySink

log = logging.getLogger("fleetgate")

# how long a start waits, at most, for the engines' windows and tokenizer fingerprints
START_WAIT = 3.0


class Pipeline:
    """One per process; the fleet inside its holder can be swapped live."""

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
        self.metrics = Metrics(lambda: self.holder.fleet, self.state)
        calibration = CalibrationSink(
            self.state.calibration, lambda: self.holder.fleet, self.refiner.counter.template
        )
        # `recent` is filled in `record` itself
        self.recorder = Recorder([self.metrics, calibration])
        if holder.fleet.config.server.access_log:
            self.recorder.sinks.append(AccessLog())
        # OpenTelemetry, when an endpoint is set: the request path only makes ids, the
        # spans are built from the records (telemetry/)
        self.tracing: Tracing | None = None
        self.telemetry: TelemetrySink | None = None
        settings = telemetry_settings(holder.fleet.config.telemetry)
        if settings is not None:
            from fleetgate.telemetry.export import TelemetrySink

            self.telemetry = TelemetrySink(settings, lambda: self.holder.fleet, self.metrics)
            self.recorder.sinks.append(self.telemetry)
            self.tracing = Tracing(settings.sample_ratio, settings.parent_based)
        self.sticky = sticky_tiers_for(holder.fleet)
        holder.on_swap(lambda _old, new: configure_sticky(self.sticky, new))
        self.windows = WindowStore(holder.fleet.config.model_capabilities)
        self.discovery = DiscoveryService(holder, self.windows)
        self.fingerprints = FingerprintService(
            holder, self.state.calibration, FingerprintCache(), self.windows.window
        )
        holder.on_swap(lambda _old, _new: self.fingerprints.wake())
        self.discovery.on_change = self.fingerprints.wake  # a tier read from its engine
        # a provider's `endpoints` named by DNS: resolved again, the fleet rebuilt on change
        self.replicas = ReplicaNames(
            lambda: holder.fleet.config,
            lambda: holder.swap(build_fleet(holder.fleet.config, holder.fleet.version)),
        )
        self.health_checks = HealthChecker(holder, self.state)
        holder.on_swap(self._windows_on_swap)
        holder.on_swap(lambda _old, new: self._load_tokenizers(new))
        self.executor.on_context_limit = self.context_limit_stated
        self.executor.judge_cut = self.judge_cut
        # the client keys' check, set by the control plane when auth is on: with auth off
        # the hot path does not even look at keys
        self.guard: Guard | None = None
        self.ready = False
        self.loop: asyncio.AbstractEventLoop | None = None  # the serving loop, from start
        self._loading: set[asyncio.Task[None]] = set()  # local tokenizers loading

    # ---- lifecycle --------------------------------------------------------------------
    async def start(self) -> None:
        self.loop = asyncio.get_running_loop()
        self.recorder.start()
        await self.replicas.start()
        if self.telemetry is not None:
            self.telemetry.start()
        await self.discovery.start()
        await self.load_poller.start()
        await self.health_checks.start()
        self._load_tokenizers(self.holder.fleet)
        # before the first request is placed: the windows the engines report (the tiers),
        # then the tokenizers of the engines the estimate places by, fingerprinted. A fleet
        # with nothing to ask settles at once; silent engines hold the start no longer
        # than START_WAIT in all
        deadline = self.loop.time() + START_WAIT
        if not await self.discovery.settled(START_WAIT):
            log.info("started before the engines' windows were read")
        await self.fingerprints.start()
        if not await self.fingerprints.settled(max(0.0, deadline - self.loop.time())):
            log.info("started before the engines' tokenizers were fingerprinted")
        self.ready = True

    async def stop(self) -> None:
        """Background work ends and the last records are flushed into their sinks."""
        self.ready = False
        await self.replicas.stop()
        await self.discovery.stop()
        await self.load_poller.stop()
        await self.health_checks.stop()
        await self.fingerprints.stop()
        await self.recorder.stop()
        if self.telemetry is not None:
            await self.telemetry.stop()  # the last spans and figures, briefly

    async def close(self) -> None:
        await self.pool.close()

    def _load_tokenizers(self, fleet: Fleet) -> None:
        """The deployments' local tokenizers load in a thread, in the background (swaps
        happen on the serving loop)."""
        if self.loop is None:
            return
        task = self.loop.create_task(load_tokenizers(fleet))
        self._loading.add(task)
        task.add_done_callback(self._loading.discard)

    def _windows_on_swap(self, _old: Fleet, new: Fleet) -> None:
        self.windows.set_capabilities(new.config.model_capabilities)
        for deployment_id in new.deployments:  # names or limits may have changed
            self.discovery.request_refresh(deployment_id)

    # ---- admit → plan → refine → hold ---------------------------------------------------
    async def plan(
        self, ex: Exchange, profile: RequestProfile, headers: Iterable[tuple[bytes, bytes]]
    ) -> RoutePlan:
        """The plan a request follows, its exact count asked near a boundary and its cost
        held against the key's budget. A refusal is recorded, then raised."""
        fleet = self.holder.fleet
        marks = None
        if self.tracing is not None:  # a child of the client's trace, or a new one
            trace = self.tracing.begin(ex.traceparent, ex.tracestate, ex.started, ex.path)
            profile.trace = trace
            marks = trace.marks if trace.sampled else None
        plan: RoutePlan | None = None
        try:
            if self.guard is not None:
                ex.client_key = await self.guard.admit(headers, profile.model)
            if marks is not None:
                marks["plan"] = time.perf_counter()
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
            if marks is not None:
                marks["planned"] = time.perf_counter()
            if ex.client_key is not None and self.guard is not None:
                ex.hold = await self.guard.hold(ex.client_key, plan, profile, fleet)
        except GatewayError as exc:  # refused before any upstream call: logged all the same
            self.record(ex, profile, plan, exc.status, exc.code, [], None, 0.0)
            raise
        return plan

    def explain(self, body: dict[str, Any], headers: dict[str, str]) -> dict[str, Any]:
        """The plan `body` would follow now, balancing included, sending nothing and
        changing no state (the sticky tiers are only read)."""
        return explain_request(
            body,
            self.holder.fleet,
            self.state,
            headers,
            sticky=ReadOnlySticky(self.sticky),
            windows=self.windows,
            affinity=self.affinity,
            loads=self.loads,
        )

    # ---- execute ------------------------------------------------------------------------
    async def execute(self, ex: Exchange, profile: RequestProfile, plan: RoutePlan) -> Outcome:
        """Try the plan in order. A chain that runs out is recorded, then raised."""
        try:
            outcome = await self.executor.run(plan, profile, self.holder.fleet)
        except ChainExhausted as exc:
            self.record(ex, profile, plan, exc.status, exc.code, exc.attempts, None, 0.0)
            raise
        note_context_tier(plan, outcome)
        record_served(self.affinity, plan, profile, outcome.candidate.deployment.id)
        return outcome

    async def answered(
        self, ex: Exchange, profile: RequestProfile, plan: RoutePlan, outcome: Outcome
    ) -> float:
        """A whole answer is ready: its cost settled and its record kept before it leaves
        (whoever has it can read its record). Returns the gateway's own time."""
        flag_cut(plan, outcome)  # judged by the executor (a cut it could not mend)
        await self.release(ex, outcome, plan)  # a next request must see this one's cost
        overhead = time.perf_counter() - ex.started - outcome.upstream_seconds
        self.record(ex, profile, plan, outcome.status, None, outcome.attempts, outcome, overhead)
        return overhead

    async def stream_ended(
        self,
        ex: Exchange,
        profile: RequestProfile,
        plan: RoutePlan,
        outcome: Outcome,
        overhead: float,
    ) -> None:
        """A relayed stream ran to its end: judged, settled and recorded before the end
        reaches the client."""
        self.check_stream_end(profile, plan, outcome)
        await self.release(ex, outcome, plan)  # a next request must see its cost
        self.record_stream(ex, profile, plan, outcome, overhead)

    async def release(self, ex: Exchange, outcome: Outcome, plan: RoutePlan) -> None:
        """Settle the request's budget hold with its real cost, before the answer ends."""
        if ex.hold is None or self.guard is None or ex.client_key is None:
            return
        dep = outcome.candidate.deployment.id
        cost = usage(outcome.attempts, dep, plan.notes, self.holder.fleet)[1]
        await self.guard.release(ex.client_key, ex.hold, cost)

    def settle_unfinished(self, ex: Exchange) -> None:
        """The client left before any record: its hold is given back whole."""
        if ex.hold is not None and not ex.hold.settled and self.guard is not None:
            assert ex.client_key is not None
            self.guard.settle(ex.client_key, 0, 0.0, ex.hold)

    # ---- what an answer shows -----------------------------------------------------------
    def judge_cut(
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
            self.context_limit_stated(dep.id, found.window, "cut_short")
        return found

    def check_stream_end(self, profile: RequestProfile, plan: RoutePlan, outcome: Outcome) -> None:
        """A stream is judged at its end (its bytes are the client's already)."""
        attempt = outcome.attempts[-1]
        if not attempt.ok:  # a stream that broke: its end never came
            return
        if not outcome.judged:  # a continued stream's end is judged by its continuation
            dep = outcome.candidate.deployment
            window = (plan.window_of or effective_window)(dep)
            outcome.cut = self.judge_cut(profile, dep, attempt, window)
        flag_cut(plan, outcome)

    def context_limit_stated(
        self, deployment_id: str, tokens: int, source: str = "parsed_from_error"
    ) -> None:
        self.windows.note_context_error(deployment_id, tokens, source=source)
        self.discovery.request_refresh(deployment_id)

    # ---- record -------------------------------------------------------------------------
    def record_stream(
        self,
        ex: Exchange,
        profile: RequestProfile,
        plan: RoutePlan,
        outcome: Outcome,
        overhead: float,
    ) -> None:
        code = "stream_interrupted" if outcome.attempts[-1].error_class else None
        self.record(ex, profile, plan, outcome.status, code, outcome.attempts, outcome, overhead)

    def record(
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
        trace = profile.trace
        if trace is not None:
            record.trace_id = trace.trace_id
            if trace.sampled:  # the telemetry sink makes its spans
                record.trace = trace
                note_trace(trace, plan, profile)
        self.recent.add(record)
        self.recorder.add(record)
        if key is not None and self.guard is not None:
            self.guard.settle(key, *record_usage(record, self.holder.fleet), ex.hold)


def note_trace(trace: TraceContext, plan: RoutePlan | None, profile: RequestProfile) -> None:
    """What a sampled request's spans show that its record lacks: the candidates kept, and
    the sampling knobs the client set (numbers only)."""
    if plan is not None:
        trace.kept = tuple([c.deployment.id for c in plan.candidates])
    body = profile.body
    params = trace.params
    if type(value := body.get("temperature")) in NUMBER:
        params["temperature"] = value
    if type(value := body.get("top_p")) in NUMBER:
        params["top_p"] = value
    if profile.output_reserve is not None:
        params["max_tokens"] = profile.output_reserve
