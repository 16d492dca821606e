"""Through Envoy to two real llama.cpp engines (real tokenizer and template) of different
windows: the picker places each prompt, asks an exact count near the boundary, and never
sends a prompt to a window the engine would refuse."""

from __future__ import annotations

from typing import Any

import httpx
import openai

from fleetgate.testing.llama import ALIAS
from tests.engines import LlamaFactory, llama_provider
from tests.epp.stack import EppStack
from tests.harness import Stack, wait_until


def _windows(llama: LlamaFactory) -> dict[str, Any]:
    small, big = llama(n_ctx=512), llama(n_ctx=2048)
    return {
        # without the engines' fingerprints the estimate is the family's, and a prompt near
        # the boundary needs the engine's count: the picker's exact-count path
        "routing": {"context": {"default_output_reserve": 16, "fingerprint": False}},
        "providers": [llama_provider("small", small), llama_provider("big", big)],
        "deployments": [
            {"id": n, "model": "tiny", "provider": n, "upstream_model": ALIAS, "context_window": w}
            for n, w in (("small", 512), ("big", 2048))
        ],
    }


def _ask(envoy_url: str, content: str) -> tuple[str, dict[str, Any]]:
    client = openai.OpenAI(base_url=envoy_url + "/v1", api_key="unused", max_retries=0, timeout=60)
    raw = client.chat.completions.with_raw_response.create(
        model="tiny", messages=[{"role": "user", "content": content}], max_tokens=8
    )
    request_id = raw.headers["x-request-id"]
    url = f"{envoy_url}/v1/requests/{request_id}"
    wait_until(lambda: httpx.get(url).status_code == 200, 10, "the record kept")
    record = httpx.get(url).json()
    return record["deployment_id"], record


def test_prompts_land_by_their_exact_count(stack: Stack, epp: EppStack, llama: LlamaFactory):
    envoy = epp.start(_windows(llama))
    short, record = _ask(envoy.url, "Name a river.")
    assert short == "small"
    long, record = _ask(envoy.url, "hello " * 700)  # ~700 tokens: only the big window
    assert long == "big"
    assert record["attempts"][0]["prompt_tokens"] > 512  # the engine's own count says so
    # near the boundary: the estimate cannot place it, the engine's count does; the small
    # engine takes it, and its own usage confirms it fitted
    near, record = _ask(envoy.url, "hello " * 440)
    assert record["notes"]["context_refine"] == "exact"
    assert near == "small"
    attempt = record["attempts"][0]
    assert attempt["status"] == 200
    # the count the picker placed it by is the prompt the engine read, plus max_tokens (8)
    assert record["notes"]["context_estimate"] == attempt["prompt_tokens"] + 8 <= 512
