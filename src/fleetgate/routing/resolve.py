"""Resolve: a requested model name becomes an ordered list of candidate routes."""

from __future__ import annotations

from dataclasses import dataclass

from fleetgate.errors import GatewayError
from fleetgate.routing.plan import Candidate, PlanContext


@dataclass(frozen=True, slots=True)
class Resolution:
    reason: str  # "explicit" | "deployment"
    candidates: list[Candidate]
    ordered: bool = False  # True when the chain's order is declared and must be kept


def resolve(ctx: PlanContext) -> Resolution:
    """Apply the name precedence; unknown names raise `model_not_found`."""
    name = ctx.profile.model
    fleet = ctx.fleet
    model = fleet.models.get(name)
    if model is not None:
        return Resolution("explicit", [Candidate(d) for d in model.deployments])
    deployment = fleet.deployments.get(name)
    if deployment is not None:
        return Resolution("deployment", [Candidate(deployment)], ordered=True)
    raise GatewayError(
        "model_not_found",
        f"The model {name!r} does not exist. GET /v1/models lists the models this gateway "
        "serves.",
        param="model",
    )
