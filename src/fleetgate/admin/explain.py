"""`POST /admin/explain`: the plan a request body would follow, behind the admin key (the
dashboard's Explain page; `POST /v1/routing/explain` needs a client key when auth is on)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict, Field

from fleetgate.routing.sticky import ReadOnlySticky

if TYPE_CHECKING:
    from fleetgate.server.control import ControlPlane


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
        from fleetgate.server.app import explain_request

        gateway = control.gateway
        headers = {k.lower(): v for k, v in body.headers.items()}
        return explain_request(
            dict(body.request),
            control.fleet,
            gateway.state,
            headers,
            sticky=ReadOnlySticky(gateway.sticky),
            windows=gateway.windows,
        )

    return r
