"""Prometheus metrics, computed from request records off the hot path.

The metrics sink consumes the same batches as the request log, so the hot path pays for
one deque append per request and nothing per metric. Labels carry ids and numbers only,
and only ids the fleet defines: a name a client sent that the fleet does not know is
`_unknown`, so no client can grow the label sets (and a scrape) without bound.
"""

from __future__ import annotations

from collections import Counter as Counter_
from collections import defaultdict
from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest

from fleetgate.context.truncation import CUT_SHORT_NOTE, TRUNCATION_NOTE
from fleetgate.fleet import Fleet
from fleetgate.record.histograms import BatchHistogram
from fleetgate.record.recorder import Recorder, RequestRecord
from fleetgate.routing.auto import AUTO_MODEL

UNKNOWN = "_unknown"


def model_label(fleet: Fleet | None, name: str) -> str:
    """The metric label of a requested name: the fleet's own spelling of a model,
    deployment, virtual model or tier it names (`auto` when configured), else `_unknown`."""
    if fleet is None:
        return UNKNOWN
    if name in fleet.models or name in fleet.deployments or name in fleet.tiers:
        return name
    virtual = fleet.virtual_models.get(name.lower())
    if virtual is not None:
        return virtual.name
    auto = fleet.config.auto
    if name == AUTO_MODEL and auto is not None and auto.enabled:
        return name
    return UNKNOWN


_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)
_OVERHEAD_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.05)


class Metrics:
    """Every metric fleetgate exports, in one registry."""

    def __init__(self, fleet: Callable[[], Fleet] | None = None) -> None:
        self.fleet = fleet  # the live fleet, whose names are the only label values
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.requests = Counter(
            "fleetgate_requests",
            "Requests answered, by outcome.",
            ["model", "endpoint", "status", "error_code", "context_tier"],
            registry=r,
        )
        self.attempts = Counter(
            "fleetgate_attempts",
            "Upstream attempts, by deployment and outcome.",
            ["deployment", "provider", "status", "error_class", "provider_ctx"],
            registry=r,
        )
        self.fallbacks = Counter(
            "fleetgate_fallbacks",
            "Requests answered after at least one failed attempt.",
            ["model"],
            registry=r,
        )
        self.latency = BatchHistogram(
            "fleetgate_request_seconds",
            "Whole request latency seen by the gateway.",
            ["model"],
            _LATENCY_BUCKETS,
            r,
        )
        self.overhead = BatchHistogram(
            "fleetgate_overhead_seconds",
            "Time spent in the gateway itself (upstream excluded).",
            [],
            _OVERHEAD_BUCKETS,
            r,
        )
        self.ttft = BatchHistogram(
            "fleetgate_attempt_ttft_seconds",
            "Time to first byte of successful attempts.",
            ["deployment"],
            _LATENCY_BUCKETS,
            r,
        )
        self.truncations = Counter(
            "fleetgate_truncation_suspected",
            "Answers whose reported prompt tokens were below the gateway's lower bound.",
            ["deployment"],
            registry=r,
        )
        self.cut_short = Counter(
            "fleetgate_cut_short",
            "Answers a context window cut short (a length stop at the window).",
            ["deployment"],
            registry=r,
        )
        self.records_dropped = Gauge(
            "fleetgate_records_dropped",
            "Request records dropped because the buffer was full.",
            registry=r,
        )

    async def write(self, records: list[RequestRecord]) -> None:
        # Tally per label set first: one prometheus call per distinct label set and batch
        # instead of one per record keeps the flush cheap at thousands of requests/s.
        requests: Counter_[tuple[str, ...]] = Counter_()
        attempts: Counter_[tuple[str, ...]] = Counter_()
        fallbacks: Counter_[str] = Counter_()
        latency: dict[str, list[float]] = defaultdict(list)
        ttft: dict[str, list[float]] = defaultdict(list)
        overhead: list[float] = []
        fleet = self.fleet() if self.fleet is not None else None
        labels_of: dict[str, str] = {}
        for rec in records:
            model = labels_of.get(rec.requested_model)
            if model is None:
                model = labels_of[rec.requested_model] = model_label(fleet, rec.requested_model)
            tier = str(rec.notes.get("context_tier", "default"))
            requests[(model, rec.endpoint, str(rec.status), rec.error_code or "", tier)] += 1
            latency[model].append(rec.latency)
            overhead.append(max(rec.overhead, 0.0))
            if rec.error_code is None and len(rec.attempts) > 1:
                fallbacks[model] += 1
            if TRUNCATION_NOTE in rec.notes and rec.deployment_id:
                # rare (a suspected silent truncation): counted directly
                self.truncations.labels(rec.deployment_id).inc()
            if CUT_SHORT_NOTE in rec.notes and rec.deployment_id:  # rare too
                self.cut_short.labels(rec.deployment_id).inc()
            ctx = rec.notes.get("provider_ctx") or {}
            for a in rec.attempts:
                window = ctx.get(a.deployment_id, "unbounded") if isinstance(ctx, dict) else ""
                attempts[
                    (
                        a.deployment_id,
                        a.provider_id,
                        str(a.status or ""),
                        a.error_class or "",
                        str(window),
                    )
                ] += 1
                if a.ok and a.ttft is not None:
                    ttft[a.deployment_id].append(a.ttft)
        for labels, n in requests.items():
            self.requests.labels(*labels).inc(n)
        for labels, n in attempts.items():
            self.attempts.labels(*labels).inc(n)
        for model, n in fallbacks.items():
            self.fallbacks.labels(model).inc(n)
        for model, values in latency.items():
            self.latency.observe((model,), values)
        for dep, values in ttft.items():
            self.ttft.observe((dep,), values)
        self.overhead.observe((), overhead)

    def render(self, recorder: Recorder) -> bytes:
        self.records_dropped.set(recorder.dropped)
        return generate_latest(self.registry)
