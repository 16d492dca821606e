"""Prompt-cache affinity with bounded load, among the deployments tried first.

Rule: among the leading run of candidates of equal rank (engine-busy ones left out), the
deployment that last served the longest known prefix of this prompt goes first (`hit`),
unless it would then carry more than its share of (1 + epsilon) x the in-flight requests
of the run (counting this one; `routing.balancing.affinity.epsilon`), or unless its
expected wait (routing/expected_wait.py) outweighs what the cached prefix saves: the wait
beyond a peer's is longer than the time the peer would take to read the matched part of
the prompt again (that share of the shortest time to first token among them; weighed only
once times per request and to first token are measured). Otherwise, or when
no prefix is known (`miss`), the run is ranked by consistent hashing of the prompt's key
(weighted rendezvous: the same key picks the same deployment on every replica and moves
only the keys of a deployment that leaves), and the first one within its share goes first
(`overflow` when a known owner was passed over). Only that deployment moves; the others
keep their order (least in flight first) as the fallback chain. The result is the
`X-Fleetgate-Affinity` header and the plan's `affinity` note; the gateway records which
deployment served the prompt once an answer starts (pipeline/core.py).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from hashlib import blake2b
from typing import Any

from fleetgate.ingress.prefix import prefix_keys
from fleetgate.ingress.profile import RequestProfile
from fleetgate.routing.expected_wait import WAITS, Wait
from fleetgate.routing.orderers.engine_load import BUSY
from fleetgate.routing.plan import Candidate, PlanContext, RoutePlan
from fleetgate.routing.ties import tied_runs
from fleetgate.state.affinity import MemoryAffinity

AFFINITY_HEADER = "X-Fleetgate-Affinity"


def rendezvous(key: int, candidates: list[Candidate]) -> list[Candidate]:
    """Candidates by weighted rendezvous score for `key`, best first."""
    seed = key.to_bytes(8, "big")

    def score(c: Candidate) -> float:
        digest = blake2b(seed + c.deployment.id.encode(), digest_size=8).digest()
        u = (int.from_bytes(digest, "big") + 0.5) / 2**64  # uniform in (0, 1)
        return c.deployment.weight / -math.log(u)

    return sorted(candidates, key=score, reverse=True)


class AffinityOrderer:
    name = "affinity"

    def order(self, ctx: PlanContext, candidates: list[Candidate]) -> list[Candidate]:
        table = ctx.affinity
        config = ctx.fleet.config.routing.balancing.affinity
        if table is None or not config.enabled or len(candidates) < 2:
            return candidates
        runs = tied_runs(ctx, candidates)
        if not runs or runs[0][0] != 0:
            return candidates  # the first candidate has no equal: nothing to choose
        busy = ctx.cache.get(BUSY, ())
        group = [c for c in candidates[: runs[0][1]] if c.deployment.id not in busy]
        if len(group) < 2:
            return candidates
        keys = prefix_keys(ctx.profile)
        if not keys:
            return candidates
        # the deepest known prefix served by one of this plan's candidates (an owner outside
        # the plan served another model, or has left the fleet)
        planned = {c.deployment.id for c in candidates}
        owner, depth = None, 0
        for i in range(len(keys) - 1, -1, -1):
            found = table.owner(keys[i], ctx.now)
            if found is not None and found in planned:
                owner, depth = found, i + 1
                break
        health = ctx.state.health
        inflight = {c.deployment.id: max(0, health(c.deployment.id).inflight) for c in group}
        total = sum(inflight.values()) + 1  # with this request
        weights = sum(c.deployment.weight for c in group)
        limit = {
            c.deployment.id: math.ceil((1 + config.epsilon) * total * c.deployment.weight / weights)
            for c in group
        }

        def within(c: Candidate) -> bool:
            return inflight[c.deployment.id] + 1 <= limit[c.deployment.id]

        chosen = next((c for c in group if c.deployment.id == owner and within(c)), None)
        waits: dict[str, Wait] = ctx.cache.get(WAITS, {})
        yielded = None
        if chosen is not None and owner is not None:
            yielded = _outweighed(ctx, group, owner, waits, depth / len(keys), within)
        if chosen is not None and yielded is None:
            result, decided_by = "hit", "prefix"
        else:
            result = "miss" if owner is None else "overflow"
            pool = group
            if yielded is not None:  # only peers that wait less than the owner, saving counted
                pool = [c for c in group if c.deployment.id in yielded["shorter"]]
                decided_by = "expected_wait"
            elif owner is None:
                decided_by = "rendezvous"
            elif owner in busy:
                decided_by = "engine_load"
            else:
                decided_by = "bounded_load"
            ranked = rendezvous(keys[-1], pool)
            chosen = next((c for c in ranked if within(c)), ranked[0])
        note: dict[str, Any] = {
            "result": result,
            "deployment": chosen.deployment.id,
            "decided_by": decided_by,
            "inflight": inflight,
            "limit": limit,
        }
        if owner is not None:
            note["owner"], note["matched_blocks"] = owner, depth
        if yielded is not None:
            note["yielded"] = {k: v for k, v in yielded.items() if k != "shorter"}
        ctx.notes["affinity"] = note
        ctx.headers[AFFINITY_HEADER] = result
        return [chosen, *(c for c in candidates if c is not chosen)]


def _outweighed(
    ctx: PlanContext,
    group: list[Candidate],
    owner: str,
    waits: dict[str, Wait],
    matched: float,
    within: Callable[[Candidate], bool],
) -> dict[str, Any] | None:
    """When the owner's expected wait beyond a peer's is longer than the peer would take to
    read the matched part of the prompt again: the figures, and the peers that wait less."""
    mine = waits.get(owner)
    health = ctx.state.health
    ttfts = [t for c in group if (t := health(c.deployment.id).ttft_ema) is not None]
    if mine is None or mine.per_request is None or not ttfts:
        return None  # nothing measured to weigh: the engine-load bound alone decides
    # the time to first token where it is shortest is mostly reading the prompt
    saves = matched * min(ttfts)
    shorter = [
        c.deployment.id
        for c in group
        if c.deployment.id != owner
        and within(c)
        and (w := waits.get(c.deployment.id)) is not None
        and mine.seconds - w.seconds > saves
    ]
    if not shorter:
        return None
    return {
        "owner_wait": round(mine.seconds, 4),
        "shortest_wait": round(min(waits[d].seconds for d in shorter), 4),
        "prefix_saves": round(saves, 4),
        "shorter": shorter,
    }


def record_served(
    table: MemoryAffinity, plan: RoutePlan, profile: RequestProfile, deployment_id: str
) -> None:
    """After an answer started: `deployment_id` now holds this prompt in its cache."""
    if AFFINITY_HEADER in plan.headers and profile.prefix:
        table.record(profile.prefix[-1], deployment_id, time.time())
