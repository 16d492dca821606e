"""Which key of the order put each candidate ahead of the next one, for explain.

The keys, in precedence (docs/routing.md): whether the deployment's window holds the
request (`fit`), `priority`, the capacity rank (`window`), the request's `order` / `sort`,
the loaded-model bonus (`loaded_model`); then the tie-breakers `engine_load` and
`affinity`; then requests in flight relative to weight (`in_flight`) and `config_order`.
A request's `order` / `sort` rank in priority's stead: with them, priority comes after the
window and the preferences. Computed only when a plan is described, never on the hot path.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from itertools import pairwise
from typing import Any

from fleetgate.context.placement import FIT_BY_PRIORITY, fit_group
from fleetgate.routing.orderers.loaded_model import loaded_bonus
from fleetgate.routing.plan import Candidate, PlanContext
from fleetgate.routing.ties import PREFERENCE_RANK

Key = tuple[str, Callable[[Candidate], Hashable]]


def ranked_by(ctx: PlanContext, declared: bool, candidates: list[Candidate]) -> list[str | None]:
    """Per position, the key that ranked that candidate before the next (None: the last)."""
    if declared:  # a virtual model's or a tier's chain: never re-sorted
        return ["declared_order"] * (len(candidates) - 1) + [None] if candidates else []
    keys = _keys(ctx, candidates)
    out: list[str | None] = []
    for a, b in pairwise(candidates):
        out.append(_deciding(ctx, keys, a, b))
    return [*out, None] if candidates else []


def _keys(ctx: PlanContext, candidates: list[Candidate]) -> list[Key]:
    window = ctx.window_of or (lambda dep: dep.context_window)
    preference: dict[str, Any] = ctx.cache.get(PREFERENCE_RANK, {})
    by_priority = ctx.cache.get(FIT_BY_PRIORITY, not preference)
    keys: list[Key] = []
    estimate = ctx.profile.context
    if estimate is not None and len({window(c.deployment) for c in candidates}) > 1:

        def group(c: Candidate) -> Hashable:
            return fit_group(window(c.deployment), estimate.high(c.deployment))

        def rank(c: Candidate) -> Hashable:
            w = window(c.deployment)
            return 0 if w is None else (w if group(c) == 0 else -w)

        keys.append(("fit", group))
        if by_priority:
            keys.append(("priority", lambda c: c.deployment.priority))
        keys.append(("window", rank))
    if preference:
        keys.append(("preference", lambda c: preference.get(c.deployment.id)))
    keys.append(("priority", lambda c: c.deployment.priority))
    bonus = loaded_bonus(ctx)
    if bonus is not None:
        keys.append(("loaded_model", lambda c: not bonus(c)))
    return keys


def _deciding(ctx: PlanContext, keys: list[Key], a: Candidate, b: Candidate) -> str:
    for name, key in keys:
        if key(a) != key(b):
            if name == "preference":  # `order` entries rank (0, position), `sort` (1, value)
                ranks = ctx.cache[PREFERENCE_RANK]
                return "order" if ranks.get(a.deployment.id, (1,))[0] == 0 else "sort"
            return name
    moved = ctx.notes.get("engine_load", {}).get(b.deployment.id, {})
    if "moved_back" in moved:
        return "engine_load"
    affinity = ctx.notes.get("affinity")
    if affinity is not None and affinity.get("deployment") == a.deployment.id:
        return "affinity"
    health = ctx.state.health
    a_load = health(a.deployment.id).inflight / a.deployment.weight
    b_load = health(b.deployment.id).inflight / b.deployment.weight
    return "in_flight" if a_load != b_load else "config_order"
