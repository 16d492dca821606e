"""Pooled connections to the real llama.cpp engine, which ends a connection after every
streamed answer although its headers say keep-alive."""

from __future__ import annotations

import httpx

from fleetgate.execute.upstream import UpstreamPool, request_headers
from fleetgate.fleet import build_fleet
from tests.engines import LlamaFactory, llama_fleet
from tests.harness import Stack, deployment, fleet_config


def test_streams_back_to_back_never_meet_a_closed_connection(
    stack: Stack, llama: LlamaFactory
) -> None:
    # one deployment, so a reset on a reused connection would be the client's 502
    stack.start_gateway(llama_fleet([llama(n_ctx=512)]))
    body = {
        "model": "m",
        "messages": [{"role": "user", "content": "Say hello."}],
        "max_tokens": 2,
        "stream": True,
    }
    with httpx.Client(base_url=stack.url, timeout=30) as client:
        for i in range(40):
            streamed = client.post("/v1/chat/completions", json=body)
            assert streamed.status_code == 200, (i, streamed.text)
            assert streamed.text.rstrip().endswith("data: [DONE]")
            # and a whole answer right after, on whatever connection the pool holds
            plain = client.post("/v1/chat/completions", json={**body, "stream": False})
            assert plain.status_code == 200, (i, plain.text)
            assert plain.headers["x-fleetgate-attempts"] == "1"


async def test_only_streams_to_llamacpp_ask_to_close() -> None:
    fleet = build_fleet(
        fleet_config(
            {
                "providers": [
                    {"id": "cpp", "kind": "llamacpp", "base_url": "http://127.0.0.1:9/v1"},
                    {"id": "vllm", "kind": "vllm", "base_url": "http://127.0.0.1:9/v1"},
                ],
                "deployments": [deployment("m", "cpp"), deployment("m", "vllm")],
            }
        )
    )
    pool = UpstreamPool()
    try:
        cpp, vllm = fleet.providers["cpp"], fleet.providers["vllm"]
        assert request_headers(pool.client(cpp), cpp, None, stream=True)["Connection"] == "close"
        assert "Connection" not in request_headers(pool.client(cpp), cpp, None)
        assert "Connection" not in request_headers(pool.client(vllm), vllm, None, stream=True)
    finally:
        await pool.close()
