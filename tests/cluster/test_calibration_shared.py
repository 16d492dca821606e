"""The context estimate's calibration: kept in the store across restarts, and shared by
replicas through Redis (samples from A's traffic calibrate B)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from fleetgate.control.plane import ControlOptions
from fleetgate.server.app import Gateway
from tests.admin.helpers import ADMIN_KEY, two_tier_fleet
from tests.harness import LoopThread, Stack, wait_until

# about 120 words: the estimate runs (two windows) and the fake engine reports usage
MESSAGES = [{"role": "user", "content": "the quick brown fox jumps over the lazy dog " * 13}]


@pytest.fixture
def replica_b(loop_thread: LoopThread) -> Iterator[Stack]:
    s = Stack(loop_thread)
    yield s
    s.close()


def _chat(stack: Stack, n: int) -> None:
    for _ in range(n):
        answer = httpx.post(
            stack.url + "/v1/chat/completions",
            json={"model": "m", "messages": MESSAGES, "max_tokens": 16},
            timeout=10,
        )
        assert answer.status_code == 200, answer.text


def _samples(gw: Gateway, dep: str = "pa") -> int:
    cal = gw.pipeline.state.calibration.get(dep)
    return cal.samples if cal is not None else 0


def _bounds(gw: Gateway, dep: str = "pa") -> Any:
    cal = gw.pipeline.state.calibration.get(dep)
    return cal.bounds() if cal is not None else None


@pytest.fixture
def on_redis(pg_url: str, redis_url: str, redis_namespace: str) -> ControlOptions:
    """Replicas' options: one PostgreSQL store and one Redis namespace."""
    return ControlOptions(
        database_url=pg_url,
        redis_url=redis_url,
        redis_namespace=redis_namespace,
        admin_key=ADMIN_KEY,
    )


def _two_replicas_with_traffic(
    stack: Stack, replica_b: Stack, fleet: Any, opts: ControlOptions
) -> tuple[Gateway, Gateway]:
    """Replicas A and B on one store and Redis; six chats answered by A, four by B."""
    a = stack.start_gateway(fleet, opts)
    replica_b.engines = {}  # B shares A's engines; only A's stack stops them
    b = replica_b.start_gateway(fleet, opts)
    _chat(stack, 6)  # on A only
    _chat(replica_b, 4)  # on B only
    return a, b


def test_the_calibration_survives_a_restart(stack: Stack, db_url: str) -> None:
    opts = ControlOptions(database_url=db_url, admin_key=ADMIN_KEY)
    gw = stack.start_gateway(two_tier_fleet(stack), opts)
    _chat(stack, 10)
    wait_until(lambda: _samples(gw) == 10, 5, "ten samples calibrated")
    learned = _bounds(gw)
    assert learned is not None
    stack.stop_gateway()  # saves the book
    again = stack.start_gateway(two_tier_fleet(stack), opts)
    assert _samples(again) == 10
    assert _bounds(again) == learned
    # and the fleet view shows it
    fleet = httpx.get(
        stack.url + "/admin/fleet", headers={"authorization": f"Bearer {ADMIN_KEY}"}, timeout=5
    ).json()
    shown = next(d for d in fleet["deployments"] if d["id"] == "pa")
    assert shown["context_estimate"]["calibration"]["samples"] == 10


def test_replicas_learn_from_each_others_traffic(
    stack: Stack, replica_b: Stack, on_redis: ControlOptions, tmp_path: Path
) -> None:
    opts = on_redis
    fleet = two_tier_fleet(stack)
    a, b = _two_replicas_with_traffic(stack, replica_b, fleet, opts)
    wait_until(lambda: _samples(a) == 10 and _samples(b) == 10, 10, "both books have all ten")
    assert _bounds(a) == _bounds(b)
    # a third replica, on a store of its own, loads the shared books from Redis
    replica_b.stop_gateway()
    fresh = f"sqlite:///{tmp_path / 'other.db'}"
    c = replica_b.start_gateway(fleet, dataclasses.replace(opts, database_url=fresh))
    wait_until(lambda: _samples(c) == 10, 10, "a new replica loaded the books")
    assert _bounds(c) == _bounds(a)


def _answers(gw: Gateway, dep: str = "pa") -> int:
    fit = gw.pipeline.state.calibration.public_fit(dep)
    return fit["answers"] if fit is not None else 0


def test_replicas_fit_the_tokenizer_on_each_others_answers(
    stack: Stack, replica_b: Stack, on_redis: ControlOptions
) -> None:
    opts = on_redis
    fleet = two_tier_fleet(stack)
    a, b = _two_replicas_with_traffic(stack, replica_b, fleet, opts)
    # each answer's tally and prompt tokens reach the other replica's tokenizer fit
    wait_until(lambda: _answers(a) == 10 and _answers(b) == 10, 10, "both fits have all ten")
    fit_a = a.pipeline.state.calibration.public_fit("pa")
    fit_b = b.pipeline.state.calibration.public_fit("pa")
    assert fit_a is not None and fit_b is not None
    # the same evidence, so the same weights (the order the answers came in aside)
    assert fit_a["weights"].keys() == fit_b["weights"].keys()
    for name, weight in fit_a["weights"].items():
        assert fit_b["weights"][name] == pytest.approx(weight, rel=0.05, abs=0.01), name
