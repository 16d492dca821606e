"""`/admin/docs`: Swagger UI with its script and stylesheet served from the package
(the `fastapi-offline` distribution carries them), so the page works without internet."""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

from fastapi import FastAPI
from fastapi.openapi.docs import get_swagger_ui_html
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response

from fleetgate.errors import GatewayError
from fleetgate.web.assets import load_assets

ASSETS = "/admin/docs/assets"


def swagger_assets_dir() -> Path:
    return Path(str(files("fastapi_offline") / "static"))


def add_docs(app: FastAPI, title: str) -> None:
    """The docs page and its assets; like the OpenAPI document, they need no admin key."""
    assets = {
        name: asset
        for name, asset in load_assets(swagger_assets_dir()).items()
        if name in ("swagger-ui-bundle.js", "swagger-ui.css", "favicon.png")
    }

    async def docs(request: Request) -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url=app.openapi_url or "/admin/openapi.json",
            title=title,
            swagger_js_url=f"{ASSETS}/swagger-ui-bundle.js",
            swagger_css_url=f"{ASSETS}/swagger-ui.css",
            swagger_favicon_url=f"{ASSETS}/favicon.png",
        )

    async def asset(request: Request) -> Response:
        name = request.path_params["name"]
        found = assets.get(name)
        if found is None:
            raise GatewayError("not_found", f"There is no docs asset {name!r}.")
        headers = {"etag": found.etag, "cache-control": "public, max-age=86400"}
        if request.headers.get("if-none-match") == found.etag:
            return Response(status_code=304, headers=headers)
        return Response(found.body, media_type=found.content_type, headers=headers)

    app.add_route("/admin/docs", docs, include_in_schema=False)
    app.add_route(ASSETS + "/{name}", asset, include_in_schema=False)
