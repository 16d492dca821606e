"""Drops deployments that are cooling down, have an open circuit, or lack credentials."""

from __future__ import annotations

from fleetgate.routing.plan import Candidate, Dropped, PlanContext


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
            else:
                dropped.append(Dropped(dep.id, self.name, reason))
        return kept, dropped
