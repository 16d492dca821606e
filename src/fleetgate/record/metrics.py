"""Prometheus metrics, computed from request records off the hot path.

The metrics sink takes the same records as the request log, after each request ended: it
tallies each one, and hands the tallies to prometheus_client every flush. Labels carry ids
and numbers only, and only ids the fleet defines: a name a client sent that the fleet does
not know is `_unknown`, so no client can grow the label sets (and a scrape) without bound.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter as Counter_
from collections import defaultdict
from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest

from fleetgate.context.truncation import CUT_SHORT_NOTE, TRUNCATION_NOTE
from fleetgate.execute.outcome import CUT_SHORT, Attempt
from fleetgate.fleet import Fleet
from fleetgate.record.genai import GATEWAY_WIRE, operation_name, provider_name
from fleetgate.record.histograms import BatchHistogram
from fleetgate.record.recorder import BatchSink, Recorder, RequestRecord
from fleetgate.routing.auto import AUTO_MODEL
from fleetgate.state.runtime import RuntimeState

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


# the GenAI semantic conventions' advised buckets (docs/telemetry.md names the version)
GENAI_DURATION_BUCKETS = (
    0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92,
)  # fmt: skip
GENAI_TOKEN_BUCKETS = (
    1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864,
)  # fmt: skip
# the attributes of every GenAI metric, as Prometheus labels (dots become underscores)
GENAI_LABELS = (
    "gen_ai_operation_name",
    "gen_ai_provider_name",
    "gen_ai_request_model",
    "fleetgate_deployment",
    "error_type",
)

_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)
_OVERHEAD_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.05)
_WAIT_BUCKETS = (0.001, 0.005, 0.025, 0.1, 0.5, 1, 5, 30, 120)
# histogram values a flush observes in one loop turn at most: about 25 µs of work
OBSERVED_PER_TURN = 256


class _Tally:
    """What the records taken since the last flush add to the metrics."""

    __slots__ = (
        "attempts",
        "fallbacks",
        "genai_duration",
        "genai_first_chunk",
        "genai_labels",
        "genai_tokens",
        "latency",
        "models",
        "overhead",
        "pool_wait",
        "requests",
        "tokens",
        "ttft",
    )

    def __init__(self) -> None:
        self.models: dict[str, str] = {}  # requested name -> its label
        # label values as they come (status ints, ...): made strings at the flush
        self.requests: Counter_[tuple[object, ...]] = Counter_()
        self.attempts: Counter_[tuple[object, ...]] = Counter_()
        self.fallbacks: Counter_[str] = Counter_()
        self.latency: defaultdict[str, list[float]] = defaultdict(list)
        self.ttft: defaultdict[str, list[float]] = defaultdict(list)
        self.overhead: list[float] = []
        self.pool_wait: defaultdict[str, list[float]] = defaultdict(list)
        self.genai_duration: defaultdict[tuple[str, ...], list[float]] = defaultdict(list)
        self.genai_tokens: defaultdict[tuple[str, ...], list[float]] = defaultdict(list)
        self.genai_first_chunk: defaultdict[tuple[str, ...], list[float]] = defaultdict(list)
        self.tokens: Counter_[tuple[str, str]] = Counter_()  # (deployment, direction)
        # an attempt's (deployment, model, wire, endpoint, error) -> its GenAI labels
        self.genai_labels: dict[tuple[str | None, ...], tuple[str, ...]] = {}


class Metrics(BatchSink):
    """Every metric fleetgate exports, in one registry."""

    def __init__(
        self, fleet: Callable[[], Fleet] | None = None, state: RuntimeState | None = None
    ) -> None:
        self.fleet = fleet  # the live fleet, whose names are the only label values
        self.state = state  # the deployments' health, read at each scrape
        self._tally = _Tally()
        self._flushing = asyncio.Lock()
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
        self.pool_wait = BatchHistogram(
            "fleetgate_pool_wait_seconds",
            "Time an upstream attempt waited in the gateway for its provider's worker slot "
            "(concurrency_limit) and pooled connection (max_concurrency); 0 when it did not.",
            ["provider"],
            _WAIT_BUCKETS,
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
        # the GenAI metrics, under the names an OpenTelemetry Prometheus exporter gives them
        # (the OTLP exporter sends these same series: telemetry/metrics.py)
        self.genai_duration = BatchHistogram(
            "gen_ai_client_operation_duration_seconds",
            "GenAI operation duration: each upstream attempt (gen_ai.client.operation.duration).",
            GENAI_LABELS,
            GENAI_DURATION_BUCKETS,
            r,
        )
        self.genai_tokens = BatchHistogram(
            "gen_ai_client_token_usage",
            "Input and output tokens of each upstream attempt (gen_ai.client.token.usage).",
            (*GENAI_LABELS, "gen_ai_token_type"),
            GENAI_TOKEN_BUCKETS,
            r,
        )
        self.genai_first_chunk = BatchHistogram(
            "gen_ai_client_operation_time_to_first_chunk_seconds",
            "Time to the first chunk of each streamed attempt "
            "(gen_ai.client.operation.time_to_first_chunk).",
            GENAI_LABELS,
            GENAI_DURATION_BUCKETS,
            r,
        )
        self.continuations = Counter(
            "fleetgate_continuations",
            "Answers cut mid-way that a sibling continued (reason: interrupted | window).",
            ["reason"],
            registry=r,
        )
        self.tokens = Counter(
            "fleetgate_tokens",
            "Tokens the upstreams reported, by deployment and direction (input, output).",
            ["deployment", "direction"],
            registry=r,
        )
        self.spend = Counter(
            "fleetgate_spend",
            "What the reported tokens cost at the deployment's configured prices (the "
            "prices' unit), for deployments with a price.",
            ["deployment"],
            registry=r,
        )
        self.up = Gauge(
            "fleetgate_deployment_up",
            "1 when the deployment takes requests; 0 while it is disabled, cooling down, its "
            "circuit is open or its credentials are missing.",
            ["deployment"],
            registry=r,
        )
        self.records_dropped = Gauge(
            "fleetgate_records_dropped",
            "Request records a sink failed to take (a bug, logged).",
            registry=r,
        )

    def take(self, record: RequestRecord) -> None:
        """Tally the record; `flush` hands the tallies to prometheus_client, one call per
        distinct label set (one per record would cost ten times as much). Label values are
        made strings there, once per label set."""
        tally = self._tally
        model = tally.models.get(record.requested_model)
        if model is None:
            fleet = self.fleet() if self.fleet is not None else None
            model = tally.models[record.requested_model] = model_label(
                fleet, record.requested_model
            )
        notes = record.notes
        error_code = record.error_code
        attempts = record.attempts
        tier = notes.get("context_tier", "default")
        tally.requests[(model, record.endpoint, record.status, error_code or "", tier)] += 1
        tally.latency[model].append(record.latency)
        tally.overhead.append(max(record.overhead, 0.0))
        if not attempts:
            return
        if error_code is None and len(attempts) > 1:
            tally.fallbacks[model] += 1
        if record.deployment_id and (TRUNCATION_NOTE in notes or CUT_SHORT_NOTE in notes):
            # rare (a suspected silent truncation, a window's cut): counted directly
            if TRUNCATION_NOTE in notes:
                self.truncations.labels(record.deployment_id).inc()
            if CUT_SHORT_NOTE in notes:
                self.cut_short.labels(record.deployment_id).inc()
        ctx = notes.get("provider_ctx") or {}
        windows = ctx if isinstance(ctx, dict) else None
        endpoint, stream = record.endpoint, record.stream
        genai_labels = tally.genai_labels
        for a in attempts:
            dep_id = a.deployment_id
            error = a.error_class
            window = windows.get(dep_id, "unbounded") if windows is not None else ""
            tally.attempts[(dep_id, a.provider_id, a.status, error or "", window)] += 1
            if error == CUT_SHORT:  # a cut answer set aside for a larger window
                self.cut_short.labels(dep_id).inc()
            if a.continuation is not None:  # rare: counted directly
                self.continuations.labels(a.continuation).inc()
            ttft = a.ttft
            if error is None and ttft is not None:
                tally.ttft[dep_id].append(ttft)
            tally.pool_wait[a.provider_id].append(a.pool_wait)
            prompt, completion = a.prompt_tokens, a.completion_tokens
            if prompt:
                tally.tokens[(dep_id, "input")] += prompt
            if completion:
                tally.tokens[(dep_id, "output")] += completion
            if a.wire == GATEWAY_WIRE:  # a translation answered by itself: no GenAI call
                continue
            # the GenAI attributes of an attempt, worked out once per flush for each
            # deployment, model, wire, endpoint and error
            key = (dep_id, a.upstream_model, a.wire, endpoint, error)
            labels = genai_labels.get(key)
            if labels is None:
                labels = genai_labels[key] = self._genai_labels(a, endpoint)
            tally.genai_duration[labels].append(a.latency)
            if prompt is not None:
                tally.genai_tokens[(*labels, "input")].append(prompt)
            if completion is not None:
                tally.genai_tokens[(*labels, "output")].append(completion)
            if stream and error is None and ttft is not None:
                tally.genai_first_chunk[labels].append(ttft)

    def _genai_labels(self, a: Attempt, endpoint: str) -> tuple[str, ...]:
        fleet = self.fleet() if self.fleet is not None else None
        dep = fleet.deployments.get(a.deployment_id) if fleet is not None else None
        return (
            operation_name(a, endpoint),
            provider_name(dep.provider.kind if dep is not None else None),
            a.upstream_model,
            a.deployment_id,
            a.error_class or "",
        )

    async def flush(self) -> None:
        """Hands the tallies to the metrics: the counters at once, the histograms' values
        a loop turn's share at a time (`OBSERVED_PER_TURN`), so that a flush of a busy
        interval (hundreds of records, each in several histograms) does not hold the loop
        for a fraction of a millisecond at once: every request arriving meanwhile would
        wait for it. One flush at a time: a scrape's flush waits for the one under way, so
        the scrape shows every record taken before it. Cancelled midway (the recorder
        stopping), it hands on the rest at once: a swapped-out tally is never lost."""
        async with self._flushing:
            tally, self._tally = self._tally, _Tally()
            self._count(tally)
            steps = self._observations(tally)
            try:
                for _ in steps:
                    await asyncio.sleep(0)
            except asyncio.CancelledError:
                for _ in steps:
                    pass
                raise

    def _count(self, tally: _Tally) -> None:
        for (model, endpoint, status, code, tier), n in tally.requests.items():
            self.requests.labels(model, endpoint, str(status), code, str(tier)).inc(n)
        for (dep, provider, status, error, window), n in tally.attempts.items():
            self.attempts.labels(dep, provider, str(status or ""), error, str(window)).inc(n)
        for model, n in tally.fallbacks.items():
            self.fallbacks.labels(model).inc(n)
        if tally.tokens:
            self._count_tokens(tally.tokens)

    def _observations(self, tally: _Tally) -> Iterator[None]:
        """Observes the tally's histogram values, pausing (a `yield`) after each
        `OBSERVED_PER_TURN` of them."""
        series: list[tuple[BatchHistogram, tuple[str, ...], list[float]]] = []
        for histogram, by_labels in (
            (self.genai_duration, tally.genai_duration),
            (self.genai_tokens, tally.genai_tokens),
            (self.genai_first_chunk, tally.genai_first_chunk),
        ):
            series += [(histogram, labels, values) for labels, values in by_labels.items()]
        for histogram, by_name in (
            (self.latency, tally.latency),
            (self.ttft, tally.ttft),
            (self.pool_wait, tally.pool_wait),
        ):
            series += [(histogram, (name,), values) for name, values in by_name.items()]
        if tally.overhead:
            series.append((self.overhead, (), tally.overhead))
        room = OBSERVED_PER_TURN
        for histogram, labels, values in series:
            start = 0
            while len(values) - start > room:
                histogram.observe(labels, values[start : start + room])
                start += room
                room = OBSERVED_PER_TURN
                yield
            histogram.observe(labels, values[start:] if start else values)
            room -= len(values) - start
            if room <= 0:
                room = OBSERVED_PER_TURN
                yield

    def _count_tokens(self, tokens: Counter_[tuple[str, str]]) -> None:
        fleet = self.fleet() if self.fleet is not None else None
        for (dep_id, direction), n in tokens.items():
            self.tokens.labels(dep_id, direction).inc(n)
            dep = fleet.deployments.get(dep_id) if fleet is not None else None
            if dep is None:
                continue
            price = dep.price_input if direction == "input" else dep.price_output
            if dep.price_input or dep.price_output:
                self.spend.labels(dep_id).inc(n * price / 1e6)

    def _set_up(self) -> None:
        """Each configured deployment's `up`, as routing sees it now (a removed one goes)."""
        fleet = self.fleet() if self.fleet is not None else None
        if fleet is None or self.state is None:
            return
        now = time.time()
        self.up.clear()
        for dep in fleet.deployments.values():
            available = (
                dep.enabled
                and dep.provider.has_credentials
                and self.state.unavailable_reason(dep.id, now) is None
            )
            self.up.labels(dep.id).set(1 if available else 0)

    def render(self, recorder: Recorder) -> bytes:
        self.records_dropped.set(recorder.dropped)
        self._set_up()
        return generate_latest(self.registry)
