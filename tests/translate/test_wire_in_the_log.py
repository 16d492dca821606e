"""The request log says, per attempt, how the request was spoken to the deployment:
natively, or translated from the client's endpoint to the upstream's."""

from __future__ import annotations

import anthropic
import httpx
import openai

from fleetgate.testing import Fault
from tests.admin.helpers import admin, options
from tests.harness import Stack, provider, wait_until

MSG = [{"role": "user", "content": "hello there"}]


def _logged(stack: Stack, request_id: str) -> list[dict]:
    """The attempts as the store keeps them (the admin view) and as the recent-requests
    API shows them: the same wires in both."""
    api = admin(stack)
    url = f"/admin/requests/{request_id}"
    wait_until(lambda: api.get(url).status_code == 200, 10, "the request in the store")
    stored = api.get(url).json()["attempts"]
    recent = httpx.get(f"{stack.url}/v1/requests/{request_id}").json()["attempts"]
    assert [a["wire"] for a in recent] == [a["wire"] for a in stored]
    return stored


def test_each_attempt_records_its_wire(stack: Stack, db_url: str) -> None:
    native = stack.engine("v")
    chat_only = stack.engine("s")
    lacking = stack.engine("o", missing_paths=("/v1/messages",))
    stack.start_gateway(
        {
            "providers": [
                provider("pv", native),  # vllm: serves Messages natively
                {"id": "ps", "kind": "sglang", "base_url": chat_only.url + "/v1"},
                {"id": "po", "kind": "openai", "base_url": lacking.url + "/v1"},
            ],
            "deployments": [
                {"model": "m", "provider": "pv", "id": "pv"},
                {"model": "m", "provider": "ps", "id": "ps"},
                {"model": "m", "provider": "po", "id": "po"},
            ],
            "virtual_models": [
                {"name": "v-then-s", "routes": [{"deployment": "pv"}, {"deployment": "ps"}]},
                {"name": "only-o", "routes": [{"deployment": "po"}]},
            ],
        },
        options(db_url),
    )
    claude = anthropic.Anthropic(base_url=stack.url, api_key="x", max_retries=0, timeout=10)
    gpt = openai.OpenAI(base_url=stack.url + "/v1", api_key="x", max_retries=0, timeout=10)

    # the first deployment fails natively; the fallback is translated
    native.fail_next(Fault("status", status=500))
    raw = claude.messages.with_raw_response.create(model="v-then-s", max_tokens=4, messages=MSG)
    assert raw.parse().content[0].text == "s says: w1 w2 w3 w4"
    attempts = _logged(stack, raw.headers["x-request-id"])
    assert [(a["deployment_id"], a["status"], a["wire"]) for a in attempts] == [
        ("pv", 500, "native"),
        ("ps", 200, "messages→chat.completions"),
    ]

    # an openai host without /v1/messages: tried natively, translated within the attempt
    raw = claude.messages.with_raw_response.create(model="only-o", max_tokens=2, messages=MSG)
    attempts = _logged(stack, raw.headers["x-request-id"])
    assert [(a["deployment_id"], a["wire"]) for a in attempts] == [
        ("po", "messages→chat.completions")
    ]

    # OpenAI chat is native everywhere; Ollama's /api/chat on vLLM is translated, streamed too
    raw = gpt.chat.completions.with_raw_response.create(model="v-then-s", messages=MSG)
    assert [a["wire"] for a in _logged(stack, raw.headers["x-request-id"])] == ["native"]
    with httpx.stream(
        "POST", f"{stack.url}/api/chat", json={"model": "v-then-s", "messages": MSG}
    ) as resp:
        assert resp.status_code == 200 and resp.read().count(b"\n") >= 2
        request_id = resp.headers["x-request-id"]
    assert [a["wire"] for a in _logged(stack, request_id)] == ["ollama.chat→chat.completions"]
