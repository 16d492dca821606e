"""A connection the engine has just closed is not a failure of the engine.

llama.cpp's server closes the connection right after a streamed answer (while saying
`Keep-Alive`); a pool would hand that connection to the next request before it has seen
the close, and the request would fail (a 502 for a lone deployment, and a failure on the
deployment's circuit). Streamed requests to llama.cpp therefore ask to close.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import httpx

from tests.engines import llama_fleet
from tests.harness import Stack


def test_back_to_back_streams_to_llama_cpp_all_succeed(stack: Stack, llama) -> None:
    stack.start_gateway(llama_fleet([llama(n_ctx=512)]))
    body = {
        "model": "m",
        "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": 4,
        "stream": True,
    }

    def conversation(_: int) -> list[tuple[int, str | None]]:
        out = []
        with httpx.Client(base_url=stack.url, timeout=60) as client:
            for _ in range(6):
                with client.stream("POST", "/v1/chat/completions", json=body) as resp:
                    resp.read()
                    out.append((resp.status_code, resp.headers.get("x-fleetgate-attempts")))
        return out

    with ThreadPoolExecutor(8) as pool:  # streams end while others wait for the connection
        statuses = [s for conv in pool.map(conversation, range(8)) for s in conv]
    assert statuses == [(200, "1")] * 48
    assert stack.gateway.pipeline.state.health("solo").failures == 0
