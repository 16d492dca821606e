"""Engine load from each engine's own metrics: vLLM and SGLang `/metrics`, llama.cpp
`/metrics` and `/slots`.

The Prometheus text is parsed with prometheus_client's parser, fed only the lines of the
few gauges read here (an engine's page holds hundreds of histogram lines).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

# kind -> (waiting, running, KV-cache use 0-1): the gauges of each engine, newest name first
GAUGES: dict[str, tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]] = {
    "vllm": (
        ("vllm:num_requests_waiting",),
        ("vllm:num_requests_running",),
        ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),
    ),
    "sglang": (("sglang:num_queue_reqs",), ("sglang:num_running_reqs",), ("sglang:token_usage",)),
    "llamacpp": (("llamacpp:requests_deferred",), ("llamacpp:requests_processing",), ()),
}


@dataclass(frozen=True, slots=True)
class EngineLoad:
    """One poll of one engine, as it reported itself (None: it does not say)."""

    waiting: float | None = None  # requests queued in the engine, not yet running
    running: float | None = None
    kv_cache: float | None = None  # share of the KV cache in use, 0-1
    slots: int | None = None  # llama.cpp: slots, and how many are processing
    busy_slots: int | None = None
    fetched_at: float = 0.0
    error: str | None = None
    # the gateway's own in-flight count to the deployment when the engine answered: routing
    # adds what it dispatched since (or takes off what ended) to the engine's queue
    inflight: int | None = None

    def queue_now(self, inflight: int) -> float | None:
        """The engine's queue corrected by the gateway's own requests since the sample
        (`inflight`: its count now): ones sent since fill the free slots llama.cpp reported,
        then queue (an engine with a queue has no free slot); ones ended since let queued
        ones run. Without a snapshot, or for an engine that had neither a queue nor a slot
        count (vLLM or SGLang below their batch size), the reported queue."""
        if self.waiting is None or self.inflight is None:
            return self.waiting
        since = inflight - self.inflight
        if since > 0:
            if self.waiting > 0:
                free = 0
            elif self.slots is not None and self.busy_slots is not None:
                free = max(0, self.slots - self.busy_slots)
            else:
                return self.waiting
            return self.waiting + max(0, since - free)
        return max(0.0, self.waiting + since)

    def busy_now(self, inflight: int) -> float | None:
        """The engine's busy slots corrected the same way (llama.cpp's `/slots`): ones sent
        since take free slots; ones ended since free theirs, once the queue behind them has
        run. The reported count without a snapshot."""
        busy = self.busy_slots if self.busy_slots is not None else self.running
        if busy is None or self.inflight is None:
            return busy
        since = inflight - self.inflight
        waiting = self.waiting or 0.0
        if since > 0 and waiting <= 0 and self.slots is not None:
            return min(float(self.slots), busy + since)
        if since < 0:
            return max(0.0, busy - max(0.0, -since - waiting))
        return busy

    def public(self, now: float) -> dict[str, Any]:
        return {
            "waiting": self.waiting,
            "running": self.running,
            "kv_cache": self.kv_cache,
            "slots": self.slots,
            "busy_slots": self.busy_slots,
            "age_seconds": round(now - self.fetched_at, 3) if self.fetched_at else None,
            "error": self.error,
        }


def _wanted_lines(text: str, names: tuple[str, ...]) -> str:
    return "\n".join(line for line in text.splitlines() if line.startswith(names))


# labels that tell the ranks of one engine apart (they report the same scheduler's state):
# one value per engine from them; other labels (vLLM's `engine`, a data-parallel rank) are
# engines of their own, whose queues add up
_RANK_LABELS = frozenset({"tp_rank", "pp_rank", "moe_ep_rank"})


def read_gauges(
    text: str, names: tuple[str, ...], model: str | None, ratios: tuple[str, ...] = ()
) -> dict[str, float]:
    """Each named gauge's value; with several `model_name` series, the one of `model`.
    Counts add up over an engine's other series (vLLM's `engine`, data-parallel ranks);
    a ratio in `ratios` (KV-cache use, 0-1) is the fullest one's, so it never passes 1;
    ranks of one engine (`tp_rank`, ...) count once."""
    # name -> model_name -> engine labels -> value (the largest of the engine's ranks)
    by_name: dict[str, dict[str, dict[tuple[tuple[str, str], ...], float]]] = {}
    for family in text_string_to_metric_families(_wanted_lines(text, names)):
        for sample in family.samples:
            if sample.name not in names:
                continue
            labels = sample.labels
            engine = tuple(
                sorted(
                    (k, v) for k, v in labels.items() if k not in _RANK_LABELS and k != "model_name"
                )
            )
            engines = by_name.setdefault(sample.name, {}).setdefault(
                labels.get("model_name", ""), {}
            )
            engines[engine] = max(engines.get(engine, float("-inf")), float(sample.value))
    out: dict[str, float] = {}
    for name, series in by_name.items():
        if model is not None and model in series:
            engines = series[model]
        elif len(series) == 1:
            engines = next(iter(series.values()))
        else:
            continue
        out[name] = max(engines.values()) if name in ratios else sum(engines.values())
    return out


def _first(values: dict[str, float], names: tuple[str, ...]) -> float | None:
    return next((values[n] for n in names if n in values), None)


def parse_metrics(kind: str, text: str, model: str | None, now: float | None = None) -> EngineLoad:
    """The load an engine's `/metrics` page reports (kinds of `GAUGES`)."""
    waiting, running, kv = GAUGES[kind]
    values = read_gauges(text, waiting + running + kv, model, ratios=kv)
    return EngineLoad(
        waiting=_first(values, waiting),
        running=_first(values, running),
        kv_cache=_first(values, kv),
        fetched_at=time.time() if now is None else now,
    )


def parse_llamacpp_slots(slots: Any) -> tuple[int, int] | None:
    """(slots, processing) from llama.cpp's `/slots` answer; None when it is not a list."""
    if not isinstance(slots, list):
        return None
    busy = sum(1 for s in slots if isinstance(s, dict) and s.get("is_processing"))
    return len(slots), busy
