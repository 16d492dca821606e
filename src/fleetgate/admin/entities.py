"""CRUD for fleet entities, one set of routes per registered kind.

Every change is applied to the stored rows, the whole fleet is rebuilt from them and
validated, and only then persisted and swapped in; an invalid result changes nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, get_args

from fastapi import APIRouter, Body, Response
from pydantic import BaseModel, ValidationError

from fleetgate.admin.errors import AdminError
from fleetgate.admin.key_labels import follow_key_labels
from fleetgate.admin.merge import merge_patch
from fleetgate.admin.openapi import body_schema, entity_model, responses
from fleetgate.config.loader import ConfigError
from fleetgate.errors import GatewayError
from fleetgate.store.config_store import find
from fleetgate.store.kinds import ENTITY_KINDS, Entities, EntityKind, users_of

if TYPE_CHECKING:
    from fleetgate.control.plane import ControlPlane

EntityBody = Annotated[dict[str, Any], Body(description="the entity's config block")]


MASK = "***"
_SECRET_MAPS = ("keys", "headers")  # every value of these may be a credential


def _mask(value: object) -> object:
    return value if isinstance(value, str) and value.startswith("${") else MASK


def public_body(body: dict[str, Any]) -> dict[str, Any]:
    """A stored body as the API shows it: literal credentials (`api_key`, each of `keys`,
    and every header value, which may carry one) masked; env references shown."""
    out = dict(body)
    if out.get("api_key") is not None:
        out["api_key"] = _mask(out["api_key"])
    for name in _SECRET_MAPS:
        if isinstance(out.get(name), dict):
            out[name] = {k: _mask(v) for k, v in out[name].items()}
    return out


def unmask(new: dict[str, Any], old: dict[str, Any] | None) -> dict[str, Any]:
    """A body written back with masked secrets (as GET showed it): each `***` means "keep
    the stored value". A mask with no stored value behind it is refused, never stored."""
    out = dict(new)

    def keep(value: object, stored: object, where: str) -> object:
        if value != MASK:
            return value
        if stored is None:
            raise AdminError(
                "invalid_request",
                f"`{where}` is the mask `{MASK}` but no value is stored there; send the "
                "real value (or an ${ENV} reference).",
            )
        return stored

    if "api_key" in out:
        out["api_key"] = keep(out["api_key"], (old or {}).get("api_key"), "api_key")
    for name in _SECRET_MAPS:
        values, stored = out.get(name), (old or {}).get(name)
        if isinstance(values, dict):
            stored = stored if isinstance(stored, dict) else {}
            out[name] = {k: keep(v, stored.get(k), f"{name}.{k}") for k, v in values.items()}
    return out


def _not_found(kind: str, entity_id: str) -> GatewayError:
    return GatewayError("not_found", f"There is no {kind} entry {entity_id!r}.")


def _id_of(kind: EntityKind, body: dict[str, Any]) -> str:
    try:
        entity_id = kind.id_of(body)
    except KeyError as exc:
        raise AdminError(
            "invalid_request", f"The body needs `{exc.args[0]}` to name the entity."
        ) from exc
    if not isinstance(entity_id, str) or not entity_id:
        raise AdminError("invalid_request", "The entity's id must be a non-empty string.")
    return entity_id


def _unknown_fields(model: type[BaseModel], patch: dict[str, Any], prefix: str = "") -> list[str]:
    """Paths of a merge patch that name no field of `model` (nested blocks included)."""
    found = []
    for key, value in patch.items():
        field = model.model_fields.get(key)
        if field is None:
            if model.model_config.get("extra") == "forbid":
                found.append(prefix + key)
            continue
        inner = _block_model(field.annotation)
        if inner is not None and isinstance(value, dict):
            found += _unknown_fields(inner, value, f"{prefix}{key}.")
    return found


def _block_model(annotation: Any) -> type[BaseModel] | None:
    """The config block a field holds (`X` or `X | None`), if it is one."""
    for candidate in (annotation, *get_args(annotation)):
        if isinstance(candidate, type) and issubclass(candidate, BaseModel):
            return candidate
    return None


def _same_id(kind: EntityKind, body: dict[str, Any], entity_id: str) -> None:
    """A replaced or patched entity keeps its id: else the change is invalid (422)."""
    try:
        same = _id_of(kind, body) == entity_id
    except AdminError as exc:
        same, reason = False, exc.message
    else:
        reason = f"The id cannot change ({entity_id!r}); create a new entry instead."
    if not same:
        raise AdminError(
            "invalid_config", reason, problems=[{"path": kind.key_field, "message": reason}]
        )


def _check_types(model: type[BaseModel], body: dict[str, Any]) -> None:
    """A body the config's own (lenient) reading accepts must also hold JSON's own types:
    `"5"` is no integer, `0` no boolean. The lenient reading's errors are left to the
    whole-fleet check, whose messages name each path as the config file's do."""
    try:
        model.model_validate(body)
    except ValidationError:
        return
    try:
        model.model_validate(body, strict=True)
    except ValidationError as exc:
        problems = [
            {"path": ".".join(str(p) for p in e["loc"]), "message": e["msg"]}
            for e in exc.errors()
            if not _integral(e)
        ]
        if not problems:
            return
        summary = "; ".join(f"{p['path']}: {p['message']}" for p in problems)
        raise AdminError(
            "invalid_config", f"The entity is invalid: {summary}", problems=problems
        ) from exc


def _integral(error: Any) -> bool:
    """JSON has one number type: 5.0 is the integer 5 (as JSON Schema says), "5" is not."""
    value = error.get("input")
    return error["type"] == "int_type" and isinstance(value, float) and value.is_integer()


async def _apply(
    control: ControlPlane, edit: Any, events: list[dict[str, Any]] | None = None
) -> None:
    try:
        await control.change(edit, events)
    except ConfigError as exc:
        problems = [{"path": p.path, "message": p.message} for p in exc.problems]
        summary = "; ".join(f"{p['path']}: {p['message']}" for p in problems)
        raise AdminError(
            "invalid_config", f"The fleet would be invalid: {summary}", problems=problems
        ) from exc


def _routes_for(router: APIRouter, control: ControlPlane, kind: EntityKind) -> None:
    name = kind.name
    base = f"/admin/{name}"
    model = entity_model(kind)

    async def list_all() -> dict[str, Any]:
        entities = await control.config_store.entities()
        return {"data": [public_body(b) for b in entities.get(name, [])]}

    async def get_one(entity_id: str) -> dict[str, Any]:
        found = find(await control.config_store.entities(), name, entity_id)
        if found is None:
            raise _not_found(name, entity_id)
        return public_body(found[1])

    async def create(response: Response, body: EntityBody) -> dict[str, Any]:
        entity_id = _id_of(kind, body)
        body = unmask({**body, kind.key_field: entity_id}, None)  # pins a default dep. id

        def edit(entities: Entities) -> Entities:
            _check_types(model, body)
            if find(entities, name, entity_id) is not None:
                raise AdminError(
                    "already_exists", f"{name} entry {entity_id!r} exists.", id=entity_id
                )
            entities.setdefault(name, []).append(body)
            return entities

        await _apply(control, edit)
        response.status_code = 201
        return public_body(body)

    def _replacer(entity_id: str, make: Any, events: list[dict[str, Any]]) -> Any:
        def edit(entities: Entities) -> Entities:
            found = find(entities, name, entity_id)
            if found is None:
                raise _not_found(name, entity_id)
            index, old = found
            new = make(old)
            if name == "providers":  # routes pinning a renamed key label follow it (its
                # masked credential moving with it), before masks are resolved
                new = follow_key_labels(entities, old, new, public_body(old), events)
            new = unmask(new, old)
            _check_types(model, new)
            _same_id(kind, new, entity_id)
            entities[name][index] = new
            return entities

        return edit

    async def replace(entity_id: str, body: EntityBody) -> dict[str, Any]:
        body = {kind.key_field: entity_id, **body}  # the path names it when the body does not
        events: list[dict[str, Any]] = []
        await _apply(control, _replacer(entity_id, lambda old: body, events), events)
        return await get_one(entity_id)

    async def patch(entity_id: str, body: EntityBody) -> dict[str, Any]:
        unknown = _unknown_fields(model, body)
        if unknown:  # `{"typo": null}` would merge into nothing, and must not pass as done
            problems = [{"path": path, "message": "unknown field"} for path in unknown]
            raise AdminError(
                "invalid_config", f"Unknown field(s): {', '.join(unknown)}.", problems=problems
            )
        events: list[dict[str, Any]] = []
        edit = _replacer(entity_id, lambda old: merge_patch(old, body), events)
        await _apply(control, edit, events)
        return await get_one(entity_id)

    async def remove(entity_id: str) -> Response:
        def edit(entities: Entities) -> Entities:
            found = find(entities, name, entity_id)
            if found is None:
                raise _not_found(name, entity_id)
            users = users_of(entities, name, entity_id)
            if users:
                listed = ", ".join(f"{u.user_kind}/{u.user_id}" for u in users)
                raise AdminError(
                    "in_use",
                    f"{name} entry {entity_id!r} is still used by: {listed}.",
                    users=[{"kind": u.user_kind, "id": u.user_id} for u in users],
                )
            del entities[name][found[0]]
            return entities

        await _apply(control, edit)
        return Response(status_code=204)

    tag = [name]
    typed = model.__name__
    router.add_api_route(base, list_all, methods=["GET"], tags=tag, summary=f"List {name}")
    router.add_api_route(
        base,
        create,
        methods=["POST"],
        tags=tag,
        status_code=201,
        summary=f"Create one of {name}",
        responses=responses(409, 422),
        openapi_extra=body_schema(typed),
    )
    item = base + "/{entity_id:path}"
    router.add_api_route(
        item, get_one, methods=["GET"], tags=tag, summary="Read one", responses=responses(404)
    )
    router.add_api_route(
        item,
        replace,
        methods=["PUT"],
        tags=tag,
        summary="Replace one (the body may leave out the id: the path names it)",
        responses=responses(404, 422),
        openapi_extra=body_schema(typed, "Replace"),
    )
    router.add_api_route(
        item,
        patch,
        methods=["PATCH"],
        tags=tag,
        summary="Merge a partial body into one (RFC 7396)",
        responses=responses(404, 422),
        openapi_extra=body_schema(typed, "Patch"),
    )
    router.add_api_route(
        item,
        remove,
        methods=["DELETE"],
        tags=tag,
        status_code=204,
        summary="Delete one (409 while others use it)",
        responses=responses(404, 409, 422),
    )


def router(control: ControlPlane) -> APIRouter:
    r = APIRouter()
    for kind in ENTITY_KINDS.values():
        _routes_for(r, control, kind)
    return r
