"""`POST /admin/explain`: the plan a request body would follow, behind the admin key (the
dashboard's Explain page; `POST /v1/routing/explain` needs a client key when auth is on)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict, Field

if TYPE_CHECKING:
    from fleetgate.control.plane import ControlPlane


class ExplainBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    request: dict[str, Any] = Field(description="a request body, as a client would send it")
    headers: dict[str, str] = Field(
        default_factory=dict, description="request headers, e.g. `x-fleetgate-tier`"
    )


def router(control: ControlPlane) -> APIRouter:
    r = APIRouter(tags=["fleet"])

    @r.post("/admin/explain", summary="The plan a request would follow, sending nothing")
    async def explain(body: ExplainBody) -> dict[str, Any]:
        headers = {k.lower(): v for k, v in body.headers.items()}
        # the pipeline's own explain: balancing (affinity, engine load) included, as
        # `POST /v1/routing/explain` shows it
        return control.pipeline.explain(dict(body.request), headers)

    return r
