"""Operations on the live fleet: `POST /admin/deployments/{id}/reset` (close a circuit, end
a cooldown) and `POST /admin/reload` (re-read the fleet file, as SIGHUP does)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from fastapi import APIRouter

from fleetgate.admin.errors import AdminError
from fleetgate.admin.fleet_view import live_fleet
from fleetgate.admin.openapi import responses
from fleetgate.config.loader import ConfigError
from fleetgate.control.plane import NoConfigFile
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

    @r.post(
        "/admin/reload",
        summary="Re-read the fleet file, validate all of it, and swap it in (as SIGHUP does)",
        responses=responses(409, 422),
    )
    async def reload() -> dict[str, Any]:
        try:
            return await control.reload_file("POST /admin/reload")
        except NoConfigFile as exc:
            raise GatewayError("no_config_file", str(exc)) from exc
        except ConfigError as exc:
            problems = [
                {"path": p.path, "message": p.message, "line": p.line} for p in exc.problems
            ]
            summary = "; ".join(str(p) for p in exc.problems)
            raise AdminError(
                "invalid_config",
                f"The fleet file is invalid and was not applied ({len(problems)} problem(s)): "
                f"{summary}",
                problems=problems,
            ) from exc

    return r
