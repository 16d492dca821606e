"""`GET /admin/fleet` (the live fleet with runtime state) and `GET /admin/status`."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from fastapi import APIRouter

from fleetgate.config.checks import deployment_id
from fleetgate.context.placement import effective_window
from fleetgate.fleet import Deployment, Fleet
from fleetgate.state.runtime import RuntimeState

if TYPE_CHECKING:
    from fleetgate.server.control import ControlPlane


def window_source(fleet: Fleet, dep: Deployment) -> str | None:
    """Which config field the deployment's window comes from."""
    if effective_window(dep) is None:
        return None
    for d in fleet.config.deployments:
        if deployment_id(d) == dep.id and d.context_window is not None:
            return "deployment.context_window"
    model = next((m for m in fleet.config.models if m.id == dep.model), None)
    if model is not None and model.long_context is not None:
        if dep.tier == "long":
            return "long_context.max_context_tokens"
        return "long_context.base_max_context_tokens"
    return "deployment.context_window"


def live_fleet(fleet: Fleet, state: RuntimeState, now: float | None = None) -> dict[str, Any]:
    now = time.time() if now is None else now
    deployments = []
    for dep in fleet.deployments.values():
        h = state.health(dep.id)
        deployments.append(
            {
                "id": dep.id,
                "model": dep.model,
                "provider": dep.provider.id,
                "upstream_model": dep.upstream_model,
                "tier": dep.tier,
                "context_window": {
                    "effective": effective_window(dep),
                    "source": window_source(fleet, dep),
                },
                "health": {
                    "circuit": h.circuit,
                    "available": state.unavailable_reason(dep.id, now) is None,
                    "unavailable_reason": state.unavailable_reason(dep.id, now),
                    "cooldown_until": h.open_until if h.open_until > now else None,
                    "consecutive_failures": h.consecutive_failures,
                    "successes": h.successes,
                    "failures": h.failures,
                },
                "inflight": h.inflight,
                "ema": {
                    "ttft_seconds": h.ttft_ema,
                    "latency_seconds": h.latency_ema,
                    "tokens_per_second": h.tps_ema,
                },
            }
        )
    return {
        "version": fleet.version,
        "providers": [
            {
                "id": p.id,
                "kind": p.kind,
                "base_url": p.base_url,
                "has_credentials": p.has_credentials,
                "max_concurrency": p.max_concurrency,
            }
            for p in fleet.providers.values()
        ],
        "models": [
            {
                "id": m.id,
                "context_length": m.context_length,
                "deployments": [d.id for d in m.deployments],
            }
            for m in fleet.models.values()
        ],
        "deployments": deployments,
    }


def router(control: ControlPlane) -> APIRouter:
    r = APIRouter(tags=["fleet"])

    @r.get("/admin/fleet", summary="The live fleet with each deployment's runtime state")
    async def fleet() -> dict[str, Any]:
        return live_fleet(control.fleet, control.gateway.state)

    @r.get("/admin/status", summary="Store, request-log and Redis counters")
    async def status() -> dict[str, Any]:
        return control.status()

    return r
