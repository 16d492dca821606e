"""Best-fit capacity: the smallest window that holds the request first; overflow last.

Runs after the strategy orderers and sorts stably, so their order decides among
deployments of equal fit. Inert when the candidates share one window.
"""

from __future__ import annotations

from fleetgate.context.placement import order_by_fit
from fleetgate.routing.plan import Candidate, PlanContext


class BestFitOrderer:
    name = "best_fit"

    def order(self, ctx: PlanContext, candidates: list[Candidate]) -> list[Candidate]:
        estimate = ctx.profile.context
        if estimate is None:
            return candidates
        return order_by_fit(candidates, estimate, ctx.window_of)
