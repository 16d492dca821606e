"""Drops deployments lacking a capability the request needs; drops unsupported sampling knobs.

A need in `CONTRACT_NEEDS` (tools, structured outputs, image input, …) — or any need when
`require_parameters` is true — must be supported, else the deployment is dropped with
`lacks <need>`. Any other need (temperature, seed, stop, …) missing from a deployment's
declared `supported_parameters` is removed from the body sent to it instead, and recorded
on the attempt; with only its provider kind's default list, knobs pass through untouched
(the defaults are a guess about the engine, too weak to edit a request on).

When this filter shrinks a pool of two or more deployments to one or none, the plan says
so: header `X-Fleetgate-Effective-Pool: <eligible>/<pool>` and note `effective_pool`.
"""

from __future__ import annotations

import dataclasses

from fleetgate.capabilities import CONTRACT_NEEDS, unsupported_fields
from fleetgate.errors import GatewayError
from fleetgate.routing.plan import Candidate, Dropped, PlanContext, RoutePlan
from fleetgate.routing.preferences import effective_preferences

EFFECTIVE_POOL_HEADER = "X-Fleetgate-Effective-Pool"


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
        kept: list[Candidate] = []
        dropped: list[Dropped] = []
        for c in candidates:
            caps = c.deployment.capabilities
            missing = required - caps
            if missing:
                dropped.append(
                    Dropped(c.deployment.id, self.name, "lacks " + ", ".join(sorted(missing)))
                )
                continue
            soft = needs - required - caps if c.deployment.parameters_declared else None
            if soft:
                fields = unsupported_fields(soft)
                c = dataclasses.replace(c, drop_params=(*c.drop_params, *fields))
            kept.append(c)
        pool = len(candidates)
        if pool >= 2 and len(kept) <= 1:
            ctx.headers[EFFECTIVE_POOL_HEADER] = f"{len(kept)}/{pool}"
            ctx.notes["effective_pool"] = {
                "eligible": len(kept),
                "pool": pool,
                "needs": sorted(required),
            }
        return kept, dropped

    def empty_error(self, plan: RoutePlan, now: float) -> GatewayError:
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
