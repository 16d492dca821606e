"""The endpoint picker: the proxy's plan, answered as endpoints for Envoy to send to.

It knows nothing of gRPC (`service.py` speaks ext_proc). `pick` runs the same stages as the
proxy (ingress adapters, resolve → filter → order → refine, admission) and turns the plan
into the ordered `ip:port` list of the candidates the data plane can reach. `finish` reads
the response Envoy showed it and feeds the same state and record as the proxy's executor.
"""

from __future__ import annotations

import itertools
import logging
import secrets
import time
from collections.abc import Iterable
from dataclasses import dataclass, field

from fleetgate.epp.endpoints import EndpointBook
from fleetgate.epp.evidence import ResponseWatch
from fleetgate.errors import GatewayError
from fleetgate.execute.context_errors import parse_context_error
from fleetgate.execute.executor import Outcome, attempt_row
from fleetgate.execute.failures import (
    client_error,
    exhausted_error,
    queue_full_error,
    record_failure,
)
from fleetgate.execute.outcome import (
    CLIENT_ERROR,
    CONNECT,
    CONTEXT_EXCEEDED,
    RESET,
    SERVER_ERROR,
    STREAM_BROKEN,
)
from fleetgate.fleet import Provider
from fleetgate.ingress.profile import RequestProfile
from fleetgate.ingress.routes import INGRESS_ROUTES
from fleetgate.pipeline.core import Pipeline
from fleetgate.pipeline.exchange import Exchange
from fleetgate.pipeline.respond import refusal
from fleetgate.routing.orderers.affinity import record_served
from fleetgate.routing.plan import Candidate, Dropped, RoutePlan
from fleetgate.web.asgi import too_large

log = logging.getLogger("fleetgate.epp")

Headers = list[tuple[bytes, bytes]]
DATA_PLANE = "data_plane"  # the name dropped candidates carry in explain and the log
UNOBSERVED_GRACE = 60.0  # seconds past its provider's timeout a pick waits for its answer
UNOBSERVED = "answer_unobserved"  # the request log's code for a pick whose answer never came
# the client's credentials to the gateway: never passed on to an engine (as the proxy never
# sends them either)
CLIENT_CREDENTIALS = ("authorization", "x-api-key", "proxy-authorization")


class Refusal(Exception):
    """A request the picker answers itself, in the client's protocol."""

    def __init__(self, status: int, body: bytes, headers: Headers) -> None:
        super().__init__(status)
        self.status = status
        self.body = body
        self.headers = headers


@dataclass(slots=True)
class Pick:
    """One request the picker sent on, until its answer has been seen."""

    ex: Exchange
    profile: RequestProfile
    plan: RoutePlan
    handed: list[tuple[Candidate, tuple[str, ...]]]  # in order, each with its endpoints
    body: bytes | None  # the body to send instead (its `model` rewritten); None: as is
    began: str  # the deployment counted in flight
    # what the observe call claims it by: the request's id, or a token of its own when
    # another pick in flight has that id (a client's own id, shared by its requests)
    key: str = ""
    picked_at: float = field(default_factory=time.perf_counter)
    deadline: float = 0.0  # monotonic time past which its answer is given up on

    @property
    def upstream_model(self) -> str:
        """The model name sent upstream: every handed candidate takes the same body."""
        return self.handed[0][0].deployment.upstream_model

    @property
    def endpoints(self) -> list[str]:
        """Every endpoint handed, in order, each once (most often one candidate's)."""
        handed = self.handed
        if len(handed) == 1:
            return list(dict.fromkeys(handed[0][1]))
        return list(dict.fromkeys(e for _c, ends in handed for e in ends))

    def header_mutations(self, endpoints: list[str], destination: str) -> list[tuple[str, str]]:
        """The headers the pick sets: `endpoints` and their comma-joined `destination`
        (`self.endpoints`, made once by the caller, who needs them too)."""
        head = self.handed[0][0].deployment.provider
        headers = [
            ("x-gateway-destination-endpoint", destination),
            ("x-envoy-max-retries", str(len(endpoints) - 1)),
            ("x-envoy-upstream-rq-timeout-ms", str(int(head.timeouts.total * 1000))),
        ]
        if not self.ex.id_given:  # the request's id, as the answer's evidence finds it
            headers.append(("x-request-id", self.ex.request_id))
        if self.body is not None:
            headers.append(("content-length", str(len(self.body))))
        return headers


def _endpoints_of(pick: Pick, candidate: Candidate) -> tuple[str, ...]:
    return next((ends for c, ends in pick.handed if c is candidate), ())


def _same_body(a: Candidate, b: Candidate) -> bool:
    """Whether `b` takes exactly the body sent to `a` (Envoy resends it as it is)."""
    return (
        a.deployment.upstream_model == b.deployment.upstream_model
        and a.params == b.params
        and a.drop_params == b.drop_params
    )


class Picker:
    def __init__(
        self, pipeline: Pipeline, book: EndpointBook, max_endpoints: int | None = None
    ) -> None:
        self.pipeline = pipeline
        self.book = book
        # how many endpoints a pick names at most (None: every one the plan can fall back
        # to): a data plane that reads one address (ORIGINAL_DST on the header) takes 1
        self.max_endpoints = max_endpoints
        self._pending: dict[str, Pick] = {}  # by claim key

    # ---- the request ------------------------------------------------------------------
    async def pick(
        self,
        path: str,
        headers: Iterable[tuple[bytes, bytes]],
        body: bytes,
        subset: frozenset[str] | None = None,
        claimable: bool = True,
    ) -> Pick:
        """The pick for one request; raises `Refusal` with the answer the client gets.
        `claimable`: its answer is shown on another call, which `claim`s it by its key (the
        request's id, or a token when that id is pending already; else the caller holds it,
        and `finish`es it)."""
        headers = list(headers)
        path = path.partition("?")[0]
        ex = Exchange(path, headers)
        try:
            pick = await self._pick(ex, path, headers, body, subset)
        except GatewayError as exc:
            status, body_out, extra = refusal(ex.protocol, exc, self.pipeline.holder.fleet.redactor)
            raise Refusal(status, body_out, [*ex.base_headers(), *extra]) from None
        if claimable:
            key = ex.request_id
            if key in self._pending:  # shared: this one's answer is claimed by a token
                key = _token()
            pick.key = key
            self._pending[key] = pick
        return pick

    async def _pick(
        self,
        ex: Exchange,
        path: str,
        headers: Headers,
        body: bytes,
        subset: frozenset[str] | None,
    ) -> Pick:
        if ex.refused is not None:
            raise ex.refused
        limit = self.pipeline.holder.fleet.config.server.max_body_bytes
        if len(body) > limit:  # as the proxy refuses it (Envoy holds a body up to 1 MiB)
            raise too_large(limit)
        route = INGRESS_ROUTES.get(path)
        if route is None:
            raise GatewayError("not_found", f"There is no endpoint at {path}.")
        endpoint, parser = route
        profile = parser(endpoint, body)
        profile.request_id = ex.request_id
        profile.headers = ex.headers
        profile.passed_headers = ex.passed
        plan = await self.pipeline.plan(ex, profile, headers)
        try:
            handed, began = self._handover(plan, profile, subset)
        except GatewayError as exc:
            self.pipeline.record(ex, profile, plan, exc.status, exc.code, [], None, 0.0)
            self.pipeline.settle_unfinished(ex)
            raise
        head = handed[0][0]
        rewritten = None
        if head.deployment.upstream_model != profile.model or head.params or head.drop_params:
            wire = self.pipeline.executor.protocols.wire(profile, head.deployment)
            rewritten = wire.payload(profile, head)
        pick = Pick(ex, profile, plan, handed, rewritten, began)
        pick.deadline = time.monotonic() + head.deployment.provider.timeouts.total
        pick.deadline += UNOBSERVED_GRACE
        return pick

    def _handover(
        self, plan: RoutePlan, profile: RequestProfile, subset: frozenset[str] | None
    ) -> tuple[list[tuple[Candidate, tuple[str, ...]]], str]:
        """The plan's candidates the data plane can be sent to, in order, with their
        endpoints; the others join the plan's dropped list with the reason."""
        protocols = self.pipeline.executor.protocols
        handed: list[tuple[Candidate, tuple[str, ...]]] = []
        state = self.pipeline.state
        began = ""
        full: list[str] = []  # at their worker's concurrency limit: the picker holds no queue
        room = self.max_endpoints  # endpoints the pick may still name (None: no bound)
        for candidate in plan.candidates:
            dep = candidate.deployment
            reason = self.book.blocker(dep.provider)
            if reason is None and self._at_limit(dep.provider):
                full.append(dep.id)
                reason = "worker at its concurrency limit"
            ends = self.book.of(dep.provider) if reason is None else ()
            if reason is None and subset is not None:
                ends = tuple(e for e in ends if e in subset)
                if not ends:
                    reason = "none of its endpoints is in the data plane's subset"
            elif reason is None and not ends:
                reason = "its name resolves to no endpoint yet"
            if reason is None:
                wire = protocols.wire(profile, dep)
                if wire.translation is not None:
                    reason = f"it needs the {wire.label} translation, which only the proxy does"
            if reason is None and handed and not _same_body(handed[0][0], candidate):
                reason = "it needs another body than the first endpoint's (model or parameters)"
            if reason is None and not began:
                if state.try_begin(dep.id, time.time()):
                    began = dep.id
                else:
                    reason = "half-open probe in flight"
            if reason is not None:
                plan.dropped.append(Dropped(dep.id, DATA_PLANE, reason))
                continue
            if room is not None:  # the bound reached: the plan's later candidates are not named
                ends = ends[:room]
                room -= len(ends)
            handed.append((candidate, ends))
            if room == 0:
                break
        if not handed and full:
            raise queue_full_error(plan, full, state)
        if not handed:
            reasons = "; ".join(
                f"{d.deployment_id}: {d.reason}" for d in plan.dropped if d.filter == DATA_PLANE
            )
            raise GatewayError(
                "no_route",
                f"No deployment of {plan.requested_model!r} can be handed to the data plane "
                f"({reasons}); such deployments are served by `fleetgate serve`.",
            )
        return handed, began

    def _at_limit(self, provider: Provider) -> bool:
        """Whether the provider's worker has `concurrency_limit` requests in flight (the
        proxy would queue the next one; the picker does not hold requests)."""
        limit = provider.concurrency_limit
        if limit is None:
            return False
        health = self.pipeline.state.health
        deps = self.pipeline.holder.fleet.deployments.values()
        return sum(health(d.id).inflight for d in deps if d.provider is provider) >= limit

    # ---- the response -----------------------------------------------------------------
    def claim(self, key: str) -> Pick | None:
        """The pick whose answer is about to be shown, by its claim key."""
        return self._pending.pop(key, None)

    def finish(self, pick: Pick, watch: ResponseWatch) -> None:
        """Feed the answer's evidence: state, affinity, calibration, the request log."""
        pipeline = self.pipeline
        fleet = pipeline.holder.fleet
        plan, profile = pick.plan, pick.profile
        served_at = watch.served
        attempts = []
        served: Candidate | None = None
        for candidate, ends in pick.handed:
            if served_at is not None and served_at in ends:
                served = candidate
                break
            if served_at is None and watch.status and watch.status < 500:
                served = candidate  # an answer came, from the first endpoint as far as known
                break
            # the data plane tried it and went on, or every endpoint failed
            attempt = attempt_row(candidate, plan, len(attempts))
            attempt.error_class = CONNECT if served_at is None else SERVER_ERROR
            attempt.message = "failed before the data plane's next endpoint answered"
            attempts.append(attempt)
            record_failure(pipeline.state, attempt, fleet.circuit)
            if served_at is None and watch.status:
                break  # the data plane's own answer: charged to the first only
        pipeline.state.end(pick.began)
        if served is None:
            self._record_failed(pick, watch, attempts)
            return
        dep = served.deployment
        # the request log says where the data plane sent it
        plan.notes["endpoint"] = served_at or next(iter(_endpoints_of(pick, served)), None)
        attempt = attempt_row(served, plan, len(attempts))
        attempts.append(attempt)
        watch.fill(attempt, pick.picked_at, fleet.redactor)
        overhead = 0.0
        outcome = Outcome(attempts, served, watch.status, "")
        if not watch.ended and attempt.error_class in (STREAM_BROKEN, RESET):
            # cut before its end: an upstream that broke, or a client that left (a user's
            # stop), which the data plane does not tell apart. Recorded as what the client
            # got, charged to no endpoint (the proxy charges only the upstream's break)
            code = "stream_interrupted" if watch.framing is not None else "upstream_error"
            pipeline.record(pick.ex, profile, plan, watch.status, code, attempts, outcome, 0.0)
            return
        if attempt.ok:
            tokens = attempt.completion_tokens or (watch.events or None)
            pipeline.state.record_success(dep.id, attempt.ttft, attempt.latency, tokens)
            pipeline.check_stream_end(profile, plan, outcome)
            record_served(pipeline.affinity, plan, profile, dep.id)
            pipeline.record(pick.ex, profile, plan, watch.status, None, attempts, outcome, overhead)
            return
        record_failure(pipeline.state, attempt, fleet.circuit)
        if attempt.error_class == CLIENT_ERROR:
            exceeded = parse_context_error(attempt.upstream_body)
            if exceeded is not None:
                attempt.error_class = CONTEXT_EXCEEDED
                if exceeded.limit is not None:
                    pipeline.context_limit_stated(dep.id, exceeded.limit)
        self._record_failed(pick, watch, attempts)

    def give_up(self, pick: Pick) -> None:
        """A held pick whose answer never came (the client left before it): its in-flight
        count ends and its budget hold is given back, as the proxy does for a client that
        leaves before any record."""
        self.pipeline.state.end(pick.began)
        self.pipeline.settle_unfinished(pick.ex)

    def _record_failed(self, pick: Pick, watch: ResponseWatch, attempts: list) -> None:
        pipeline = self.pipeline
        fleet = pipeline.holder.fleet
        last = attempts[-1] if attempts else None
        if last is not None and last.error_class in (CLIENT_ERROR, CONTEXT_EXCEEDED):
            error = client_error(last)
        else:
            try:
                error = exhausted_error(pick.plan, attempts, pipeline.state, fleet.circuit)
            except GatewayError as exc:
                error = exc
        status = watch.status or error.status
        pipeline.record(pick.ex, pick.profile, pick.plan, status, error.code, attempts, None, 0.0)

    def sweep(self, now: float | None = None) -> int:
        """Give up on picks whose answer never came by their deadline (`now`, monotonic):
        Envoy never showed the response, as when the observe filter's call failed (it
        fails open). Each is ended as `_unobserved` says. Returns how many."""
        now = time.monotonic() if now is None else now
        gone = 0
        for key, pick in list(self._pending.items()):
            if pick.deadline < now:
                del self._pending[key]
                self._unobserved(pick)
                gone += 1
        return gone

    def _unobserved(self, pick: Pick) -> None:
        """A pick handed to the data plane whose answer was never seen: its in-flight count
        ends and the request log gets its row, `answer_unobserved` with no status. The row
        settles the budget hold as every row does, by the usage it shows: none, so nothing
        is charged (a hold left standing would have held the key's budget for good). No
        endpoint is charged or credited: nothing is known of how it answered."""
        self.pipeline.state.end(pick.began)
        pick.plan.notes["handed"] = pick.endpoints  # where it was sent, not who served
        self.pipeline.record(pick.ex, pick.profile, pick.plan, 0, UNOBSERVED, [], None, 0.0)


# claim tokens: unique within this process (the count) and across pickers (the prefix), as
# the observe call may reach another picker behind the same data plane
_TOKEN_PREFIX = secrets.token_hex(6)
_TOKENS = itertools.count()


def _token() -> str:
    return f"{_TOKEN_PREFIX}-{next(_TOKENS)}"
