"""A context error may state the worker's window, and the gateway trusts it at once. A
window no engine can have (zero, negative) is not one: trusted, it became the deployment's
window (placement's, and `/v1/fleet/windows`') until the cache period ended."""

from __future__ import annotations

import httpx
import orjson
import pytest

from tests.harness import Stack, deployment, provider
from tests.security.servers import Scripted, chat_answer

MSG = [{"role": "user", "content": "hi"}]


@pytest.mark.parametrize(
    "error",
    [
        {"type": "exceed_context_size_error", "n_ctx": 0, "n_prompt_tokens": 9,
         "message": "the request exceeds the available context size"},
        {"type": "exceed_context_size_error", "n_ctx": -4096, "n_prompt_tokens": 9,
         "message": "the request exceeds the available context size"},
        {"message": "This model's maximum context length is 0 tokens. However, you "
         "requested 20 tokens (9 in the messages, 11 in the completion).",
         "type": "invalid_request_error", "code": "context_length_exceeded"},
    ],
)  # fmt: skip
def test_a_window_no_engine_can_have_is_not_trusted(stack: Stack, error: dict[str, object]) -> None:
    up = Scripted()
    stack.lt.run(up.start())
    try:
        stack.start_gateway(
            {
                "providers": [provider("p", up)],
                "deployments": [deployment("m", "p", context_window=8192)],
            }
        )
        body = {"model": "m", "messages": MSG, "max_tokens": 11}
        up.answer = (400, {"Content-Type": "application/json"}, orjson.dumps({"error": error}))
        first = httpx.post(stack.url + "/v1/chat/completions", json=body, timeout=10)
        assert first.status_code == 400, first.text
        up.answer = chat_answer({"prompt_tokens": 9, "completion_tokens": 1, "total_tokens": 10})
        again = httpx.post(stack.url + "/v1/chat/completions", json=body, timeout=10)
        assert again.status_code == 200, again.text
        windows = httpx.get(stack.url + "/v1/fleet/windows", timeout=5).json()["data"]
        assert [(w["tokens"], w["source"]) for w in windows] == [(8192, "config")]
    finally:
        stack.lt.run(up.stop())
