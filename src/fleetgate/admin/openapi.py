"""The admin API's OpenAPI document, made to tell the truth.

Every status an admin operation can answer is listed with the one error schema
(`ErrorResponse`); request bodies are the config tree's own typed models (a PATCH body the
deep-partial, nullable form of its model, as JSON merge patch reads it); the admin key is
declared as the security scheme. FastAPI's default 422 "validation error" is dropped: a
body that fails the schema is answered 400 (`invalid_request`), and 422 means the fleet
the change would make is invalid (`invalid_config`).
"""

from __future__ import annotations

import copy
from http import HTTPStatus
from typing import Any, get_args

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from pydantic import BaseModel, ConfigDict, Field, create_model

from fleetgate.config.schema import FleetConfig
from fleetgate.store.kinds import EntityKind

_REF = "#/components/schemas/"

# what each status means on the admin API, for the document's descriptions
_MEANING = {
    400: "The request does not match the schema (`invalid_request`; `problems` lists why).",
    401: "The admin key is missing or wrong (`invalid_admin_key`).",
    403: "No admin key is set (FLEETGATE_ADMIN_KEY or `admin.key`), so the admin API is off "
    "(`admin_disabled`).",
    404: "No such entity, key or logged request (`not_found`).",
    409: "The id exists (`already_exists`), or others still use the entity (`in_use`).",
    422: "The fleet the change would make is invalid (`invalid_config`); nothing changed.",
    503: "The store cannot be reached (`store_unavailable`); retry.",
}
COMMON = (400, 401, 403, 503)


class Problem(BaseModel):
    path: str
    message: str


class User(BaseModel):
    kind: str
    id: str


class ErrorDetail(BaseModel):
    message: str
    type: str
    code: str
    param: str | None = None
    problems: list[Problem] | None = Field(None, description="each problem, by path")
    users: list[User] | None = Field(None, description="`in_use`: who still uses it")
    id: str | None = Field(None, description="`already_exists`: the id")


class ErrorResponse(BaseModel):
    model_config = ConfigDict(title="ErrorResponse")
    error: ErrorDetail


def _error_response(status: int) -> dict[str, Any]:
    return {
        "description": _MEANING[status],
        "content": {"application/json": {"schema": {"$ref": _REF + "ErrorResponse"}}},
    }


def responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """FastAPI `responses=` for the common statuses plus `statuses`, each with the error."""
    return {
        s: {"model": ErrorResponse, "description": _MEANING.get(s, HTTPStatus(s).phrase)}
        for s in sorted({*COMMON, *statuses})
    }


def entity_model(kind: EntityKind) -> type[BaseModel]:
    """The typed model of one entity body: the config section's own block (a map-shaped
    section's block gains the field that holds its name)."""
    annotation = FleetConfig.model_fields[kind.name].annotation
    block = get_args(annotation)[-1]  # list[X] -> X; dict[Identifier, X] -> X
    if kind.shape == "list":
        return block  # type: ignore[no-any-return]
    name_type = get_args(annotation)[0]
    return create_model(  # type: ignore[call-overload, no-any-return]
        f"{block.__name__}Entity", __base__=block, **{kind.key_field: (name_type, ...)}
    )


def body_schema(name: str, form: str = "") -> dict[str, Any]:
    """`openapi_extra` naming the typed request body of an operation: the model (`form`
    ""), its merge patch ("Patch") or its replacement ("Replace", the id optional: the path
    names it)."""
    ref = {"$ref": _REF + name + form}
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": ref}}}}


def _replacement(schema: dict[str, Any], key_field: str) -> dict[str, Any]:
    """A PUT body of `schema`: the same, but the id may be left out (the path names it)."""
    out = copy.deepcopy(schema)
    required = [f for f in out.get("required", []) if f != key_field]
    if required:
        out["required"] = required
    else:
        out.pop("required", None)
    return out


def _partial(schema: Any) -> Any:
    """A JSON merge patch of `schema`: nothing required, every member nullable (null
    removes it), nested objects partial too; arrays are replaced whole, so they keep the
    full item schema."""
    if not isinstance(schema, dict):
        return schema
    if "$ref" in schema:
        return {**schema, "$ref": schema["$ref"] + "Patch"}
    out = dict(schema)
    out.pop("required", None)
    out.pop("default", None)
    if isinstance(out.get("properties"), dict):
        out["properties"] = {k: _nullable(_partial(v)) for k, v in out["properties"].items()}
    if isinstance(out.get("additionalProperties"), dict):
        out["additionalProperties"] = _nullable(_partial(out["additionalProperties"]))
    for key in ("anyOf", "oneOf", "allOf"):
        if isinstance(out.get(key), list):
            out[key] = [_partial(s) for s in out[key]]
    return out


def _nullable(schema: dict[str, Any]) -> dict[str, Any]:
    options = schema.get("anyOf")
    if isinstance(options, list) and {"type": "null"} in options:
        return schema
    return {"anyOf": [schema, {"type": "null"}]}


def _add_model(components: dict[str, Any], model: type[BaseModel]) -> None:
    """The model and its nested models, in full and as merge-patch forms."""
    schema = model.model_json_schema(ref_template=_REF + "{model}")
    defs = schema.pop("$defs", {})
    for name, sub in {**defs, model.__name__: schema}.items():
        components[name] = sub
        components[name + "Patch"] = _partial(copy.deepcopy(sub))


def install_openapi(app: FastAPI, models: dict[type[BaseModel], str]) -> None:
    """Replace FastAPI's generator with one that tells the truth (see the module docstring).
    `models`: each entity's model and the field that holds its id."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is not None:
            return app.openapi_schema
        doc = get_openapi(
            title=app.title, version=app.version, description=app.description, routes=app.routes
        )
        components = doc.setdefault("components", {})
        schemas = components.setdefault("schemas", {})
        for model in (*models, ErrorResponse):
            _add_model(schemas, model)
        for model, key_field in models.items():
            schemas[model.__name__ + "Replace"] = _replacement(schemas[model.__name__], key_field)
        for name in ("ErrorResponsePatch", "ErrorDetailPatch", "ProblemPatch", "UserPatch"):
            schemas.pop(name, None)
        for path in doc.get("paths", {}).values():
            for operation in path.values():
                documented = operation.setdefault("responses", {})
                for status in COMMON:  # every operation can answer these
                    documented.setdefault(str(status), _error_response(status))
                content = operation.get("requestBody", {}).get("content", {})
                body = content.get("application/json", {})
                if "$ref" in body.get("schema", {}):  # the typed model, not FastAPI's `object`
                    body["schema"] = {"$ref": body["schema"]["$ref"]}
                found = operation.get("responses", {}).get("422", {})
                ref = str(found.get("content", {}).get("application/json", {}).get("schema"))
                if "HTTPValidationError" in ref:
                    del operation["responses"]["422"]  # validation errors are 400 here
        schemas.pop("HTTPValidationError", None)
        schemas.pop("ValidationError", None)
        components["securitySchemes"] = {
            "adminKey": {
                "type": "http",
                "scheme": "bearer",
                "description": "The admin key (FLEETGATE_ADMIN_KEY or `admin.key`); "
                "`x-api-key: <key>` works too.",
            }
        }
        doc["security"] = [{"adminKey": []}]
        app.openapi_schema = doc
        return doc

    app.openapi = openapi  # type: ignore[method-assign]
