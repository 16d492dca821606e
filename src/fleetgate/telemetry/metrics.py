"""The GenAI metrics as OTLP histograms: the very series `/metrics` shows (record/metrics.py
tallies them), sent cumulative, with their OpenTelemetry names and attribute keys."""

from __future__ import annotations

from fleetgate.record.histograms import BatchHistogram
from fleetgate.record.metrics import GENAI_LABELS, Metrics
from fleetgate.telemetry import otlp

# Prometheus label -> OpenTelemetry attribute key
ATTRIBUTE_KEYS = {
    "gen_ai_operation_name": "gen_ai.operation.name",
    "gen_ai_provider_name": "gen_ai.provider.name",
    "gen_ai_request_model": "gen_ai.request.model",
    "fleetgate_deployment": "fleetgate.deployment",
    "error_type": "error.type",
    "gen_ai_token_type": "gen_ai.token.type",
}


def _points(
    histogram: BatchHistogram, names: tuple[str, ...], start_ns: int, now_ns: int
) -> list[bytes]:
    keys = [ATTRIBUTE_KEYS[n] for n in names]
    return [
        otlp.histogram_point(
            [(k, v) for k, v in zip(keys, labels, strict=True) if v],  # no empty error.type
            start_ns,
            now_ns,
            counts,
            total,
            histogram.bounds,
        )
        for labels, counts, total in histogram.snapshot()
    ]


def genai_metrics(metrics: Metrics, start_ns: int, now_ns: int) -> list[bytes]:
    """Encoded Metric messages: operation duration, token usage, time to first chunk."""
    token_labels = (*GENAI_LABELS, "gen_ai_token_type")
    return [
        otlp.histogram_metric(
            "gen_ai.client.operation.duration",
            "GenAI operation duration.",
            "s",
            _points(metrics.genai_duration, GENAI_LABELS, start_ns, now_ns),
        ),
        otlp.histogram_metric(
            "gen_ai.client.token.usage",
            "Number of input and output tokens used.",
            "{token}",
            _points(metrics.genai_tokens, token_labels, start_ns, now_ns),
        ),
        otlp.histogram_metric(
            "gen_ai.client.operation.time_to_first_chunk",
            "Time to receive the first chunk of a streamed answer.",
            "s",
            _points(metrics.genai_first_chunk, GENAI_LABELS, start_ns, now_ns),
        ),
    ]
