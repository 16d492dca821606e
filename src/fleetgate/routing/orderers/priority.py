"""Orders by configured priority, then by in-flight load relative to weight, then config order."""

from __future__ import annotations

from fleetgate.routing.plan import Candidate, PlanContext


class PriorityOrderer:
    name = "priority"

    def order(self, ctx: PlanContext, candidates: list[Candidate]) -> list[Candidate]:
        if len(candidates) < 2:
            return candidates
        health = ctx.state.health

        def key(c: Candidate) -> tuple[int, float, int]:
            dep = c.deployment
            return (dep.priority, health(dep.id).inflight / dep.weight, dep.index)

        return sorted(candidates, key=key)
