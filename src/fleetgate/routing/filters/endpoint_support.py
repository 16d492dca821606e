"""Drops deployments whose provider kind does not serve the request's endpoint."""

from __future__ import annotations

from fleetgate.execute.executor import UPSTREAM_PATHS
from fleetgate.routing.plan import Candidate, Dropped, PlanContext


class EndpointSupportFilter:
    name = "endpoint"

    def apply(
        self, ctx: PlanContext, candidates: list[Candidate]
    ) -> tuple[list[Candidate], list[Dropped]]:
        route = UPSTREAM_PATHS[ctx.profile.endpoint]
        kept: list[Candidate] = []
        dropped: list[Dropped] = []
        for c in candidates:
            kind = c.deployment.provider.kind
            if kind in route.kinds:
                kept.append(c)
            else:
                reason = f"a {kind} provider does not serve {route.path}"
                dropped.append(Dropped(c.deployment.id, self.name, reason))
        return kept, dropped
