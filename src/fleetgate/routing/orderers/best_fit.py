"""Best-fit capacity: the smallest window that holds the request first; overflow last.

Runs after the strategy orderers and sorts stably, so their order decides among
deployments of equal fit. Inert when the candidates share one window. A native Ollama
request's `options.num_ctx` is the window it asks for: one that holds the estimate but not
`num_ctx` ranks as too small (see `context/placement.py`).
"""

from __future__ import annotations

from fleetgate.context.placement import order_by_fit
from fleetgate.routing.plan import Candidate, PlanContext
from fleetgate.routing.windows import requested_num_ctx


class BestFitOrderer:
    name = "best_fit"

    def order(self, ctx: PlanContext, candidates: list[Candidate]) -> list[Candidate]:
        estimate = ctx.profile.context
        if estimate is None:
            return candidates
        return order_by_fit(candidates, estimate, ctx.window_of, requested_num_ctx(ctx.profile))
