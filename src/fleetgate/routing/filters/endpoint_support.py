"""Drops deployments that cannot serve the request's endpoint, natively or translated."""

from __future__ import annotations

from fleetgate.routing.plan import Candidate, Dropped, PlanContext
from fleetgate.translate.registry import unserved_reason


class EndpointSupportFilter:
    name = "endpoint"

    def apply(
        self, ctx: PlanContext, candidates: list[Candidate]
    ) -> tuple[list[Candidate], list[Dropped]]:
        endpoint = ctx.profile.endpoint
        body = ctx.profile.body
        kept: list[Candidate] = []
        dropped: list[Dropped] = []
        for c in candidates:
            reason = unserved_reason(endpoint, body, c.deployment.provider)
            if reason is None:
                kept.append(c)
            else:
                dropped.append(Dropped(c.deployment.id, self.name, reason))
        return kept, dropped
