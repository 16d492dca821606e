"""`GET /admin/fleet` (the live fleet with runtime state) and `GET /admin/status`."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from fastapi import APIRouter

from fleetgate.config.checks import deployment_id
from fleetgate.context.placement import effective_window
from fleetgate.discovery.engine_load import EngineLoads
from fleetgate.discovery.store import WindowStore
from fleetgate.execute.upstream import pool_limit
from fleetgate.fleet import Deployment, Fleet
from fleetgate.fleet.routes import Route
from fleetgate.state.runtime import RuntimeState

if TYPE_CHECKING:
    from fleetgate.control.plane import ControlPlane


def window_source(fleet: Fleet, dep: Deployment) -> str | None:
    """Which config field declares the deployment's window (None: none does)."""
    if dep.context_window is None:
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


def _window(fleet: Fleet, dep: Deployment, windows: WindowStore | None) -> dict[str, Any]:
    field = window_source(fleet, dep)
    if windows is None:
        declared = effective_window(dep)
        source = "config" if declared is not None else "unknown"
        return {"effective": declared, "source": source, "config_field": field}
    view = windows.view(dep).public(dep.id)
    view.pop("deployment", None)
    return {"effective": view.pop("tokens"), **view, "config_field": field}


def _engine_load(loads: EngineLoads | None, deployment_id: str, now: float) -> Any:
    """The last poll of the deployment's engine (None: not polled, see docs/balancing.md)."""
    sample = loads.get(deployment_id) if loads is not None else None
    return sample.public(now) if sample is not None else None


def live_fleet(
    fleet: Fleet,
    state: RuntimeState,
    windows: WindowStore | None = None,
    now: float | None = None,
    loads: EngineLoads | None = None,
) -> dict[str, Any]:
    now = time.time() if now is None else now
    deployments = []
    for dep in fleet.deployments.values():
        h = state.health(dep.id)
        reason = "disabled" if not dep.enabled else state.unavailable_reason(dep.id, now)
        deployments.append(
            {
                "id": dep.id,
                "model": dep.model,
                "provider": dep.provider.id,
                "kind": dep.provider.kind,
                "upstream_model": dep.upstream_model,
                "tier": dep.tier,
                "enabled": dep.enabled,
                "context_window": _window(fleet, dep, windows),
                "health": {
                    "circuit": h.circuit,
                    "available": reason is None,
                    "unavailable_reason": reason,
                    "cooldown_until": h.open_until if h.open_until > now else None,
                    "open_cause": h.open_cause or None,
                    "last_error": h.last_error or None,
                    "last_error_at": h.last_error_at or None,
                    "consecutive_failures": h.consecutive_failures,
                    "successes": h.successes,
                    "failures": h.failures,
                },
                "inflight": h.inflight,
                "context_estimate": {
                    "tokenizer_family": dep.tokenizer_family,
                    "calibration": state.calibration.public(dep.id),
                    # the deployment's own tokenizer fit: weights, source, residual spread
                    "fit": state.calibration.public_fit(dep.id),
                },
                "ema": {
                    "ttft_seconds": h.ttft_ema,
                    "latency_seconds": h.latency_ema,
                    "tokens_per_second": h.tps_ema,
                    "measured_at": h.measured_at or None,
                    "age_seconds": round(now - h.measured_at, 3) if h.measured_at else None,
                },
                "price": {"input": dep.price_input, "output": dep.price_output},
                "capabilities": sorted(dep.capabilities),
                "priority": dep.priority,
                "weight": dep.weight,
                "quantization": dep.quantization,
                "engine_load": _engine_load(loads, dep.id, now),
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
                "max_concurrency": p.max_concurrency,  # as configured (None: unset)
                "pool_limit": pool_limit(p),  # the connections its pool may open
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
        "virtual_models": [
            {
                "name": v.name,
                "response_mode": v.response_mode,
                "continue_on_default": v.continue_on_default,
                "routes": _routes(v.routes),
            }
            for v in fleet.virtual_models.values()
        ],
        "tiers": [{"name": t.name, "routes": _routes(t.routes)} for t in fleet.tiers.values()],
    }


def _routes(routes: tuple[Route, ...]) -> list[dict[str, Any]]:
    """A route chain as declared, each hop with the deployments it stands for, in order."""
    return [
        {
            "target": r.target,
            "deployments": [d.id for d in r.deployments],
            "key_label": r.key_label,
            "params": r.params,
        }
        for r in routes
    ]


def router(control: ControlPlane) -> APIRouter:
    r = APIRouter(tags=["fleet"])

    @r.get("/admin/fleet", summary="The live fleet with each deployment's runtime state")
    async def fleet() -> dict[str, Any]:
        pipeline = control.pipeline
        return live_fleet(
            control.fleet,
            pipeline.state,
            pipeline.windows,
            loads=pipeline.loads,
        )

    @r.get("/admin/status", summary="Store, request-log and Redis counters")
    async def status() -> dict[str, Any]:
        return control.status()

    return r
