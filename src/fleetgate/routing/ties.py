"""Runs of candidates of equal rank: what the tie-breaking orderers may reorder.

The ranking orderers (best fit, `order` / `sort`, priority, loaded model) decide first;
two adjacent candidates are tied when none of them tells the two apart: same model, same
priority, same loaded-model bonus, same preference rank, and the same window when best fit
weighs windows. Engine load and affinity reorder only inside such runs, so they can never
undo a decision of a ranking orderer, and a model with one deployment, or with deployments
of different priority, has no run to reorder.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable

from fleetgate.routing.orderers.loaded_model import loaded_bonus
from fleetgate.routing.plan import Candidate, PlanContext

PREFERENCE_RANK = "preference_rank"  # ctx.cache: deployment id -> its rank by `order`/`sort`

Run = tuple[int, int]  # [start, end) in the plan's candidates


def tied_runs(ctx: PlanContext, candidates: list[Candidate]) -> list[Run]:
    """Each run of two or more adjacent candidates of equal rank (computed once per plan;
    the tie-breakers only permute candidates inside runs, so runs stay valid)."""
    cached: list[Run] | None = ctx.cache.get("tied_runs")
    if cached is not None:
        return cached
    rank = _rank(ctx, candidates)
    runs: list[Run] = []
    start = 0
    for i in range(1, len(candidates) + 1):
        if i == len(candidates) or rank(candidates[i]) != rank(candidates[start]):
            if i - start >= 2:
                runs.append((start, i))
            start = i
    ctx.cache["tied_runs"] = runs
    return runs


def _rank(ctx: PlanContext, candidates: list[Candidate]) -> Callable[[Candidate], Hashable]:
    bonus = loaded_bonus(ctx)
    preference: dict[str, Hashable] = ctx.cache.get(PREFERENCE_RANK, {})
    window = ctx.window_of or (lambda dep: dep.context_window)
    # best fit sorts by window only when it has a request size and two windows to choose from
    by_window = ctx.profile.context is not None and (
        len({window(c.deployment) for c in candidates}) > 1
    )

    def rank(c: Candidate) -> Hashable:
        dep = c.deployment
        return (
            dep.model,
            dep.priority,
            bonus(c) if bonus is not None else False,
            preference.get(dep.id),
            window(dep) if by_window else None,
        )

    return rank
