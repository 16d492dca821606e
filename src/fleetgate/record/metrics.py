"""Prometheus metrics, computed from request records off the hot path.

The metrics sink consumes the same batches as the request log, so the hot path pays for
one deque append per request and nothing per metric. Labels carry ids and numbers only.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from fleetgate.record.recorder import Recorder, RequestRecord

_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)
_OVERHEAD_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.05)


class Metrics:
    """Every metric fleetgate exports, in one registry."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.requests = Counter(
            "fleetgate_requests", "Requests answered, by outcome.",
            ["model", "endpoint", "status", "error_code", "context_tier"], registry=r,
        )
        self.attempts = Counter(
            "fleetgate_attempts", "Upstream attempts, by deployment and outcome.",
            ["deployment", "provider", "status", "error_class", "provider_ctx"], registry=r,
        )
        self.fallbacks = Counter(
            "fleetgate_fallbacks", "Requests answered after at least one failed attempt.",
            ["model"], registry=r,
        )
        self.latency = Histogram(
            "fleetgate_request_seconds", "Whole request latency seen by the gateway.",
            ["model"], buckets=_LATENCY_BUCKETS, registry=r,
        )
        self.overhead = Histogram(
            "fleetgate_overhead_seconds", "Time spent in the gateway itself (upstream excluded).",
            buckets=_OVERHEAD_BUCKETS, registry=r,
        )
        self.ttft = Histogram(
            "fleetgate_attempt_ttft_seconds", "Time to first byte of successful attempts.",
            ["deployment"], buckets=_LATENCY_BUCKETS, registry=r,
        )
        self.truncations = Counter(
            "fleetgate_truncation_suspected",
            "Answers whose reported prompt tokens were below the gateway's lower bound.",
            ["deployment"], registry=r,
        )
        self.records_dropped = Gauge(
            "fleetgate_records_dropped", "Request records dropped because the buffer was full.",
            registry=r,
        )

    async def write(self, records: list[RequestRecord]) -> None:
        for rec in records:
            tier = str(rec.notes.get("context_tier", "default"))
            self.requests.labels(
                rec.requested_model, rec.endpoint, str(rec.status), rec.error_code or "",
                tier,
            ).inc()
            self.latency.labels(rec.requested_model).observe(rec.latency)
            self.overhead.observe(max(rec.overhead, 0.0))
            if rec.error_code is None and len(rec.attempts) > 1:
                self.fallbacks.labels(rec.requested_model).inc()
            if "truncation_suspected" in rec.notes and rec.deployment_id:
                self.truncations.labels(rec.deployment_id).inc()
            ctx = rec.notes.get("provider_ctx") or {}
            for a in rec.attempts:
                window = ctx.get(a.deployment_id, "unbounded") if isinstance(ctx, dict) else ""
                self.attempts.labels(
                    a.deployment_id, a.provider_id, str(a.status or ""), a.error_class or "",
                    str(window),
                ).inc()
                if a.ok and a.ttft is not None:
                    self.ttft.labels(a.deployment_id).observe(a.ttft)

    def render(self, recorder: Recorder) -> bytes:
        self.records_dropped.set(recorder.dropped)
        return generate_latest(self.registry)
