"""Operations on the live fleet that change no config: `POST
/admin/deployments/{id}/reset` (close a circuit, end a cooldown)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from fastapi import APIRouter

from fleetgate.admin.fleet_view import live_fleet
from fleetgate.admin.openapi import responses
from fleetgate.errors import GatewayError

if TYPE_CHECKING:
    from fleetgate.control.plane import ControlPlane


def router(control: ControlPlane) -> APIRouter:
    r = APIRouter(tags=["fleet"])

    @r.post(
        "/admin/deployments/{deployment_id:path}/reset",
        summary="Close a deployment's circuit and end its cooldown, at once",
        responses=responses(404),
    )
    async def reset(deployment_id: str) -> dict[str, Any]:
        fleet = control.fleet
        if deployment_id not in fleet.deployments:
            raise GatewayError(
                "not_found",
                f"There is no deployment {deployment_id!r}; GET /admin/fleet lists them.",
            )
        state = control.pipeline.state
        was = state.health(deployment_id).circuit
        state.recover(deployment_id, "reset through the admin API")
        view = live_fleet(fleet, state, now=time.time())
        entry = next(d for d in view["deployments"] if d["id"] == deployment_id)
        return {"id": deployment_id, "was": was, "health": entry["health"]}

    return r
