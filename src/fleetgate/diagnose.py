"""A readable summary of a valid fleet, printed by `fleetgate check`."""

from __future__ import annotations

from fleetgate.config import FleetConfig
from fleetgate.fleet import Fleet, build_fleet


def describe_fleet(config: FleetConfig) -> str:
    fleet = build_fleet(config)
    lines = [
        f"ok: {len(fleet.providers)} provider(s), {len(fleet.deployments)} deployment(s), "
        f"{len(fleet.models)} model(s)"
    ]
    for model in fleet.models.values():
        window = model.context_length or "unknown"
        lines.append(f"  model {model.id} (context {window})")
        for dep in model.deployments:
            creds = "" if dep.provider.has_credentials else "  [no credentials]"
            lines.append(
                f"    - {dep.id} via {dep.provider.id} ({dep.provider.kind}) "
                f"as {dep.upstream_model!r}, window {dep.context_window or 'unknown'}, "
                f"priority {dep.priority}{creds}"
            )
    lines.extend(describe_chains(fleet))
    return "\n".join(lines)


def describe_chains(fleet: Fleet) -> list[str]:
    """One line per enabled virtual model and per tier, with its declared route targets."""
    lines = []
    for vm in fleet.virtual_models.values():
        targets = ", ".join(r.target for r in vm.routes) or "no routes"
        extra = " + default tier" if vm.continue_on_default else ""
        lines.append(f"  virtual model {vm.name} ({vm.response_mode}): {targets}{extra}")
    for tier in fleet.tiers.values():
        targets = ", ".join(r.target for r in tier.routes) or "no routes"
        lines.append(f"  tier {tier.name}: {targets}")
    return lines
