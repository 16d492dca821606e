"""Prometheus histograms fed a batch of values at a time.

`prometheus_client.Histogram.observe` takes a lock and scans the buckets for every value;
the metrics sink observes three values per request, thousands of times a second. This
collector counts a batch with one `bisect` per value and hands prometheus_client the
totals only when `/metrics` is scraped.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable, Iterator, Sequence
from itertools import accumulate

from prometheus_client import CollectorRegistry
from prometheus_client.core import HistogramMetricFamily
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString


class _Series:
    __slots__ = ("counts", "total")

    def __init__(self, size: int) -> None:
        self.counts = [0] * size  # per bucket, not cumulative; the last one is +Inf
        self.total = 0.0


class BatchHistogram(Collector):
    def __init__(
        self,
        name: str,
        documentation: str,
        labelnames: Sequence[str],
        buckets: Sequence[float],
        registry: CollectorRegistry,
    ) -> None:
        self.name = name
        self.documentation = documentation
        self.labelnames = tuple(labelnames)
        self._bounds = tuple(sorted(float(b) for b in buckets))
        self._les = [floatToGoString(b) for b in (*self._bounds, float("inf"))]
        self._series: dict[tuple[str, ...], _Series] = {}
        registry.register(self)

    def observe(self, labels: tuple[str, ...], values: Iterable[float]) -> None:
        series = self._series.get(labels)
        if series is None:
            series = self._series[labels] = _Series(len(self._les))
        counts, bounds = series.counts, self._bounds
        total = 0.0
        for value in values:
            counts[bisect_left(bounds, value)] += 1  # the first bucket with value <= le
            total += value
        series.total += total

    @property
    def bounds(self) -> tuple[float, ...]:
        return self._bounds

    def snapshot(self) -> list[tuple[tuple[str, ...], list[int], float]]:
        """Each label set's counts per bucket (not cumulative; the last one is +Inf) and
        sum, copied: what an OTLP histogram data point holds."""
        return [(labels, list(s.counts), s.total) for labels, s in self._series.items()]

    def describe(self) -> list[HistogramMetricFamily]:
        return [HistogramMetricFamily(self.name, self.documentation, labels=self.labelnames)]

    def collect(self) -> Iterator[HistogramMetricFamily]:
        family = HistogramMetricFamily(self.name, self.documentation, labels=self.labelnames)
        for labels, series in self._series.items():
            cumulative = accumulate(series.counts)
            family.add_metric(
                list(labels), list(zip(self._les, cumulative, strict=True)), series.total
            )
        yield family
