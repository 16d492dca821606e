"""Best-fit capacity: deployments that hold the request first, then priority, then the
smallest window that holds it; overflow last (biggest first).

Runs after the strategy orderers and sorts stably, so their order decides among
deployments of equal fit. A request's own `order` / `sort` rank below the window instead of
priority (docs/routing.md). Inert when the candidates share one window. A native Ollama
request's `options.num_ctx` is the window it asks for: one that holds the estimate but not
`num_ctx` ranks as too small (see `context/placement.py`).
"""

from __future__ import annotations

from fleetgate.context.placement import FIT_BY_PRIORITY, order_by_fit
from fleetgate.routing.plan import Candidate, PlanContext
from fleetgate.routing.ties import PREFERENCE_RANK
from fleetgate.routing.windows import requested_num_ctx


class BestFitOrderer:
    name = "best_fit"

    def order(self, ctx: PlanContext, candidates: list[Candidate]) -> list[Candidate]:
        estimate = ctx.profile.context
        if estimate is None:
            return candidates
        # the request's `order` / `sort` rank in priority's stead (after the window)
        by_priority = PREFERENCE_RANK not in ctx.cache
        ctx.cache[FIT_BY_PRIORITY] = by_priority
        wanted = requested_num_ctx(ctx.profile)
        return order_by_fit(candidates, estimate, ctx.window_of, wanted, by_priority)
