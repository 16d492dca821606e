"""A readable summary of a valid fleet, printed by `fleetgate check`."""

from __future__ import annotations

from fleetgate.config import FleetConfig
from fleetgate.fleet import build_fleet


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
    return "\n".join(lines)
