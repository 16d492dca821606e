"""`GET /admin/stats`: the request log aggregated over a window, for the dashboard's charts."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from fastapi import APIRouter, Query

from fleetgate.store.request_stats import Window, request_stats

if TYPE_CHECKING:
    from fleetgate.control.plane import ControlPlane


def router(control: ControlPlane) -> APIRouter:
    r = APIRouter(tags=["request log"])

    @r.get("/admin/stats", summary="Requests, errors, fallbacks, tier share and TTFT over time")
    async def stats(
        window: float = Query(3600, ge=60, le=90 * 86400, description="seconds back from now"),
        buckets: int = Query(60, ge=1, le=500, description="equal time buckets"),
    ) -> dict[str, Any]:
        return await request_stats(control.db, Window.ending(time.time(), window, buckets))

    return r
