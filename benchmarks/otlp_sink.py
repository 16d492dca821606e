"""A collector for the tracing benchmark: takes OTLP/HTTP protobuf exports and answers each
at once with an empty `Export*ServiceResponse` (an empty protobuf message is zero bytes).
`GET /_stats` says how many exports and bytes it took."""

from __future__ import annotations

import argparse

from aiohttp import web

_stats = {"exports": 0, "bytes": 0}


async def export(request: web.Request) -> web.Response:
    body = await request.read()
    _stats["exports"] += 1
    _stats["bytes"] += len(body)
    return web.Response(body=b"", content_type="application/x-protobuf")


async def stats(_request: web.Request) -> web.Response:
    return web.json_response(_stats)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    port = parser.parse_args().port
    app = web.Application()
    app.router.add_post("/v1/traces", export)
    app.router.add_post("/v1/metrics", export)
    app.router.add_get("/_stats", stats)
    web.run_app(app, host="127.0.0.1", port=port, print=None)


if __name__ == "__main__":
    main()
