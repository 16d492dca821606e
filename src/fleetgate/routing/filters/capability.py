"""Drops deployments lacking a capability the request needs; drops unsupported sampling knobs.

A need in `CONTRACT_NEEDS` (tools, structured outputs, image input, …) — or any need when
`require_parameters` is true — must be supported, else the deployment is dropped with
`lacks <need>`. Any other need (temperature, seed, stop, a forced `tool_choice`, …) missing
from a deployment's declared `supported_parameters` is removed from the body sent to it
instead, and recorded on the attempt; with only its provider kind's default list, knobs
pass through untouched (the defaults are a guess about the engine, too weak to edit a
request on), except those the kind's endpoint for the client's protocol is known to ignore
(`capabilities.IGNORED_BY_PROTOCOL`).

When this filter shrinks a pool of two or more deployments to one or none, the plan says
so: header `X-Fleetgate-Effective-Pool: <eligible>/<pool>` and note `effective_pool`.
Whenever it narrows the pool at all, the errors of a later emptied or exhausted plan say so
too (`explain_narrowing`): the deployments left were few, not the pool.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection
from dataclasses import dataclass

from fleetgate.config.capabilities import (
    CONTRACT_NEEDS,
    describe_needs,
    ignored_needs,
    unsupported_fields,
)
from fleetgate.errors import GatewayError
from fleetgate.routing.plan import Candidate, Dropped, PlanContext, RoutePlan
from fleetgate.routing.preferences import effective_preferences

EFFECTIVE_POOL_HEADER = "X-Fleetgate-Effective-Pool"
_NARROWING = "capability.narrowing"  # key in the plan's cache
_EMPTIED = "capability.emptied"  # (needs, fleet) when the filter dropped every candidate


@dataclass(frozen=True, slots=True)
class PoolNarrowing:
    """The capability filter kept `eligible` of `pool` candidates; the others lacked `lacking`."""

    eligible: tuple[str, ...]  # deployment ids, in plan order, each once
    kept: int
    pool: int
    lacking: tuple[str, ...]


def explain_narrowing(plan: RoutePlan, outcome: str, affected: Collection[str]) -> str | None:
    """`No deployment of 'm' can take this request: only 1 of 4 allowed deployments supports
    <needs> — <ids> — and it is <outcome>`, when the capability filter narrowed the pool and
    every deployment it left is among `affected`; else None (the caller's usual text)."""
    narrowing = plan.cache.get(_NARROWING)
    if not isinstance(narrowing, PoolNarrowing) or not set(narrowing.eligible) <= set(affected):
        return None
    k = narrowing.kept
    subject = "it is" if k == 1 else "both are" if k == 2 else f"all {k} are"
    return (
        f"No deployment of {plan.requested_model!r} can take this request: only {k} of "
        f"{narrowing.pool} allowed deployments {'supports' if k == 1 else 'support'} "
        f"{describe_needs(narrowing.lacking)} — {', '.join(narrowing.eligible)} — and "
        f"{subject} {outcome}"
    )


class CapabilityFilter:
    name = "capability"

    def apply(
        self, ctx: PlanContext, candidates: list[Candidate]
    ) -> tuple[list[Candidate], list[Dropped]]:
        needs = ctx.profile.needs
        if not needs:
            return candidates, []
        required = (
            needs if effective_preferences(ctx).require_parameters else (needs & CONTRACT_NEEDS)
        )
        protocol = ctx.profile.protocol
        kept: list[Candidate] = []
        dropped: list[Dropped] = []
        lacking: set[str] = set()
        for c in candidates:
            caps = c.deployment.capabilities
            missing = required - caps
            if missing:
                lacking |= missing
                dropped.append(
                    Dropped(c.deployment.id, self.name, "lacks " + ", ".join(sorted(missing)))
                )
                continue
            dep = c.deployment
            if dep.parameters_declared:
                soft = needs - required - caps
            else:  # the defaults are a guess: only what the endpoint is known to ignore
                soft = (needs - required) & ignored_needs(dep.provider.kind, protocol)
            if soft:
                fields = unsupported_fields(soft)
                c = dataclasses.replace(c, drop_params=(*c.drop_params, *fields))
            kept.append(c)
        pool = len(candidates)
        if kept and dropped:
            ctx.cache[_NARROWING] = PoolNarrowing(
                eligible=tuple(dict.fromkeys(c.deployment.id for c in kept)),
                kept=len(kept),
                pool=pool,
                lacking=tuple(sorted(lacking)),
            )
        if not kept:
            ctx.cache[_EMPTIED] = (required, ctx.fleet)
        if pool >= 2 and len(kept) <= 1:
            ctx.headers[EFFECTIVE_POOL_HEADER] = f"{len(kept)}/{pool}"
            ctx.notes["effective_pool"] = {
                "eligible": len(kept),
                "pool": pool,
                "needs": sorted(required),
            }
        return kept, dropped

    def empty_error(self, plan: RoutePlan, now: float) -> GatewayError | None:
        if _capable_but_unavailable(plan):
            return None  # the no-route error of the plan says which and why
        lacks = sorted(
            {d.reason.removeprefix("lacks ") for d in plan.dropped if d.filter == self.name}
        )
        return GatewayError(
            "unsupported_parameters",
            f"No eligible deployment of {plan.requested_model!r} supports what this request "
            f"uses (each lacks: {'; '.join(lacks)}). Drop those parameters or pick another "
            "model.",
            headers=plan.headers,
        )


def _capable_but_unavailable(plan: RoutePlan) -> bool:
    """A chain (a virtual model's) sets unavailable routes aside before this filter runs: if
    some of those support what the request needs, the request is not at fault. Then the
    narrowing is those routes, and the plan counts as emptied by availability."""
    emptied = plan.cache.get(_EMPTIED)
    if emptied is None:
        return False
    required, fleet = emptied
    aside = [d for d in plan.dropped if d.filter == "availability"]
    capable = dict.fromkeys(
        d.deployment_id
        for d in aside
        if d.deployment_id in fleet.deployments
        and not required - fleet.deployments[d.deployment_id].capabilities
    )
    if not capable:
        return False
    plan.cache[_NARROWING] = PoolNarrowing(
        eligible=tuple(capable),
        kept=len(capable),
        pool=len(
            {d.deployment_id for d in plan.dropped if d.filter in ("availability", "capability")}
        ),
        lacking=tuple(sorted(required)),
    )
    plan.emptied_by = "availability"
    return True
