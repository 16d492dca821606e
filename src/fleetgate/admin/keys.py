"""Client keys: create (the secret is shown once), list, read, change, delete."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fastapi import APIRouter, Response
from pydantic import BaseModel, ConfigDict, Field

from fleetgate.errors import GatewayError

if TYPE_CHECKING:
    from fleetgate.server.control import ControlPlane


class KeyFields(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str | None = None
    allowed_models: list[str] | None = Field(
        None, description="model ids or virtual model names; null allows every model"
    )
    rpm: int | None = Field(None, ge=1, description="requests per minute, cluster-wide")
    tpm: int | None = Field(None, ge=1, description="tokens per minute, cluster-wide")
    budget: float | None = Field(None, ge=0, description="spend limit in the price unit")
    disabled: bool | None = None


def router(control: ControlPlane) -> APIRouter:
    r = APIRouter(tags=["client keys"])

    @r.post("/admin/keys", status_code=201, summary="Create a key; the response holds it once")
    async def create(fields: KeyFields) -> dict[str, Any]:
        row, secret = await control.keys.create(fields.model_dump())
        await control.keys_changed()
        return {**row, "key": secret}

    @r.get("/admin/keys", summary="Every key (never the secrets)")
    async def list_keys() -> dict[str, Any]:
        return {"data": await control.keys.list()}

    @r.get("/admin/keys/{key_id}", summary="One key")
    async def get_key(key_id: str) -> dict[str, Any]:
        row = await control.keys.get(key_id)
        if row is None:
            raise GatewayError("not_found", f"There is no key {key_id!r}.")
        return row

    @r.patch("/admin/keys/{key_id}", summary="Change a key's name, models, limits or budget")
    async def patch_key(key_id: str, fields: KeyFields) -> dict[str, Any]:
        row = await control.keys.update(key_id, fields.model_dump(exclude_unset=True))
        if row is None:
            raise GatewayError("not_found", f"There is no key {key_id!r}.")
        await control.keys_changed()
        return row

    @r.delete("/admin/keys/{key_id}", status_code=204, summary="Revoke a key")
    async def delete_key(key_id: str) -> Response:
        if not await control.keys.delete(key_id):
            raise GatewayError("not_found", f"There is no key {key_id!r}.")
        await control.keys_changed()
        return Response(status_code=204)

    return r
