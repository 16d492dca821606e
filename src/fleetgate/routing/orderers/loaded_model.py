"""Loaded-model bonus: among equally fitting Ollama workers, one with the model loaded first.

A worker that already holds the model (from `/api/ps`) answers without a cold load. A
native request whose `options.num_ctx` is larger than the loaded context makes the worker
reload the model anyway, so that worker loses the bonus for that request. It runs after
the priority orderer (a stable sort within each priority); request preferences (`order`,
`sort`) and best fit (window size) sort after it, so it decides among their ties.
"""

from __future__ import annotations

from collections.abc import Callable

from fleetgate.routing.plan import Candidate, PlanContext
from fleetgate.routing.windows import requested_num_ctx

Bonus = Callable[[Candidate], bool]


def loaded_bonus(ctx: PlanContext) -> Bonus | None:
    """Whether a candidate has the model loaded with enough context; None: no discovery."""
    windows = ctx.windows
    if windows is None:
        return None
    num_ctx = requested_num_ctx(ctx.profile)

    def bonus(c: Candidate) -> bool:
        ev = windows.evidence(c.deployment.id)
        if ev is None or not ev.loaded:
            return False
        return num_ctx is None or ev.loaded_context is None or num_ctx <= ev.loaded_context

    return bonus


class LoadedModelOrderer:
    name = "loaded_model"

    def order(self, ctx: PlanContext, candidates: list[Candidate]) -> list[Candidate]:
        bonus = loaded_bonus(ctx)
        if bonus is None or len(candidates) < 2:
            return candidates
        warm = [c.deployment.id for c in candidates if bonus(c)]
        if not warm:
            return candidates
        ctx.notes["loaded"] = warm
        # stable: keeps the priority orderer's load order among equally warm workers
        return sorted(candidates, key=lambda c: (c.deployment.priority, not bonus(c)))
