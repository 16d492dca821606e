"""The pipeline's stages as the picker calls them, over the proxy's gateway object.

Temporary: the front-independent pipeline (`fleetgate.pipeline`) takes these out of the
gateway; once it is in, the picker calls it directly and this module goes.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from fleetgate.context.refine import ContextRefiner
from fleetgate.errors import GatewayError
from fleetgate.execute.executor import Outcome
from fleetgate.execute.outcome import Attempt
from fleetgate.ingress.profile import RequestProfile
from fleetgate.routing.plan import RoutePlan
from fleetgate.routing.planner import build_plan, require_route
from fleetgate.server.app import Exchange, Gateway
from fleetgate.server.error_shapes import error_body, error_status, upstream_error_body

Headers = list[tuple[bytes, bytes]]


def exchange(path: str, headers: Iterable[tuple[bytes, bytes]]) -> Exchange:
    return Exchange({"path": path, "headers": list(headers)})


def refusal(protocol: str, exc: GatewayError, redactor: Any) -> tuple[int, bytes, Headers]:
    exc.message = redactor.text(exc.message)
    if exc.upstream_body:
        exc.upstream_body = redactor.bytes(exc.upstream_body)
    body = error_body(protocol, exc)
    if exc.code == "upstream_rejected" and exc.upstream_body:
        body = upstream_error_body(protocol, exc.upstream_body) or body
    headers = [(k.lower().encode(), v.encode()) for k, v in exc.headers.items()]
    return error_status(protocol, exc), body, headers


class GatewayStages:
    """The stages, as `fleetgate.pipeline.Pipeline` names them."""

    def __init__(self, gateway: Gateway) -> None:
        self.gateway = gateway
        self.holder = gateway.holder
        self.state = gateway.state
        self.affinity = gateway.affinity
        self.executor = gateway.executor
        self.refiner: ContextRefiner = gateway.refiner
        self.recorder = gateway.recorder

    @property
    def ready(self) -> bool:
        return self.gateway.ready

    async def plan(
        self, ex: Exchange, profile: RequestProfile, headers: Iterable[tuple[bytes, bytes]]
    ) -> RoutePlan:
        gw = self.gateway
        fleet = gw.holder.fleet
        plan: RoutePlan | None = None
        try:
            if gw.guard is not None:
                scope = {"headers": list(headers), "path": "", "type": "http"}
                ex.client_key = await gw.guard.admit(scope, profile.model)
            plan = build_plan(
                profile,
                fleet,
                gw.state,
                sticky=gw.sticky,
                windows=gw.windows,
                affinity=gw.affinity,
                loads=gw.loads,
            )
            require_route(plan)
            await gw.refiner.refine(plan, profile, fleet)
            if ex.client_key is not None and gw.guard is not None:
                ex.hold = await gw.guard.hold(ex.client_key, plan, profile, fleet)
        except GatewayError as exc:
            self.record(ex, profile, plan, exc.status, exc.code, [], None, 0.0)
            raise
        return plan

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
        self.gateway._record(ex, profile, plan, status, error_code, attempts, outcome, overhead)

    def check_stream_end(self, profile: RequestProfile, plan: RoutePlan, outcome: Outcome) -> None:
        self.gateway._check_stream_end(profile, plan, outcome)

    def judge_cut(self, profile: RequestProfile, dep: Any, attempt: Attempt, window: Any) -> Any:
        return self.gateway._judge_cut(profile, dep, attempt, window)

    def context_limit_stated(self, deployment_id: str, tokens: int) -> None:
        self.gateway._context_limit_stated(deployment_id, tokens)

    def settle_unfinished(self, ex: Exchange) -> None:
        guard = self.gateway.guard
        if ex.hold is not None and not ex.hold.settled and guard is not None:
            assert ex.client_key is not None
            guard.settle(ex.client_key, 0, 0.0, ex.hold)
