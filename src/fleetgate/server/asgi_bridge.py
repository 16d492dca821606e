"""The paths of the gateway's own front that are not proxied (the gateway's own
endpoints, the admin API, the dashboard, an app that is not the gateway) run the ASGI app
as any ASGI server would: a scope, `receive` (the whole body, read by the connection, then
`http.disconnect` once the answer has ended or the client has gone) and `send` (onto the
request's `FrontRequest`). What uvicorn's cycle does when an app fails is done here too:
a 500 if nothing was sent, else the connection closes."""

from __future__ import annotations

import logging
from typing import Any

from fleetgate.server.front_request import FrontRequest
from fleetgate.web.asgi import DISCONNECT_HOOK, Message

log = logging.getLogger("fleetgate")

_ASGI = {"version": "3.0", "spec_version": "2.3"}
_INTERNAL_ERROR = b"Internal Server Error"


def _address(transport: Any, name: str) -> tuple[str, int] | None:
    info = transport.get_extra_info(name)
    if isinstance(info, tuple) and len(info) >= 2:
        return str(info[0]), int(info[1])
    return None


def asgi_scope(request: FrontRequest, path: str, raw_path: bytes, query: bytes) -> dict[str, Any]:
    conn = request.conn
    return {
        "type": "http",
        "asgi": _ASGI,
        "http_version": request.http_version,
        "server": _address(conn.transport, "sockname"),
        "client": _address(conn.transport, "peername"),
        "scheme": "http",
        "method": request.method.decode("ascii"),
        "root_path": "",
        "path": path,
        "raw_path": raw_path,
        "query_string": query,
        "headers": request.headers,
        "state": conn.app_state.copy(),
        DISCONNECT_HOOK: None,
    }


async def run_asgi(app: Any, request: FrontRequest) -> None:
    """Run the ASGI app on one request; an app's failure is answered as uvicorn does."""
    body_given = False

    async def receive() -> Message:
        nonlocal body_given
        if not body_given and not request.disconnected:
            body_given = True
            return {"type": "http.request", "body": request.body, "more_body": False}
        await request.ended()
        return {"type": "http.disconnect"}

    async def send(message: Message) -> None:
        if request.disconnected:
            return
        kind = message["type"]
        if kind == "http.response.start":
            request.begin(message["status"], list(message.get("headers", ())))
        elif kind == "http.response.body":
            more = message.get("more_body", False)
            request.part(message.get("body", b""), more)
            if more and request.conn.write_paused:
                await request.drain()
        else:
            raise RuntimeError(f"Unexpected ASGI message {kind!r}.")

    try:
        await app(request.scope, receive, send)
    except BaseException as exc:
        log.error("Exception in ASGI application", exc_info=exc)
        if not request.started and not request.disconnected:
            _internal_error(request)
        elif not request.complete:
            request.conn.transport.close()
        if not isinstance(exc, Exception):
            raise
        return
    if request.disconnected or request.complete:
        return
    log.error("The ASGI app returned without completing its response.")
    if not request.started:
        _internal_error(request)
    else:
        request.conn.transport.close()


def _internal_error(request: FrontRequest) -> None:
    request.keep_alive = False
    request.begin(
        500,
        [
            (b"content-type", b"text/plain; charset=utf-8"),
            (b"content-length", b"%d" % len(_INTERNAL_ERROR)),
        ],
    )
    request.part(_INTERNAL_ERROR, more=False)
