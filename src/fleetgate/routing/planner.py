"""Builds the route plan: resolve → filter → order (each a plain function of its inputs)."""

from __future__ import annotations

import time
from functools import partial

from fleetgate.discovery.engine_load import EngineLoads
from fleetgate.discovery.store import WindowStore
from fleetgate.errors import GatewayError, retry_after_header
from fleetgate.fleet import Fleet
from fleetgate.ingress.profile import RequestProfile
from fleetgate.routing.filters.capability import explain_narrowing
from fleetgate.routing.plan import Dropped, PlanContext, RoutePlan
from fleetgate.routing.ranked_by import ranked_by
from fleetgate.routing.register import FILTERS, ORDERERS
from fleetgate.routing.resolve import resolve
from fleetgate.routing.sticky import StickyTiers
from fleetgate.routing.windows import window_function
from fleetgate.state.affinity import MemoryAffinity
from fleetgate.state.runtime import RuntimeState


def build_plan(
    profile: RequestProfile,
    fleet: Fleet,
    state: RuntimeState,
    now: float | None = None,
    sticky: StickyTiers | None = None,
    windows: WindowStore | None = None,
    affinity: MemoryAffinity | None = None,
    loads: EngineLoads | None = None,
) -> RoutePlan:
    """The plan a request follows; never raises for an empty plan (see `require_route`)."""
    ctx = PlanContext(profile, fleet, state, time.time() if now is None else now, sticky)
    ctx.affinity, ctx.loads = affinity, loads
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
        cache=ctx.cache,
        ranked_by=partial(ranked_by, ctx, resolution.ordered),
    )
    for f in FILTERS:
        if not plan.candidates:
            break
        kept, dropped = f.apply(ctx, plan.candidates)
        plan.dropped.extend(dropped)
        if not kept:
            plan.emptied_by = f.name
        plan.candidates = kept
    # one candidate has no order to find: every orderer returns it as it is (most plans,
    # where a model has one deployment). An empty plan still goes through them: the
    # preference orderer notes the preferences in force, which a plan the endpoint filter
    # emptied has not computed yet, and explain shows them.
    if not resolution.ordered and len(plan.candidates) != 1:
        for orderer in ORDERERS:
            plan.candidates = orderer.order(ctx, plan.candidates)
    if ctx.max_attempts is not None and len(plan.candidates) > ctx.max_attempts:
        # e.g. provider.allow_fallbacks: false — the rest are never tried
        for c in plan.candidates[ctx.max_attempts :]:
            plan.dropped.append(Dropped(c.deployment.id, "allow_fallbacks", "fallbacks disabled"))
        plan.candidates = plan.candidates[: ctx.max_attempts]
    return plan


def require_route(plan: RoutePlan, now: float | None = None) -> None:
    """Raise the emptying filter's own error (`empty_error`), else `no_route` with reasons."""
    if plan.candidates:
        return
    emptier = next((f for f in FILTERS if f.name == plan.emptied_by), None)
    empty_error = getattr(emptier, "empty_error", None)
    if empty_error is not None:
        error = empty_error(plan, time.time() if now is None else now)
        if error is not None:
            raise error
    now = time.time() if now is None else now
    if plan.on_empty is not None:
        raise _comes_back(plan.on_empty(plan), plan, now)
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
    later = {d.deployment_id: d.reason for d in plan.dropped if d.filter != "capability"}
    outcome = "unavailable" if plan.emptied_by == "availability" else "ruled out"
    # the capability filter left few: say so, rather than blame the last filter
    lead = explain_narrowing(plan, outcome, later) or (
        f"No deployment of {plan.requested_model!r} can serve this request: the "
        f"{plan.emptied_by or 'resolve'} filter removed the last candidate"
    )
    # (raised without a name: an exception held by a local of the frame its traceback holds
    # is a cycle, left with the whole request to the cyclic collector)
    raise _comes_back(
        GatewayError("no_route", f"{lead} ({reasons}).", headers=dict(plan.headers)), plan, now
    )


def _comes_back(error: GatewayError, plan: RoutePlan, now: float) -> GatewayError:
    """Add `Retry-After` when a dropped candidate's cooldown or open circuit ends."""
    ends = [d.retry_at for d in plan.dropped if d.retry_at is not None and d.retry_at > now]
    if ends:
        error.headers.update(retry_after_header(min(ends) - now))
    return error
