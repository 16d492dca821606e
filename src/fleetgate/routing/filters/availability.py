"""Drops deployments that are cooling down, have an open circuit, or lack credentials."""

from __future__ import annotations

import math

from fleetgate.errors import GatewayError
from fleetgate.routing.plan import Candidate, Dropped, PlanContext, RoutePlan


class AvailabilityFilter:
    name = "availability"

    def apply(
        self, ctx: PlanContext, candidates: list[Candidate]
    ) -> tuple[list[Candidate], list[Dropped]]:
        kept: list[Candidate] = []
        dropped: list[Dropped] = []
        for c in candidates:
            dep = c.deployment
            if not dep.provider.has_credentials:
                reason = f"no credentials ({dep.provider.api_key_env} is not set)"
            else:
                reason = ctx.state.unavailable_reason(dep.id, ctx.now)
            if reason is None:
                kept.append(c)
                continue
            health = ctx.state.health(dep.id)
            retry_at = health.open_until if health.open_reason == "rate limited" else None
            dropped.append(Dropped(dep.id, self.name, reason, retry_at))
        return kept, dropped

    def empty_error(self, plan: RoutePlan, now: float) -> GatewayError | None:
        """Every eligible deployment cooling down after a 429: say when to come back."""
        mine = [d for d in plan.dropped if d.filter == self.name]
        if not mine or any(d.retry_at is None for d in mine):
            return None  # not (only) rate limits: the generic no_route
        soonest = min(d.retry_at for d in mine if d.retry_at is not None)
        wait = max(1, math.ceil(soonest - now))
        return GatewayError(
            "all_routes_rate_limited",
            f"Every eligible deployment of {plan.requested_model!r} is cooling down after a "
            f"rate limit; retry in {wait}s. ("
            + "; ".join(f"{d.deployment_id}: {d.reason}" for d in mine) + ")",
            headers={**plan.headers, "Retry-After": str(wait)},
        )
