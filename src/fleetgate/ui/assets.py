"""The dashboard's files (`/ui`), served from inside the package: no CDN, so the page works
on a host without internet. Read once, kept in memory, revalidated by ETag."""

from __future__ import annotations

from pathlib import Path

from fleetgate.errors import GatewayError
from fleetgate.web.asgi import Receive, Scope, Send
from fleetgate.web.assets import Asset, load_assets

STATIC = Path(__file__).with_name("static")
PREFIX = "/ui/static/"
# The dashboard's own scripts only; styles may be set inline by the chart library.
DASHBOARD_HEADERS = (
    (
        b"content-security-policy",
        b"default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
        b"img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; "
        b"form-action 'self'",
    ),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"x-frame-options", b"DENY"),
)


def _header(scope: Scope, name: bytes) -> bytes | None:
    for key, value in scope.get("headers", ()):
        if key == name:
            return bytes(value)
    return None


class Dashboard:
    """The raw-ASGI handler for `/ui`, `/ui/` (the page) and `/ui/static/...` (its files)."""

    def __init__(self, directory: Path = STATIC) -> None:
        self.assets = load_assets(directory)

    def find(self, path: str) -> Asset | None:
        if path in ("/ui", "/ui/"):
            return self.assets.get("index.html")
        if path.startswith(PREFIX):
            return self.assets.get(path.removeprefix(PREFIX))
        return None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["method"] not in ("GET", "HEAD"):
            raise GatewayError("method_not_allowed", f"{scope['method']} is not allowed here.")
        asset = self.find(scope["path"])
        if asset is None:
            raise GatewayError("not_found", f"There is no dashboard file at {scope['path']}.")
        headers = [
            (b"content-type", asset.content_type.encode()),
            (b"etag", asset.etag.encode()),
            (b"cache-control", b"no-cache"),
            *DASHBOARD_HEADERS,
        ]
        fresh = _header(scope, b"if-none-match") == asset.etag.encode()
        status = 304 if fresh else 200
        if not fresh:
            headers.append((b"content-length", str(len(asset.body)).encode()))
        body = b"" if fresh or scope["method"] == "HEAD" else asset.body
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})
