"""The telemetry sink: sampled request records become spans, sent with the GenAI metrics to
an OTLP collector by a thread of their own.

A record's spans are encoded in `take` (the loop turn after the request ended, like every
sink's share); `flush` hands the spans gathered to the export thread once per export
interval, as one request. The thread only sends (gRPC and socket I/O release the GIL). The
spans waiting are bounded (`max_queue_spans`): past it new spans are dropped and counted,
never waited for, so a collector that is down or slow costs no request anything. A batch
the collector may take later is sent again after a backoff (`retry.py`), a bounded number
of times; it stays counted in the queue meanwhile, so retries never let it grow past its
bound.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable

from prometheus_client import Gauge

from fleetgate.fleet import Fleet
from fleetgate.record.metrics import Metrics
from fleetgate.record.recorder import RequestRecord
from fleetgate.telemetry import otlp
from fleetgate.telemetry.metrics import genai_metrics
from fleetgate.telemetry.retry import delay
from fleetgate.telemetry.settings import TelemetrySettings
from fleetgate.telemetry.spans import SpanBuilder, endpoint_spans
from fleetgate.telemetry.transport import METRICS, TRACES, ExportFailed, Transport, transport_for
from fleetgate.trace_context import TraceContext

log = logging.getLogger("fleetgate.telemetry")

SCOPE_NAME = "fleetgate"
SHUTDOWN_SECONDS = 3.0  # how long a shutdown waits for the last export
MAX_BATCH_SPANS = 512  # spans per export request (OTEL_BSP_MAX_EXPORT_BATCH_SIZE's default)


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("fleetgate")
    except PackageNotFoundError:
        return "0"


class TelemetrySink:
    """A `RecordSink` (record/recorder.py) that exports spans and GenAI metrics."""

    def __init__(
        self,
        settings: TelemetrySettings,
        fleet: Callable[[], Fleet],
        metrics: Metrics,
        transport: Transport | None = None,
    ) -> None:
        self.settings = settings
        self.metrics = metrics
        self.builder = SpanBuilder(fleet)
        self._transport = transport
        version = _version()
        self._resource = otlp.resource(
            (
                ("service.name", settings.service_name),
                ("service.version", version),
                ("telemetry.sdk.name", "fleetgate"),
                ("telemetry.sdk.language", "python"),
                *settings.resource,
            )
        )
        self._scope = otlp.scope(SCOPE_NAME, version)
        self._spans: list[bytes] = []  # encoded since the last hand-over
        self._queued = 0  # spans handed over, not yet sent
        self._batches: deque[tuple[str, bytes, int]] = deque()  # (signal, request, spans)
        self._ready = threading.Condition()
        self._last_batch = time.monotonic()
        self._started_ns = time.time_ns()  # the metrics' start (cumulative since)
        self._last_metrics = time.monotonic()
        self._counted = False  # records taken since the last figures were sent
        self._thread: threading.Thread | None = None
        self._stopping = False
        self.dropped = 0  # spans dropped: the queue was full
        self.failed = 0  # spans the collector did not take
        self.exported = 0  # spans the collector took
        self.retries = 0  # batches sent again (the collector was down or busy)
        registry = metrics.registry
        Gauge(
            "fleetgate_spans_dropped",
            "Spans dropped before export: the export queue was full.",
            registry=registry,
        ).set_function(lambda: self.dropped)
        Gauge(
            "fleetgate_spans_failed",
            "Spans the collector did not take (unreachable, slow, or refused).",
            registry=registry,
        ).set_function(lambda: self.failed)
        Gauge(
            "fleetgate_spans_exported", "Spans the collector took.", registry=registry
        ).set_function(lambda: self.exported)
        Gauge(
            "fleetgate_otlp_retries",
            "OTLP exports sent again: the collector was down or busy.",
            registry=registry,
        ).set_function(lambda: self.retries)

    # ---- the serving loop's side ------------------------------------------------------
    @property
    def waiting(self) -> bool:
        """Spans gathered, or figures not yet sent: flush even while no request comes."""
        return bool(self._spans) or self._counted

    def take(self, record: RequestRecord) -> None:
        self._counted = True  # the metrics sink counted it: the next figures differ
        if record.trace is None:  # unsampled, or tracing was off
            return
        spans = self.builder.spans(record)
        record.trace = None  # its spans are made: the ids, times and knobs are let go
        self._keep(spans)

    def take_endpoint(
        self,
        trace: TraceContext,
        status: int,
        error: str | None,
        latency: float,
        attrs: tuple[tuple[str, object], ...],
    ) -> None:
        """The spans of a request to a non-proxied endpoint (`endpoint_spans`), sampled."""
        if not trace.sampled:
            return
        self._keep(endpoint_spans(trace, status, error, latency, attrs))

    def _keep(self, spans: list[bytes]) -> None:
        if self._queued + len(self._spans) + len(spans) > self.settings.max_queue_spans:
            self.dropped += len(spans)
            return
        self._spans.extend(spans)

    async def flush(self) -> None:
        now = time.monotonic()
        spans = self._spans
        if spans and (
            len(spans) >= MAX_BATCH_SPANS or now - self._last_batch >= self.settings.export_interval
        ):
            self._spans = []
            self._last_batch = now
            for at in range(0, len(spans), MAX_BATCH_SPANS):
                chunk = spans[at : at + MAX_BATCH_SPANS]
                body = otlp.trace_request(self._resource, self._scope, chunk)
                self._hand_over(TRACES, body, len(chunk))
        if self._counted and self._metrics_due():
            self._last_metrics = now
            self._counted = False
            self._hand_over(METRICS, self._metrics_request(), 0)

    def _metrics_due(self) -> bool:
        return time.monotonic() - self._last_metrics >= self.settings.metrics_interval

    def _metrics_request(self) -> bytes:
        points = genai_metrics(self.metrics, self._started_ns, time.time_ns())
        return otlp.metrics_request(self._resource, self._scope, points)

    def _hand_over(self, signal: str, body: bytes, spans: int) -> None:
        with self._ready:
            if signal == METRICS and any(b[0] == METRICS for b in self._batches):
                return  # the last figures are still waiting: cumulative, these replace none
            self._batches.append((signal, body, spans))
            self._queued += spans
            self._ready.notify()

    # ---- the export thread ----------------------------------------------------------
    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="fleetgate-otlp", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        transport = self._transport
        try:
            if transport is None:
                transport = self._transport = transport_for(self.settings)
        except Exception:
            log.exception("telemetry: the OTLP exporter could not start; nothing is exported")
            return
        while True:
            with self._ready:
                while not self._batches and not self._stopping:
                    self._ready.wait()
                if not self._batches:
                    break
                signal, body, spans = self._batches[0]
            self._send(transport, signal, body, spans)
            with self._ready:
                self._batches.popleft()
                self._queued -= spans
                self._ready.notify_all()
        transport.close()

    def _send(self, transport: Transport, signal: str, body: bytes, spans: int) -> None:
        """One batch, sent again while the collector may take it later, `retries` times at
        most; a stop gives up the waits (the last batches get one send each)."""
        retry = 0
        while True:
            try:
                transport.send(signal, body)
            except ExportFailed as exc:
                settings = self.settings
                if exc.retryable and retry < settings.retries:
                    retry += 1
                    if self._pause(delay(retry, settings.retry_backoff, exc.after)):
                        self.retries += 1
                        continue
                self.failed += spans
                log.warning("telemetry: %s export to %s failed: %s", signal, settings.endpoint, exc)
            except Exception:
                self.failed += spans
                log.exception("telemetry: %s export failed", signal)
            else:
                self.exported += spans
            return

    def _pause(self, seconds: float) -> bool:
        """Wait before a send again; False when the sink stops meanwhile."""
        with self._ready:
            return not self._ready.wait_for(lambda: self._stopping, seconds)

    async def stop(self) -> None:
        """Send what is gathered (the last spans and figures), then end the thread: waits
        for it at most `SHUTDOWN_SECONDS` (a stuck collector must not hold a shutdown up)."""
        import asyncio

        self._last_batch = 0.0
        self._last_metrics = 0.0
        await self.flush()
        with self._ready:
            self._stopping = True
            self._ready.notify_all()
        if self._thread is not None:
            await asyncio.to_thread(self._thread.join, SHUTDOWN_SECONDS)

    def sent_all(self) -> bool:
        """Whether every batch handed over has been sent (or has failed)."""
        with self._ready:
            return not self._batches
