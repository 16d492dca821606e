"""Drops deployments that are disabled, cooling down, have an open circuit, or lack
credentials."""

from __future__ import annotations

import math

from fleetgate.errors import GatewayError
from fleetgate.routing.filters.capability import explain_narrowing
from fleetgate.routing.plan import Candidate, Dropped, PlanContext, RoutePlan
from fleetgate.state.runtime import RATE_LIMITED


def credentials_problem(candidate: Candidate) -> str | None:
    """Why the candidate's credential (its key label's, or the provider's) is missing."""
    label = candidate.key_label
    credential = candidate.deployment.provider.credential(label)
    if credential is None:
        return f"no credentials (key label {label!r} is not configured)"
    key, env = credential
    if env is None or key is not None:
        return None
    if label is None:
        return f"no credentials ({env} is not set)"
    return f"no credentials ({env} for key label {label!r} is not set)"


DISABLED = "disabled"


def unavailable_reason(ctx: PlanContext, candidate: Candidate) -> str | None:
    if not candidate.deployment.enabled:  # the operator's word: even for a last resort
        return DISABLED
    reason = credentials_problem(candidate)
    if reason is None and not candidate.last_resort:
        reason = ctx.state.unavailable_reason(candidate.deployment.id, ctx.now)
    return reason


class AvailabilityFilter:
    name = "availability"

    def apply(
        self, ctx: PlanContext, candidates: list[Candidate]
    ) -> tuple[list[Candidate], list[Dropped]]:
        kept: list[Candidate] = []
        dropped: list[Dropped] = []
        for c in candidates:
            reason = unavailable_reason(ctx, c)
            if reason is None:
                kept.append(c)
            else:
                health = ctx.state.health(c.deployment.id)
                out = (
                    reason != DISABLED
                    and health.open_until > ctx.now
                    and not credentials_problem(c)
                )
                dropped.append(
                    Dropped(
                        c.deployment.id,
                        self.name,
                        reason,
                        retry_at=health.open_until if out else None,
                        rate_limited=out and health.open_reason == RATE_LIMITED,
                    )
                )
        return kept, dropped

    def empty_error(self, plan: RoutePlan, now: float) -> GatewayError | None:
        """Every eligible deployment cooling down after a 429: say when to come back.
        Anything else (an open circuit, a 503's Retry-After) is the generic `no_route`."""
        mine = [d for d in plan.dropped if d.filter == self.name]
        if not mine or not all(d.rate_limited for d in mine):
            return None
        soonest = min(d.retry_at for d in mine if d.retry_at is not None)
        wait = max(1, math.ceil(soonest - now))
        lead = explain_narrowing(plan, "rate limited", [d.deployment_id for d in mine]) or (
            f"Every eligible deployment of {plan.requested_model!r} is cooling down after a "
            "rate limit"
        )
        return GatewayError(
            "all_routes_rate_limited",
            f"{lead}; retry in {wait}s. ("
            + "; ".join(f"{d.deployment_id}: {d.reason}" for d in mine)
            + ")",
            headers={**plan.headers, "Retry-After": str(wait)},
        )
