"""Builds the route plan: resolve → filter → order (each a plain function of its inputs)."""

from __future__ import annotations

import time

from fleetgate.discovery.store import WindowStore
from fleetgate.errors import GatewayError
from fleetgate.fleet import Fleet
from fleetgate.ingress.profile import RequestProfile
from fleetgate.routing.plan import PlanContext, RoutePlan
from fleetgate.routing.register import FILTERS, ORDERERS
from fleetgate.routing.resolve import resolve
from fleetgate.routing.sticky import StickyTiers
from fleetgate.routing.windows import window_function
from fleetgate.state.runtime import RuntimeState


def build_plan(
    profile: RequestProfile,
    fleet: Fleet,
    state: RuntimeState,
    now: float | None = None,
    sticky: StickyTiers | None = None,
    windows: WindowStore | None = None,
) -> RoutePlan:
    """The plan a request follows; never raises for an empty plan (see `require_route`)."""
    ctx = PlanContext(profile, fleet, state, time.time() if now is None else now, sticky)
    if windows is not None:
        ctx.windows = windows
        ctx.window_of = window_function(profile, windows)
    resolution = resolve(ctx)
    ctx.headers.update(resolution.headers)
    ctx.notes.update(resolution.notes)
    plan = RoutePlan(
        profile.model,
        resolution.reason,
        resolution.candidates,
        dropped=list(resolution.dropped),
        emptied_by=resolution.emptied_by,
        headers=ctx.headers,
        notes=ctx.notes,
        on_empty=resolution.on_empty,
        window_of=ctx.window_of,
    )
    for f in FILTERS:
        if not plan.candidates:
            break
        kept, dropped = f.apply(ctx, plan.candidates)
        plan.dropped.extend(dropped)
        if not kept:
            plan.emptied_by = f.name
        plan.candidates = kept
    if not resolution.ordered:
        for orderer in ORDERERS:
            plan.candidates = orderer.order(ctx, plan.candidates)
    return plan


def require_route(plan: RoutePlan) -> None:
    """Raise `no_route` naming the filter that emptied the plan and its reasons."""
    if plan.candidates:
        return
    if plan.on_empty is not None:
        raise plan.on_empty(plan)
    reasons = "; ".join(f"{d.deployment_id}: {d.reason}" for d in plan.dropped) or "none"
    if plan.emptied_by == "num_ctx":
        raise GatewayError(
            "invalid_request",
            f"No worker of {plan.requested_model!r} can load the model with the requested "
            f"`options.num_ctx` ({reasons}).",
            param="options.num_ctx",
        )
    if plan.emptied_by == "endpoint":
        raise GatewayError(
            "unsupported_endpoint",
            f"No deployment of {plan.requested_model!r} serves this endpoint ({reasons}).",
            param="model",
        )
    raise GatewayError(
        "no_route",
        f"No deployment of {plan.requested_model!r} can serve this request: the "
        f"{plan.emptied_by or 'resolve'} filter removed the last candidate ({reasons}).",
    )
