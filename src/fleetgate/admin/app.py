"""The admin sub-application: FastAPI for its validation and OpenAPI docs (`/admin/docs`).

It is mounted by path prefix from the raw-ASGI gateway, so the hot path pays nothing for it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match
from starlette.types import Scope

from fleetgate.admin import (
    entities,
    explain,
    fleet_view,
    history,
    keys,
    log,
    operations,
    stats,
)
from fleetgate.admin.docs import add_docs
from fleetgate.admin.errors import AdminError
from fleetgate.admin.openapi import entity_model, install_openapi
from fleetgate.auth.guard import presents
from fleetgate.errors import GatewayError
from fleetgate.store.errors import RowRejected, StoreError, StoreUnavailable
from fleetgate.store.kinds import ENTITY_KINDS

if TYPE_CHECKING:
    from fleetgate.control.plane import ControlPlane


def create_admin_app(control: ControlPlane) -> FastAPI:
    async def require_admin(request: Request) -> None:
        if not control.admin_key:
            raise GatewayError(
                "admin_disabled",
                "The admin API is off: no admin key is set. Set FLEETGATE_ADMIN_KEY (or "
                "`admin.key` in the fleet file) and restart.",
            )
        if not presents(request.scope["headers"], control.admin_key):
            raise GatewayError("invalid_admin_key", "The admin key is missing or wrong.")

    app = FastAPI(
        title="fleetgate admin API",
        description="Change the fleet live, read the request log, manage client keys.",
        docs_url=None,  # served by admin/docs.py, from the package instead of a CDN
        openapi_url="/admin/openapi.json",
        redoc_url=None,
        dependencies=[Depends(require_admin)],
    )

    @app.exception_handler(GatewayError)
    async def _gateway_error(request: Request, exc: GatewayError) -> JSONResponse:
        return JSONResponse(exc.body(), status_code=exc.status, headers=exc.headers)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        codes = {404: "not_found", 405: "method_not_allowed"}
        err = GatewayError(
            codes.get(exc.status_code, "invalid_request"),
            f"{request.method} {request.url.path}: {exc.detail}",
            status=exc.status_code,
        )
        headers = dict(exc.headers or {})
        if exc.status_code == 405:  # every method of the path, not only one route's
            headers["Allow"] = ", ".join(_allowed(app, request.scope))
        return JSONResponse(err.body(), status_code=exc.status_code, headers=headers)

    async def _store_error(request: Request, exc: Exception) -> JSONResponse:
        if isinstance(exc, RowRejected):  # a value the database cannot hold
            err = GatewayError("invalid_request", "A value is too long or malformed to store.")
            return JSONResponse(err.body(), status_code=err.status)
        control.store_outage.failed(exc)
        err = GatewayError(
            "store_unavailable",
            f"{request.method} {request.url.path}: the store cannot be reached "
            f"({type(exc).__name__}); nothing was changed. Retry shortly.",
            headers={"Retry-After": "1"},
        )
        return JSONResponse(err.body(), status_code=err.status, headers=err.headers)

    # answered here, not by the framework's plain-text 500 (after which the gateway's own
    # error answer would have broken the client's kept-alive connection)
    for store_error in (StoreError, OSError, StoreUnavailable):
        app.add_exception_handler(store_error, _store_error)

    @app.exception_handler(RequestValidationError)
    async def _bad_request(request: Request, exc: RequestValidationError) -> JSONResponse:
        problems = [
            {"path": ".".join(str(p) for p in e["loc"]), "message": e["msg"]} for e in exc.errors()
        ]
        err = AdminError("invalid_request", "The request is invalid.", problems=problems)
        return JSONResponse(err.body(), status_code=400)

    add_docs(app, "fleetgate admin API")
    app.include_router(fleet_view.router(control))
    app.include_router(log.router(control))
    app.include_router(stats.router(control))
    app.include_router(explain.router(control))
    app.include_router(history.router(control))
    app.include_router(keys.router(control))
    app.include_router(operations.router(control))  # before the entities' /{id} routes
    app.include_router(entities.router(control))
    install_openapi(app, {entity_model(kind): kind.key_field for kind in ENTITY_KINDS.values()})
    return app


_METHODS = ("DELETE", "GET", "HEAD", "OPTIONS", "PATCH", "POST", "PUT")


def _allowed(app: FastAPI, scope: Scope) -> list[str]:
    """Every method some route serves at this path (one route serves one method here)."""
    return [
        method
        for method in _METHODS
        if any(r.matches({**scope, "method": method})[0] == Match.FULL for r in app.router.routes)
    ]
