"""A provider's connection pool grows with demand (no silent queue in the gateway), and a
configured cap still caps, with its wait shown in the record, the metrics and the log."""

from __future__ import annotations

import asyncio
import logging
import re
from typing import Any

import aiohttp
import httpx
import pytest

from fleetgate.server.run import open_files_for_streams
from fleetgate.testing import FakeEngine
from tests.harness import Stack, deployment, provider, until, wait_until

STREAMS = 600  # past the old default of 256 pooled connections, and past 512


async def _stream(session: aiohttp.ClientSession, url: str, i: int) -> tuple[int, str, str]:
    """One streamed chat: its status, request id and whole body."""
    async with session.post(
        url + "/v1/chat/completions",
        headers={"X-Request-Id": f"s{i}"},
        json={"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True},
    ) as resp:
        return resp.status, resp.headers["x-request-id"], await resp.text()


async def _held_streams(stack: Stack, engine: FakeEngine, n: int, ready: Any) -> list[Any]:
    """Send `n` streams while the engine holds them; once `ready()` holds, release them and
    return their answers."""
    timeout = aiohttp.ClientTimeout(total=60)
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(timeout=timeout, connector=connector) as session:
        tasks = [asyncio.ensure_future(_stream(session, stack.url, i)) for i in range(n)]
        try:
            await until(ready, 30, "the streams in place")
            engine.release()
            return list(await asyncio.wait_for(asyncio.gather(*tasks), 60))
        finally:
            engine.release()
            for task in tasks:
                task.cancel()


def _metric(text: str, name: str, **labels: str) -> float:
    want = ",".join(f'{k}="{v}"' for k, v in labels.items())
    match = re.search(rf"^{name}{{{re.escape(want)}}} (\S+)$", text, re.M)
    assert match is not None, f"{name}{{{want}}} not in the metrics"
    return float(match.group(1))


def _wait_buckets(stack: Stack, provider_id: str, count: int) -> tuple[float, float]:
    """(attempts that waited at most 1 ms, total seconds waited) for `provider_id`, once
    the metrics hold all `count` attempts."""
    name = "fleetgate_pool_wait_seconds"

    def text() -> str:
        return httpx.get(stack.url + "/metrics").text

    wait_until(
        lambda: f'{name}_count{{provider="{provider_id}"}} {count}.0' in text(),
        10,
        "every attempt in the metrics",
    )
    body = text()
    quick = _metric(body, name + "_bucket", le="0.001", provider=provider_id)
    return quick, _metric(body, name + "_sum", provider=provider_id)


@pytest.fixture(autouse=True)
def _sockets() -> None:
    # each stream holds four sockets in this one process: client, gateway (two), engine
    if open_files_for_streams() < 4 * STREAMS + 256:
        pytest.fail("too few open files allowed for this many streams: raise `ulimit -n`")


def test_streams_past_the_old_pool_size_all_start_at_once(stack: Stack) -> None:
    engine = stack.engine("a")
    stack.start_gateway(
        {"providers": [provider("pa", engine)], "deployments": [deployment("m", "pa")]}
    )
    engine.hold()  # every stream stays at the engine, after its headers, until released
    ready = lambda: engine.active >= STREAMS  # noqa: E731
    answers = asyncio.run(_held_streams(stack, engine, STREAMS, ready))
    assert [status for status, _, _ in answers] == [200] * STREAMS
    assert all(body.rstrip().endswith("data: [DONE]") for _, _, body in answers)
    quick, _ = _wait_buckets(stack, "pa", STREAMS)
    assert quick == STREAMS  # no attempt waited in the gateway for a connection
    record = httpx.get(f"{stack.url}/v1/requests/s7").json()
    assert record["attempts"][0]["pool_wait"] == 0.0


def test_a_configured_cap_still_caps_and_its_wait_is_told(
    stack: Stack, caplog: pytest.LogCaptureFixture
) -> None:
    engine = stack.engine("a")
    stack.start_gateway(
        {
            "providers": [provider("pa", engine, max_concurrency=4)],
            "deployments": [deployment("m", "pa")],
        }
    )
    engine.hold()
    pipeline = stack.gateway.pipeline
    pool = pipeline.pool.client(pipeline.holder.fleet.providers["pa"]).http

    def ready() -> bool:  # 4 at the engine, 8 waiting in the gateway
        return engine.active == 4 and pool.waiting == 8

    with caplog.at_level(logging.WARNING, logger="fleetgate.execute"):
        answers = asyncio.run(_held_streams(stack, engine, 12, ready))
    assert [status for status, _, _ in answers] == [200] * 12
    saturated = [r.getMessage() for r in caplog.records if "saturated" in r.getMessage()]
    assert saturated == [
        "provider pa saturated: all 4 of its connections (max_concurrency) are taken, requests"
        " wait in the gateway (fleetgate_pool_wait_seconds); raise the limit if the upstream"
        " can take more"
    ]
    quick, waited = _wait_buckets(stack, "pa", 12)
    assert quick == 4 and waited > 0  # the first four went at once, the rest waited
    waits = [
        httpx.get(f"{stack.url}/v1/requests/{rid}").json()["attempts"][0]["pool_wait"]
        for _, rid, _ in answers
    ]
    assert sum(1 for w in waits if w > 0) == 8
