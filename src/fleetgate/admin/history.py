"""`GET /admin/config/history`: every config change, newest first."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fastapi import APIRouter, Query

if TYPE_CHECKING:
    from fleetgate.control.plane import ControlPlane


def router(control: ControlPlane) -> APIRouter:
    r = APIRouter(tags=["config history"])

    @r.get("/admin/config/history", summary="Config changes, newest first")
    async def history(limit: int = Query(50, ge=1, le=1000)) -> dict[str, Any]:
        return {"data": await control.config_store.history(limit)}

    return r
