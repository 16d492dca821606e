"""Named tiers: a tier's declared chain, chosen by the `X-Fleetgate-Tier` header or `auto`."""

from __future__ import annotations

from typing import Any

from fleetgate.errors import GatewayError
from fleetgate.fleet import Fleet
from fleetgate.fleet.routes import Tier
from fleetgate.routing.chains import dedup, route_candidates
from fleetgate.routing.plan import Dropped, RoutePlan
from fleetgate.routing.resolution import Resolution

TIER_HEADER = "x-fleetgate-tier"


def find_tier(fleet: Fleet, name: str) -> Tier:
    """The tier of that name (exact, else case-insensitive); `tier_not_found` otherwise."""
    tier = fleet.tiers.get(name)
    if tier is None:
        folded = name.lower()
        tier = next((t for n, t in fleet.tiers.items() if n.lower() == folded), None)
    if tier is None:
        known = ", ".join(sorted(fleet.tiers)) or "none are configured"
        raise GatewayError(
            "tier_not_found",
            f"There is no tier {name!r} (X-Fleetgate-Tier). Tiers: {known}.",
            param=TIER_HEADER,
        )
    return tier


def resolve_tier(tier: Tier, reason: str, detail: dict[str, Any]) -> Resolution:
    """The tier's routes in declared order; availability and later filters only drop."""
    dropped: list[Dropped] = []
    chain = dedup(route_candidates(tier.routes, f"tier:{tier.name}", tier=tier.name), dropped)
    return Resolution(
        reason,
        chain,
        ordered=True,
        dropped=dropped,
        emptied_by=None if chain else "resolve",
        headers={"X-Fleetgate-Reason": reason, "X-Fleetgate-Tier": tier.name},
        notes={"resolution": {"rule": reason, "tier": tier.name, **detail}},
        on_empty=lambda plan: _empty_tier_error(tier, plan),
    )


def _empty_tier_error(tier: Tier, plan: RoutePlan) -> GatewayError:
    reasons = "; ".join(f"{d.deployment_id}: {d.reason}" for d in plan.dropped) or "no routes"
    return GatewayError(
        "no_route",
        f"No route of the tier {tier.name!r} can serve this request: the "
        f"{plan.emptied_by or 'resolve'} filter removed the last candidate ({reasons}).",
    )
