"""BatchHistogram: Prometheus `le` semantics, cumulative buckets, sum and count."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from fleetgate.record.histograms import BatchHistogram


def _samples(registry: CollectorRegistry) -> dict[tuple[str, str, str], float]:
    text = generate_latest(registry).decode()
    return {
        (s.name, s.labels.get("model", ""), s.labels.get("le", "")): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_values_land_in_the_first_bucket_whose_bound_holds_them() -> None:
    registry = CollectorRegistry()
    hist = BatchHistogram("t_seconds", "Test.", ["model"], [0.1, 0.01, 1], registry)
    hist.observe(("a",), [0.01, 0.02, 0.5, 7.0])  # 0.01 is on a bound: le is inclusive
    hist.observe(("a",), [0.001])
    hist.observe(("b",), [])
    got = _samples(registry)
    assert got[("t_seconds_bucket", "a", "0.01")] == 2
    assert got[("t_seconds_bucket", "a", "0.1")] == 3
    assert got[("t_seconds_bucket", "a", "1.0")] == 4
    assert got[("t_seconds_bucket", "a", "+Inf")] == 5
    assert got[("t_seconds_count", "a", "")] == 5
    assert abs(got[("t_seconds_sum", "a", "")] - 7.531) < 1e-9
    assert got[("t_seconds_count", "b", "")] == 0


def test_a_second_histogram_with_the_same_name_is_refused() -> None:
    registry = CollectorRegistry(auto_describe=True)
    BatchHistogram("dup_seconds", "Test.", [], [1], registry)
    with pytest.raises(ValueError, match="Duplicated"):
        BatchHistogram("dup_seconds", "Test.", [], [1], registry)
