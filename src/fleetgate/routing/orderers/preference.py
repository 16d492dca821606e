"""Orders by the provider preferences: `order` first, then `sort` by price, throughput or latency.

Entries of `order` go first, in the listed order; the rest keep their place, ranked by
`sort` when it is set (stable, so ties keep the previous orderers' ranking). Throughput
(completion tokens/s, higher first) and latency (time to first token, lower first) come
from the runtime EMAs. A deployment not yet measured gets a prior: the median of its
measured peers (no preference at all when none is measured). A measurement fades toward
that prior with a half-life of `MEASUREMENT_HALF_LIFE` seconds since it was taken.

Exploration: a deployment with no measurement, or one older than
`routing.balancing.exploration.stale_after_seconds`, that this replica has not tried within
that time ranks first (the least recently tried first), so one request measures it. Its
share of traffic is bounded by one attempt per period, whatever the traffic pattern.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from fleetgate.routing.plan import Candidate, PlanContext
from fleetgate.routing.preferences import effective_preferences, names_of
from fleetgate.routing.ties import PREFERENCE_RANK

MEASUREMENT_HALF_LIFE = 600.0

Metric = Callable[[Candidate], float | None]


class PreferenceOrderer:
    name = "preference"

    def order(self, ctx: PlanContext, candidates: list[Candidate]) -> list[Candidate]:
        prefs = effective_preferences(ctx)
        if len(candidates) < 2 or not (prefs.order or prefs.sort):
            return candidates
        rank: dict[str, tuple[int, float]] = {}
        head: list[Candidate] = []
        rest = list(candidates)
        for position, entry in enumerate(prefs.order):
            for c in [c for c in rest if entry in names_of(c.deployment)]:
                head.append(c)
                rest.remove(c)
                rank[c.deployment.id] = (0, position)
        key: Callable[[Candidate], float] = lambda c: 0.0  # noqa: E731
        if prefs.sort is not None and len(rest) > 1:
            key = self._key(ctx, rest, prefs.sort.by)
            if prefs.sort.partition == "none":
                rest.sort(key=key)
            else:
                rest = _sort_within_models(rest, key)
        for c in rest:
            rank[c.deployment.id] = (1, key(c))
        ctx.cache[PREFERENCE_RANK] = rank  # what the tie-breakers must not reorder across
        return head + rest

    def _key(
        self, ctx: PlanContext, candidates: list[Candidate], by: str
    ) -> Callable[[Candidate], float]:
        if by == "price":
            return lambda c: c.deployment.price_input + c.deployment.price_output
        now = ctx.now
        health = ctx.state.health
        stale_after = ctx.fleet.config.routing.balancing.exploration.stale_after_seconds

        def measured(c: Candidate) -> tuple[float | None, float]:
            h = health(c.deployment.id)
            value = h.tps_ema if by == "throughput" else h.ttft_ema
            return value, h.measured_at

        samples = {id(c): measured(c) for c in candidates}
        known = [v for v, _ in samples.values() if v is not None]
        prior = _median(known) if known else 0.0
        sign = -1.0 if by == "throughput" else 1.0
        explore: dict[int, float] = {}  # candidate -> when it was last tried
        reasons: dict[str, str] = {}
        for c in candidates:
            value, at = samples[id(c)]
            tried = health(c.deployment.id).tried_at
            if now - tried < stale_after:
                continue
            if value is None:
                reasons[c.deployment.id] = f"no {by} measurement"
            elif at and now - at > stale_after:
                reasons[c.deployment.id] = f"{by} measured {now - at:.0f}s ago"
            else:
                continue
            explore[id(c)] = tried
        if explore and len(explore) < len(candidates):
            ctx.notes["exploration"] = reasons
        else:
            explore = {}  # all unknown alike: nothing to learn by reordering

        def key(c: Candidate) -> float:
            tried = explore.get(id(c))
            if tried is not None:  # explored first, the least recently tried first
                return -math.inf if not tried else tried - now - 1e12
            value, at = samples[id(c)]
            if value is None:
                return sign * prior
            if at:  # fade an old measurement toward the prior
                weight = math.pow(0.5, max(0.0, now - at) / MEASUREMENT_HALF_LIFE)
                value = weight * value + (1 - weight) * prior
            return sign * value

        return key


def _sort_within_models(
    candidates: list[Candidate], key: Callable[[Candidate], float]
) -> list[Candidate]:
    """Rank inside each model's group; groups stay where their first member was."""
    groups: dict[str, list[Candidate]] = {}
    for c in candidates:
        groups.setdefault(c.deployment.model, []).append(c)
    return [c for group in groups.values() for c in sorted(group, key=key)]


def _median(values: list[float]) -> float:
    # not statistics.median: importing `statistics` (decimal, fractions) costs ~10 ms of
    # every start for this one call
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2
