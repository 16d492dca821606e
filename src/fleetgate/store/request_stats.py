"""Aggregates of the request log over a time window, computed by the database: requests,
errors and fallbacks per bucket, attempts and errors per deployment, capacity-tier share,
and TTFT percentiles. Only counts leave the database, never rows."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from fleetgate.store.db import Conn, Database

NO_TIER = "none"  # requests no capacity tier served (refused, or every attempt failed)


@dataclass(frozen=True, slots=True)
class Window:
    start: float
    step: float
    buckets: int

    @classmethod
    def ending(cls, now: float, seconds: float, buckets: int) -> Window:
        """`buckets` equal buckets whose edges fall on multiples of the step."""
        step = seconds / buckets
        end = math.ceil(now / step) * step
        return cls(end - buckets * step, step, buckets)

    @property
    def end(self) -> float:
        return self.start + self.buckets * self.step


# The bucket index of a time: a non-negative quotient, so truncation is the floor
# (SQLite's CAST truncates; PostgreSQL's rounds, hence floor() there).
_BUCKET = {
    "sqlite": "CAST((time - :start) / :step AS INTEGER)",
    "postgresql": "CAST(FLOOR((time - :start) / :step) AS INTEGER)",
}
_IN_WINDOW = "time >= :start AND time < :end"


# Attempts live inline as a JSON list; each dialect has its own way to expand one.
_ATTEMPTS_SQL = {
    "sqlite": (
        f"SELECT {_BUCKET['sqlite']} AS b, "
        "json_extract(a.value, '$.deployment_id') AS dep, COUNT(*) AS n, "
        "SUM(CASE WHEN json_extract(a.value, '$.error_class') IS NULL THEN 0 ELSE 1 END) AS e "
        "FROM requests r, json_each(r.attempts) a "
        "WHERE r.time >= :start AND r.time < :end "
        "AND COALESCE(json_extract(a.value, '$.error_class'), '') != 'skipped' "
        "GROUP BY b, dep"
    ),
    "postgresql": (
        f"SELECT {_BUCKET['postgresql']} AS b, "
        "a->>'deployment_id' AS dep, COUNT(*) AS n, "
        "SUM(CASE WHEN a->>'error_class' IS NULL THEN 0 ELSE 1 END) AS e "
        "FROM requests r, json_array_elements(r.attempts) a "
        "WHERE r.time >= :start AND r.time < :end "
        "AND COALESCE(a->>'error_class', '') != 'skipped' "
        "GROUP BY b, dep"
    ),
}


def _percentile(histogram: list[tuple[int, int, float]], share: float) -> float | None:
    """Nearest-rank percentile of (millisecond, count, largest value in seconds) groups:
    the largest value of the group that holds the rank, so at most 1 ms above the true
    figure, and never 0 for answers faster than a millisecond."""
    total = sum(n for _, n, _ in histogram)
    if not total:
        return None
    rank = max(1, math.ceil(share * total))
    seen = 0
    ordered = sorted(histogram)
    for _ms, n, top in ordered:
        seen += n
        if seen >= rank:
            return float(top)
    return float(ordered[-1][2])


def _stats(conn: Conn, window: Window) -> dict[str, Any]:
    size = window.buckets
    zeros = [0] * size
    b = _BUCKET[conn.dialect]
    out: dict[str, Any] = {
        "start": window.start,
        "end": window.end,
        "step": window.step,
        "buckets": [window.start + i * window.step for i in range(size)],
        "requests": list(zeros),
        "errors": list(zeros),
        "fallbacks": list(zeros),
    }
    params = {"start": window.start, "step": window.step, "end": window.end}
    rows = conn.tuples(
        f"SELECT {b} AS b, COUNT(*), "
        "SUM(CASE WHEN status >= 400 THEN 1 ELSE 0 END), "
        "SUM(CASE WHEN fallback_count > 0 THEN 1 ELSE 0 END) "
        f"FROM requests WHERE {_IN_WINDOW} GROUP BY b",
        params,
    )
    for i, n, errors, fallbacks in rows:
        if 0 <= i < size:
            out["requests"][i], out["errors"][i], out["fallbacks"][i] = n, errors, fallbacks

    tiers: dict[str, list[int]] = {}
    grouped = conn.tuples(
        f"SELECT {b} AS b, COALESCE(context_tier, :none) AS tier_name, COUNT(*) "
        f"FROM requests WHERE {_IN_WINDOW} GROUP BY b, tier_name",
        {**params, "none": NO_TIER},
    )
    for i, name, n in grouped:
        if 0 <= i < size:
            tiers.setdefault(name, list(zeros))[i] = n
    out["context_tiers"] = tiers

    deployments: dict[str, dict[str, list[int]]] = {}
    for i, dep, n, errors in conn.tuples(_ATTEMPTS_SQL[conn.dialect], params):
        if 0 <= i < size and dep is not None:
            entry = deployments.setdefault(dep, {"attempts": list(zeros), "errors": list(zeros)})
            entry["attempts"][i], entry["errors"][i] = n, errors
    out["deployments"] = deployments

    histograms: list[list[tuple[int, int, float]]] = [[] for _ in range(size)]
    answered = conn.tuples(
        f"SELECT {b} AS b, CAST(ttft * 1000 AS INTEGER) AS ms, COUNT(*), MAX(ttft) "
        f"FROM requests WHERE {_IN_WINDOW} AND ttft IS NOT NULL AND status < 400 "
        "GROUP BY b, ms",
        params,
    )
    for i, value, n, top in answered:
        if 0 <= i < size:
            histograms[i].append((value, n, top))
    out["ttft_p50"] = [_percentile(h, 0.5) for h in histograms]
    out["ttft_p99"] = [_percentile(h, 0.99) for h in histograms]
    out["totals"] = {
        "requests": sum(out["requests"]),
        "errors": sum(out["errors"]),
        "fallbacks": sum(out["fallbacks"]),
    }
    return out


async def request_stats(db: Database, window: Window) -> dict[str, Any]:
    return await db.read(_stats, window)
