"""The tie-breakers (engine load, affinity) are inert unless deployments of equal rank
compete: explain prints the same plan, byte for byte, with them and without them."""

from __future__ import annotations

import time
from typing import Any

import httpx
import orjson
import pytest

import fleetgate.routing.planner as planner
from fleetgate.discovery.engine_metrics import EngineLoad
from fleetgate.ingress.openai import parse_openai
from fleetgate.ingress.prefix import prefix_keys
from fleetgate.routing.orderers.affinity import AffinityOrderer
from fleetgate.routing.orderers.engine_load import EngineLoadOrderer
from fleetgate.routing.register import ORDERERS
from tests.harness import Stack, deployment, provider, wait_until

BODY = {
    "model": "m",
    "messages": [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "hello"},
        {"role": "assistant", "content": "hi"},
        {"role": "user", "content": "again"},
    ],
}
BUSY_LOAD = {"waiting": 50, "running": 4, "kv_cache": 0.99}
IDLE_LOAD = {"waiting": 0, "running": 0, "kv_cache": 0.0}
WITHOUT_TIE_BREAKERS = [
    o for o in ORDERERS if not isinstance(o, (EngineLoadOrderer, AffinityOrderer))
]


# One poll round at start, then none while the test runs: nothing rewrites or ages the
# samples between the setup and the explains (a sample counts for three intervals).
QUIET_POLLER = {"engine_load": {"interval_seconds": 3600}}


def _fleet(stack: Stack, priorities: list[int], prices: list[float] | None = None) -> None:
    """Deployment p<i> on engine e<i>; e0 reports a deep queue and a full KV cache from the
    start, so every poll of it reads the same numbers."""
    engines = [stack.engine(f"e{i}") for i in range(len(priorities))]
    engines[0].load = dict(BUSY_LOAD)
    stack.start_gateway(
        {
            "providers": [provider(f"p{i}", e) for i, e in enumerate(engines)],
            "deployments": [
                deployment("m", f"p{i}", priority=p, price={"input": (prices or [0] * 9)[i]})
                for i, p in enumerate(priorities)
            ],
            "routing": {"balancing": QUIET_POLLER},
        }
    )


def _busy_and_remembered(stack: Stack, owner: str) -> None:
    """The first deployment's engine reports a deep queue, the others none, and `owner`
    served this prompt.

    The samples are put in by hand once the poller's first round has ended: a round under
    way could overwrite them with numbers read a moment earlier (or with a timeout, on a
    loaded machine), and it drops the samples of deployments it does not poll (those
    without a peer). After that round nothing polls while the test runs.
    """
    gw = stack.gateway
    assert gw is not None
    wait_until(lambda: gw.pipeline.load_poller.rounds >= 1, 10, "the first engine-load poll round")
    now = time.time()
    for i in range(len(stack.engines)):  # what each engine's /metrics says
        load = BUSY_LOAD if i == 0 else IDLE_LOAD
        gw.pipeline.loads.record(f"p{i}", EngineLoad(**load, fetched_at=now))
    keys = prefix_keys(parse_openai("chat.completions", orjson.dumps(BODY)))
    gw.pipeline.affinity.record(keys[-2], owner, now)


def _explain(stack: Stack, body: dict[str, Any]) -> bytes:
    resp = httpx.post(stack.url + "/v1/routing/explain", json=body, timeout=10)
    assert resp.status_code == 200
    return resp.content


def _with_and_without(stack: Stack, monkeypatch: pytest.MonkeyPatch, body: dict) -> tuple:
    with_them = _explain(stack, body)
    monkeypatch.setattr(planner, "ORDERERS", WITHOUT_TIE_BREAKERS)
    without = _explain(stack, body)
    monkeypatch.setattr(planner, "ORDERERS", ORDERERS)
    return with_them, without


@pytest.mark.parametrize(
    ("priorities", "prices", "body"),
    [
        ([0], None, BODY),  # one deployment
        ([0, 1, 2], None, BODY),  # different priorities
        ([2, 0, 1], None, {**BODY, "provider": {"order": ["p2", "p1"]}}),  # an explicit order
        ([0, 0], [1, 2], {**BODY, "provider": {"sort": "price"}}),  # a sort that ranks all
    ],
)
def test_explain_is_byte_for_byte_the_same_without_a_tie(
    stack: Stack,
    monkeypatch: pytest.MonkeyPatch,
    priorities: list[int],
    prices: list[float] | None,
    body: dict,
) -> None:
    _fleet(stack, priorities, prices)
    _busy_and_remembered(stack, owner=f"p{len(priorities) - 1}")
    with_them, without = _with_and_without(stack, monkeypatch, body)
    assert (
        stack.gateway.pipeline.loads.fresh("p0", time.time()) is not None
    )  # the signals were there
    assert with_them == without
    assert b"affinity" not in with_them and b"engine_load" not in with_them


def test_the_same_setup_with_a_tie_does_change_the_plan(
    stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The control: three deployments of equal rank, the same signals: both tie-breakers act."""
    _fleet(stack, [0, 0, 0])
    _busy_and_remembered(stack, owner="p2")
    with_them, without = _with_and_without(stack, monkeypatch, BODY)
    assert with_them != without
    plan = httpx.post(stack.url + "/v1/routing/explain", json=BODY, timeout=10).json()
    assert [c["deployment"] for c in plan["candidates"]] == ["p2", "p1", "p0"]
    assert plan["headers"]["X-Fleetgate-Affinity"] == "hit"
    assert plan["notes"]["engine_load"]["p0"]["moved_back"] == "kv cache 99% >= 95%"
    assert plan["notes"]["affinity"]["owner"] == "p2"
