"""Real OTLP receivers on loopback: a gRPC TraceService and MetricsService (grpcio with the
services opentelemetry-proto generates), and an HTTP/protobuf one (aiohttp). Each keeps
every request's bytes and its parsed messages."""

from __future__ import annotations

import asyncio
import threading
from collections import deque
from concurrent import futures
from typing import Any

import grpc
from aiohttp import web
from google.protobuf import any_pb2, duration_pb2
from google.rpc import error_details_pb2, status_pb2
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2, metrics_service_pb2_grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.proto.trace.v1 import trace_pb2
from opentelemetry.proto.trace.v1.trace_pb2 import Span

# xds-protos ships an older OTLP (before `scope_spans`) at the same module paths; whichever
# package installed last wins (scripts/test puts opentelemetry-proto's back)
assert "scope_spans" in trace_pb2.ResourceSpans.DESCRIPTOR.fields_by_name, (
    "opentelemetry.proto is an old copy (xds-protos installed after opentelemetry-proto?): "
    "pip install --force-reinstall --no-deps opentelemetry-proto"
)

ExportTraceServiceRequest = trace_service_pb2.ExportTraceServiceRequest
ExportMetricsServiceRequest = metrics_service_pb2.ExportMetricsServiceRequest


class Received:
    """What a receiver was sent, whatever the wire."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.raw: list[bytes] = []  # every request body, traces and metrics
        self.traces: list[Any] = []
        self.metrics: list[Any] = []
        self.headers: list[dict[str, str]] = []
        self.refused = 0  # exports answered with a failure (see each receiver's `failures`)

    def spans(self, trace_id: str | None = None) -> list[Span]:
        with self.lock:
            found = [
                span
                for request in self.traces
                for rs in request.resource_spans
                for ss in rs.scope_spans
                for span in ss.spans
            ]
        if trace_id is not None:
            found = [s for s in found if s.trace_id.hex() == trace_id]
        return found

    def metric_names(self) -> set[str]:
        with self.lock:
            return {
                m.name
                for request in self.metrics
                for rm in request.resource_metrics
                for sm in rm.scope_metrics
                for m in sm.metrics
            }

    def resources(self) -> list[dict[str, Any]]:
        with self.lock:
            return [
                attributes(rs.resource.attributes)
                for request in self.traces
                for rs in request.resource_spans
            ]


def value_of(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [value_of(v) for v in value.array_value.values]
    return getattr(value, kind) if kind else None


def attributes(items: Any) -> dict[str, Any]:
    return {kv.key: value_of(kv.value) for kv in items}


def _refuse(receiver: GrpcReceiver, context: grpc.ServicerContext) -> None:
    """Abort with the next queued failure, if any: its code, and a `RetryInfo` delay."""
    with receiver.lock:
        if not receiver.failures:
            return
        code, after = receiver.failures.popleft()
        receiver.refused += 1
    if after is not None:
        retry = error_details_pb2.RetryInfo(retry_delay=duration_pb2.Duration(nanos=after * 10**6))
        detail = any_pb2.Any()
        detail.Pack(retry)
        status = status_pb2.Status(code=code.value[0], message="busy", details=[detail])
        context.set_trailing_metadata([("grpc-status-details-bin", status.SerializeToString())])
    context.abort(code, "busy")


class _Traces(trace_service_pb2_grpc.TraceServiceServicer):
    def __init__(self, received: GrpcReceiver) -> None:
        self.received = received

    def Export(self, request: Any, context: grpc.ServicerContext) -> Any:
        _refuse(self.received, context)
        with self.received.lock:
            self.received.raw.append(request.SerializeToString())
            self.received.traces.append(request)
            self.received.headers.append(dict(context.invocation_metadata()))
        return trace_service_pb2.ExportTraceServiceResponse()


class _Metrics(metrics_service_pb2_grpc.MetricsServiceServicer):
    def __init__(self, received: GrpcReceiver) -> None:
        self.received = received

    def Export(self, request: Any, context: grpc.ServicerContext) -> Any:
        with self.received.lock:
            self.received.raw.append(request.SerializeToString())
            self.received.metrics.append(request)
            self.received.headers.append(dict(context.invocation_metadata()))
        return metrics_service_pb2.ExportMetricsServiceResponse()


class GrpcReceiver(Received):
    """An OTLP/gRPC collector on 127.0.0.1 (`endpoint`: `http://127.0.0.1:<port>`). Trace
    exports are first answered with the `failures` queued: (code, RetryInfo delay in ms or
    None), one each."""

    def __init__(self) -> None:
        super().__init__()
        self.failures: deque[tuple[grpc.StatusCode, int | None]] = deque()
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        trace_service_pb2_grpc.add_TraceServiceServicer_to_server(_Traces(self), self.server)
        metrics_service_pb2_grpc.add_MetricsServiceServicer_to_server(_Metrics(self), self.server)
        port = self.server.add_insecure_port("127.0.0.1:0")
        self.endpoint = f"http://127.0.0.1:{port}"
        self.server.start()

    def close(self) -> None:
        self.server.stop(0)


class HttpReceiver(Received):
    """An OTLP/HTTP collector with protobuf bodies (`/v1/traces`, `/v1/metrics`) on `port`
    (0: any); `hang` makes it read each request and never answer (a collector that is alive
    but stuck). Trace exports are first answered with the `failures` queued: (status,
    `Retry-After` or None), one each; `failing` answers every one with it."""

    def __init__(self, hang: bool = False, port: int = 0) -> None:
        super().__init__()
        self.hang = hang
        self.port = port
        self.failures: deque[tuple[int, str | None]] = deque()
        self.failing: tuple[int, str | None] | None = None
        self.endpoint = ""
        self._runner: web.AppRunner | None = None
        self._released: asyncio.Event | None = None

    async def start(self) -> None:
        self._released = asyncio.Event()
        app = web.Application()
        app.router.add_post("/v1/traces", self._traces)
        app.router.add_post("/v1/metrics", self._metrics)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", self.port)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.endpoint = f"http://127.0.0.1:{port}"

    async def stop(self) -> None:
        if self._released is not None:
            self._released.set()  # a stuck answer goes out now (the exporter gave up on it)
        if self._runner is not None:
            await self._runner.cleanup()

    async def _take(self, request: web.Request, parse: Any, into: list[Any]) -> None:
        body = await request.read()
        assert request.content_type == "application/x-protobuf"
        with self.lock:
            self.raw.append(body)
            into.append(parse(body))
            self.headers.append(dict(request.headers))
        if self.hang and self._released is not None:
            await self._released.wait()

    async def _traces(self, request: web.Request) -> web.Response:
        with self.lock:
            failure = self.failures.popleft() if self.failures else self.failing
            if failure is not None:
                self.refused += 1
        if failure is not None:
            await request.read()
            status, after = failure
            headers = {"Retry-After": after} if after is not None else {}
            return web.Response(status=status, headers=headers, text="busy")
        await self._take(request, ExportTraceServiceRequest.FromString, self.traces)
        body = trace_service_pb2.ExportTraceServiceResponse().SerializeToString()
        return web.Response(body=body, content_type="application/x-protobuf")

    async def _metrics(self, request: web.Request) -> web.Response:
        await self._take(request, ExportMetricsServiceRequest.FromString, self.metrics)
        body = metrics_service_pb2.ExportMetricsServiceResponse().SerializeToString()
        return web.Response(body=body, content_type="application/x-protobuf")
