"""Clients that send their own `x-request-id`, the same on requests in flight together (one
id per conversation, or a constant): each answer's evidence still goes to its own pick."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

from fleetgate.epp.protocol import BODY_MODES
from tests.epp.stack import EppStack
from tests.harness import Stack, deployment, provider, wait_until

LONG = "word " * 6000  # ~6000 tokens: only the long window holds it


@pytest.mark.parametrize("mode", BODY_MODES)
def test_answers_of_requests_sharing_an_id_are_each_charged_to_their_own_pick(
    stack: Stack, epp: EppStack, mode: str
):
    small = stack.engine("small", context_window=4096, latency=1.0)  # answers last
    long = stack.engine("long", context_window=32768)
    config = {
        "providers": [provider("small", small), provider("long", long)],
        "deployments": [
            deployment("m", "small", context_window=4096),
            deployment("m", "long", context_window=32768),
        ],
    }
    envoy = epp.start(config, body_mode=mode)
    assert stack.gateway is not None
    pipeline = stack.gateway.pipeline
    kept = _Kept()
    pipeline.recorder.sinks.append(kept)

    def ask(text: str) -> httpx.Response:
        return httpx.post(
            envoy.url + "/v1/chat/completions",
            json={"model": "m", "messages": [{"role": "user", "content": text}]},
            headers={"x-request-id": "conversation-7"},
            timeout=20,
        )

    with ThreadPoolExecutor(2) as pool:
        short = pool.submit(ask, "hello")  # picked first: the small window, slow
        wait_until(lambda: len(small.requests) == 1, 5, "the first request at its engine")
        long_one = pool.submit(ask, LONG)  # picked second, answered first
        answers = [short.result(), long_one.result()]
    assert [a.status_code for a in answers] == [200, 200]
    assert [a.headers["x-request-id"] for a in answers] == ["conversation-7"] * 2
    wait_until(lambda: len(kept.records) == 2, 10, "both answers recorded")
    # nothing failed: no endpoint is charged for the other request's answer
    assert pipeline.state.health("small").failures == 0
    assert pipeline.state.health("long").failures == 0
    assert pipeline.state.health("small").inflight == pipeline.state.health("long").inflight == 0
    seen = {r.deployment_id: r for r in kept.records}
    assert set(seen) == {"small", "long"}
    assert all(r.status == 200 and len(r.attempts) == 1 for r in seen.values())
    # each record holds its own request: the long prompt's estimate went with the long one
    assert seen["long"].notes["context_estimate"] > seen["small"].notes["context_estimate"]


class _Kept:
    """A recorder sink that keeps every record (the recent list keeps one per id)."""

    def __init__(self) -> None:
        self.records: list[Any] = []

    def take(self, record: Any) -> None:
        self.records.append(record)

    async def flush(self) -> None:
        pass
