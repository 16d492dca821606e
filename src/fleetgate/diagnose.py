"""A readable summary of a valid fleet, printed by `fleetgate check`."""

from __future__ import annotations

from typing import Any

from fleetgate.config import FleetConfig
from fleetgate.fleet import Fleet, Model, build_fleet
from fleetgate.fleet.data_plane import deployment_blocker
from fleetgate.ingress.needs import derive_needs
from fleetgate.ingress.profile import RequestProfile
from fleetgate.routing.filters.capability import CapabilityFilter
from fleetgate.routing.filters.provider_prefs import ProviderPreferenceFilter
from fleetgate.routing.plan import Candidate, PlanContext
from fleetgate.state.runtime import MemoryState

_USER = {"role": "user", "content": "hello"}

# the common request shapes `fleetgate check` sizes each model's effective pool for
REQUEST_SHAPES: dict[str, dict[str, Any]] = {
    "plain": {"messages": [_USER]},
    "tools": {
        "messages": [_USER],
        "tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}],
    },
    "strict json_schema": {
        "messages": [_USER],
        "response_format": {
            "type": "json_schema",
            "json_schema": {"name": "answer", "strict": True, "schema": {"type": "object"}},
        },
    },
    "image": {
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "what is this?"},
                    {"type": "image_url", "image_url": {"url": "data:image/png;base64,AA=="}},
                ],
            }
        ]
    },
}


def effective_pools(fleet: Fleet, model: Model) -> dict[str, tuple[list[str], int]]:
    """Per request shape: the eligible deployment ids, and the pool the preferences allow.

    Runs the same preference and capability filters as a live request (the model's and
    the environment's preferences; no request preferences; health is not considered).
    """
    out: dict[str, tuple[list[str], int]] = {}
    for shape, body in REQUEST_SHAPES.items():
        profile = RequestProfile(
            protocol="openai",
            endpoint="chat.completions",
            model=model.id,
            stream=False,
            body=body,
            needs=derive_needs(body),
        )
        ctx = PlanContext(profile, fleet, MemoryState(), 0.0)
        pool, _ = ProviderPreferenceFilter().apply(ctx, [Candidate(d) for d in model.deployments])
        eligible, _ = CapabilityFilter().apply(ctx, pool)
        out[shape] = ([c.deployment.id for c in eligible], len(pool))
    return out


def pool_warnings(fleet: Fleet) -> list[str]:
    """Where a request shape has a single point of failure (1 of ≥2) or no deployment."""
    warnings = []
    for model in fleet.models.values():
        for shape, (eligible, pool) in effective_pools(fleet, model).items():
            if not eligible:
                warnings.append(
                    f"warning: model {model.id}: no deployment can serve {shape} requests "
                    f"(0/{pool} eligible)"
                )
            elif len(eligible) == 1 and pool > 1:
                warnings.append(
                    f"warning: model {model.id}: {shape} requests have a single point of "
                    f"failure: only {eligible[0]} is eligible (1/{pool})"
                )
    return warnings


def describe_fleet(config: FleetConfig) -> str:
    fleet = build_fleet(config)
    lines = [
        f"ok: {len(fleet.providers)} provider(s), {len(fleet.deployments)} deployment(s), "
        f"{len(fleet.models)} model(s)"
    ]
    for model in fleet.models.values():
        window = model.context_length or "unknown"
        lines.append(f"  model {model.id} (context {window}; tiers {tier_labels(model)})")
        for dep in model.deployments:
            creds = "" if dep.provider.has_credentials else "  [no credentials]"
            quant = f", {dep.quantization}" if dep.quantization else ""
            blocker = deployment_blocker(dep)
            proxy_only = f"\n        proxy only (a picker cannot hand it to Envoy): {blocker}"
            lines.append(
                f"    - {dep.id} via {dep.provider.id} ({dep.provider.kind}) "
                f"as {dep.upstream_model!r}, window {dep.context_window or 'unknown'}, "
                f"priority {dep.priority}{quant}{creds}{proxy_only if blocker else ''}"
            )
        pools = effective_pools(fleet, model)
        lines.append(
            "    eligible per request shape: "
            + ", ".join(f"{shape} {len(ids)}/{pool}" for shape, (ids, pool) in pools.items())
        )
    lines.extend(pool_warnings(fleet))
    lines.extend(describe_chains(fleet))
    return "\n".join(lines)


def tier_labels(model: Model) -> str:
    """`default 1024, long 4096`: each context tier label and its largest declared window."""
    largest: dict[str, int | None] = {}
    for dep in model.deployments:
        window = dep.context_window
        known = largest.get(dep.tier)
        if dep.tier not in largest or (window is not None and (known is None or window > known)):
            largest[dep.tier] = window
    return ", ".join(f"{tier} {largest[tier] or 'unknown'}" for tier in sorted(largest))


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
