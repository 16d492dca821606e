"""A virtual model's chain: its own routes in declared order, then (optionally) `default`.

Steps, in order: the own routes, each filtered by availability; with `continue_on_default`,
the `default` tier's chain, its head being the first route with usable credentials (kept
even while cooling down: it is the last resort) and the rest filtered by availability;
duplicates (same deployment and key label) removed, keeping the first; then the
`response_mode` transport filter over the whole chain. Nothing is re-sorted, and an empty
chain never falls through to other routing.
"""

from __future__ import annotations

from dataclasses import replace

from fleetgate.errors import GatewayError
from fleetgate.fleet.routes import VirtualModel
from fleetgate.routing.chains import dedup, route_candidates
from fleetgate.routing.filters.availability import credentials_problem, unavailable_reason
from fleetgate.routing.filters.capability import explain_narrowing
from fleetgate.routing.plan import Candidate, Dropped, PlanContext, RoutePlan
from fleetgate.routing.resolution import Resolution

DEFAULT_TIER = "default"
_CHAIN_STEPS = ("resolve", "availability", "transport")


def _available(
    ctx: PlanContext, candidates: list[Candidate], dropped: list[Dropped]
) -> list[Candidate]:
    kept = []
    for c in candidates:
        reason = unavailable_reason(ctx, c)
        if reason is None:
            kept.append(c)
        else:
            dropped.append(Dropped(c.deployment.id, "availability", reason))
    return kept


def _default_part(ctx: PlanContext, vm: VirtualModel, dropped: list[Dropped]) -> list[Candidate]:
    tier = ctx.fleet.tiers.get(DEFAULT_TIER)
    if tier is None:
        return []
    candidates = route_candidates(
        tier.routes, f"tier:{DEFAULT_TIER}", virtual_model=vm.name, tier=DEFAULT_TIER
    )
    for i, c in enumerate(candidates):
        reason = credentials_problem(c)
        if reason is None:
            head = replace(c, last_resort=True)
            return [head, *_available(ctx, candidates[i + 1 :], dropped)]
        dropped.append(Dropped(c.deployment.id, "availability", reason))
    return []


def _transport(
    vm: VirtualModel, stream: bool, candidates: list[Candidate], dropped: list[Dropped]
) -> list[Candidate]:
    if vm.response_mode == "any" or (vm.response_mode == "stream_only") == stream:
        return candidates
    reason = (
        "the virtual model serves streaming requests only"
        if vm.response_mode == "stream_only"
        else "the virtual model serves non-streaming requests only"
    )
    dropped.extend(Dropped(c.deployment.id, "transport", reason) for c in candidates)
    return []


def resolve_virtual(ctx: PlanContext, vm: VirtualModel) -> Resolution:
    dropped: list[Dropped] = []
    own = route_candidates(vm.routes, f"virtual:{vm.name}", virtual_model=vm.name)
    chain = _available(ctx, own, dropped)
    if vm.continue_on_default:
        chain += _default_part(ctx, vm, dropped)
    chain = dedup(chain, dropped)
    emptied_by = None if chain else ("availability" if dropped else "resolve")
    if chain:
        chain = _transport(vm, ctx.profile.stream, chain, dropped)
        if not chain:
            emptied_by = "transport"
    return Resolution(
        "virtual-model",
        chain,
        ordered=True,
        dropped=dropped,
        emptied_by=emptied_by,
        headers={"X-Fleetgate-Reason": "virtual-model", "X-Fleetgate-Virtual-Model": vm.name},
        notes={
            "resolution": {
                "rule": "virtual-model",
                "virtual_model": vm.name,
                "continue_on_default": vm.continue_on_default,
                "response_mode": vm.response_mode,
            }
        },
        on_empty=lambda plan: unavailable_error(vm, plan),
    )


def _reasons(plan: RoutePlan) -> str:
    return "; ".join(f"{d.deployment_id}: {d.reason}" for d in plan.dropped) or "no routes"


def unavailable_error(vm: VirtualModel, plan: RoutePlan) -> GatewayError:
    """The error for an empty chain; it never falls through to other routing. It carries the
    plan's headers (`X-Fleetgate-Reason`, `X-Fleetgate-Virtual-Model`, …), as an exhausted
    chain's error does."""
    if plan.emptied_by == "transport":
        wanted = "true" if vm.response_mode == "stream_only" else "false"
        return GatewayError(
            "invalid_request",
            f"The virtual model {vm.name!r} has response_mode {vm.response_mode}: send "
            f"`stream: {wanted}`.",
            param="stream",
            headers=dict(plan.headers),
        )
    # the capability filter left few routes: say so, as a real model's no-route error does
    later = {d.deployment_id for d in plan.dropped if d.filter != "capability"}
    outcome = "unavailable" if plan.emptied_by == "availability" else "ruled out"
    narrowed = explain_narrowing(plan, outcome, later)
    if plan.emptied_by not in _CHAIN_STEPS:
        lead = narrowed or (
            f"No route of the virtual model {vm.name!r} can serve this request: the "
            f"{plan.emptied_by} filter removed the last candidate"
        )
        message = f"{lead} ({_reasons(plan)})."
    elif not vm.continue_on_default:
        lead = narrowed or f"The virtual model {vm.name!r} has no available route"
        message = (
            f"{lead} ({_reasons(plan)}). "
            "Set continue_on_default: true to fall back to the default tier."
        )
    else:
        message = (
            f"The virtual model {vm.name!r} has no available route, and the default tier "
            f"has no available route either ({_reasons(plan)})."
        )
    return GatewayError("virtual_model_unavailable", message, headers=dict(plan.headers))
