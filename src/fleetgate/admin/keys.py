"""Client keys: create (the secret is shown once), list, read, change, delete."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

from fastapi import APIRouter, Response
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

from fleetgate.admin.openapi import responses
from fleetgate.errors import GatewayError

if TYPE_CHECKING:
    from fleetgate.control.plane import ControlPlane


# a model id or virtual model name, as a client may send it (ingress/fields.py)
ModelName = Annotated[str, Field(min_length=1, max_length=255)]


def _integral(value: object) -> object:
    # JSON has one number type: 5.0 is the integer 5 (as JSON Schema says), "5" is not
    return int(value) if isinstance(value, float) and value.is_integer() else value


# a per-minute limit: at least 1, and within the store's INTEGER column (32 bits)
Count = Annotated[int, Field(ge=1, le=2**31 - 1), BeforeValidator(_integral)]


class KeyFields(BaseModel):
    """A key's settings; JSON's own types only (`0` is no boolean), and `null` only where
    it means something (no limit, every model)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    name: str = Field("", max_length=255, description="a label for people")
    allowed_models: list[ModelName] | None = Field(
        None,
        max_length=1000,
        description="model ids or virtual model names; null allows every model",
    )
    rpm: Count | None = Field(None, description="requests per minute, cluster-wide")
    tpm: Count | None = Field(None, description="tokens per minute, cluster-wide")
    budget: float | None = Field(None, ge=0, description="spend limit in the price unit")
    disabled: bool = False


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

    @r.get("/admin/keys/{key_id}", summary="One key", responses=responses(404))
    async def get_key(key_id: str) -> dict[str, Any]:
        row = await control.keys.get(key_id)
        if row is None:
            raise GatewayError("not_found", f"There is no key {key_id!r}.")
        return row

    @r.patch(
        "/admin/keys/{key_id}",
        summary="Change a key's name, models, limits or budget",
        responses=responses(404),
    )
    async def patch_key(key_id: str, fields: KeyFields) -> dict[str, Any]:
        row = await control.keys.update(key_id, fields.model_dump(exclude_unset=True))
        if row is None:
            raise GatewayError("not_found", f"There is no key {key_id!r}.")
        await control.keys_changed()
        return row

    @r.delete(
        "/admin/keys/{key_id}", status_code=204, summary="Revoke a key", responses=responses(404)
    )
    async def delete_key(key_id: str) -> Response:
        if not await control.keys.delete(key_id):
            raise GatewayError("not_found", f"There is no key {key_id!r}.")
        await control.keys_changed()
        return Response(status_code=204)

    return r
