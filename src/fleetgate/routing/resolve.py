"""Resolve: a requested model name becomes an ordered list of candidate routes.

`resolve` is the one place the precedence lives:

1. an enabled virtual model whose name equals `model` case-insensitively;
2. a tier named by the `X-Fleetgate-Tier` header (not for heartbeats);
3. `auto`, when configured: the scorer picks a tier;
4. a real model id (all its deployments), or a deployment id;
5. otherwise `model_not_found`.
"""

from __future__ import annotations

from fleetgate.errors import GatewayError
from fleetgate.fleet import Fleet
from fleetgate.routing.auto import AUTO_MODEL, DEFAULT_HEARTBEAT, is_heartbeat, pick_tier
from fleetgate.routing.chains import deployment_candidates
from fleetgate.routing.plan import PlanContext
from fleetgate.routing.resolution import Resolution
from fleetgate.routing.tiers import TIER_HEADER, find_tier, resolve_tier
from fleetgate.routing.virtual import resolve_virtual

__all__ = ["Resolution", "resolve"]

_EXPLICIT = {"X-Fleetgate-Reason": "explicit"}


def resolve(ctx: PlanContext) -> Resolution:
    """Apply the name precedence; unknown names raise `model_not_found`."""
    profile = ctx.profile
    name = profile.model
    fleet = ctx.fleet
    virtual = fleet.virtual_models.get(name.lower())
    if virtual is not None:
        return resolve_virtual(ctx, virtual)
    auto = fleet.config.auto if fleet.config.auto and fleet.config.auto.enabled else None
    tier_name = profile.headers.get(TIER_HEADER)
    is_auto = auto is not None and name == AUTO_MODEL
    heartbeat = False
    if tier_name or is_auto:
        heartbeat = is_heartbeat(profile, auto.heartbeat if auto else DEFAULT_HEARTBEAT)
    if tier_name and not heartbeat:
        return resolve_tier(find_tier(fleet, tier_name), "header-tier", {})
    if is_auto:
        assert auto is not None
        picked, detail = pick_tier(ctx, auto, heartbeat)
        if tier_name:
            detail["tier_header_ignored"] = "heartbeat"
        return resolve_tier(find_tier(fleet, picked), "auto", detail)
    model = fleet.models.get(name)
    if model is not None:
        detail = {"rule": "explicit"}
        if tier_name:
            detail["tier_header_ignored"] = "heartbeat"
        return Resolution(
            "explicit",
            deployment_candidates(model.deployments),
            headers=_EXPLICIT,
            notes={"resolution": detail},
        )
    deployment = fleet.deployments.get(name)
    if deployment is not None:
        return Resolution(
            "deployment",
            deployment_candidates([deployment]),
            ordered=True,
            headers=_EXPLICIT,
            notes={"resolution": {"rule": "deployment"}},
        )
    raise GatewayError("model_not_found", _not_found_message(name, fleet), param="model")


def _not_found_message(name: str, fleet: Fleet) -> str:
    ways = ["GET /v1/models lists the models and virtual models this gateway serves"]
    if fleet.tiers:
        ways.append(
            f"a tier ({', '.join(sorted(fleet.tiers))}) can be chosen with the "
            "X-Fleetgate-Tier header"
        )
    if fleet.config.auto is not None and fleet.config.auto.enabled:
        ways.append("model 'auto' picks a tier for you")
    return f"The model {name!r} does not exist. " + "; ".join(ways) + "."
