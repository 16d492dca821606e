"""A collector for the tracing benchmark: takes OTLP exports and answers each at once with
an empty `Export*ServiceResponse` (an empty protobuf message is zero bytes): OTLP/HTTP
protobuf on `--port`, and OTLP/gRPC on `--grpc-port` when one is given (grpcio, the
`Export` methods of TraceService and MetricsService, the bytes taken as they come).
`GET /_stats` (on `--port`) says how many exports and bytes it took."""

from __future__ import annotations

import argparse
from typing import Any

from aiohttp import web

_stats = {"exports": 0, "bytes": 0}
_GRPC_SERVICES = (
    "opentelemetry.proto.collector.trace.v1.TraceService",
    "opentelemetry.proto.collector.metrics.v1.MetricsService",
)


def _took(body: bytes) -> None:
    _stats["exports"] += 1
    _stats["bytes"] += len(body)


async def export(request: web.Request) -> web.Response:
    _took(await request.read())
    return web.Response(body=b"", content_type="application/x-protobuf")


async def stats(_request: web.Request) -> web.Response:
    return web.json_response(_stats)


def _grpc_server(port: int) -> Any:
    """The gRPC collector, on its own threads (grpcio's); the counts are plain ints
    updated under the GIL."""
    from concurrent import futures

    import grpc

    def handle(body: bytes, _context: Any) -> bytes:
        _took(body)
        return b""

    method = grpc.unary_unary_rpc_method_handler(handle)  # no (de)serializer: bytes
    handlers = [
        grpc.method_handlers_generic_handler(service, {"Export": method})
        for service in _GRPC_SERVICES
    ]
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2), handlers=handlers)
    server.add_insecure_port(f"127.0.0.1:{port}")
    server.start()
    return server


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--grpc-port", type=int, default=0)
    args = parser.parse_args()
    grpc_server = _grpc_server(args.grpc_port) if args.grpc_port else None
    app = web.Application()
    app.router.add_post("/v1/traces", export)
    app.router.add_post("/v1/metrics", export)
    app.router.add_get("/_stats", stats)
    try:
        web.run_app(app, host="127.0.0.1", port=args.port, print=None)
    finally:
        if grpc_server is not None:
            grpc_server.stop(0)


if __name__ == "__main__":
    main()
