"""Ollama's `options.num_ctx` on context tiers of real llama.cpp engines: the window the
client asks for places the request, through the official ollama SDK."""

from __future__ import annotations

from typing import Any

import httpx
import ollama
import pytest

from fleetgate.testing import OllamaModel
from fleetgate.testing.llama import ALIAS
from tests.engines import TO_THE_LIMIT, LlamaFactory, llama_provider
from tests.harness import Stack, ollama_provider

SHORT = [{"role": "user", "content": "hello there"}]


class Seen:
    """An ollama SDK client that keeps the gateway's headers of each answer."""

    def __init__(self, stack: Stack) -> None:
        self.headers: list[httpx.Headers] = []
        self.client = ollama.Client(
            host=stack.url, timeout=60, event_hooks={"response": [self._keep]}
        )

    def _keep(self, response: httpx.Response) -> None:
        self.headers.append(response.headers)

    @property
    def route(self) -> str:
        return str(self.headers[-1]["x-fleetgate-route"])


def start_tiers(stack: Stack, llama: LlamaFactory, limits: bool = False) -> Stack:
    """Model `tiny` on a 512 and a 4096 engine (windows discovered from `/props`; with
    `limits`, each provider's `context_limits` says the same), and the guard refuses what
    fits nowhere."""
    engines = {"small": llama(n_ctx=512), "big": llama(n_ctx=4096)}
    gw = stack.start_gateway(
        {
            "model_capabilities": {"context_guard": "reject"},
            "providers": [
                llama_provider(
                    name,
                    engine,
                    discovery=True,
                    context_limits={"*": engine.n_ctx} if limits else {},
                )
                for name, engine in engines.items()
            ],
            "deployments": [
                {
                    "id": n,
                    "model": "tiny",
                    "provider": n,
                    "upstream_model": ALIAS,
                    "params": TO_THE_LIMIT,
                }
                for n in engines
            ],
        }
    )
    stack.lt.run(gw.pipeline.discovery.refresh())
    rows = httpx.get(stack.url + "/v1/fleet/windows", timeout=10).json()["data"]
    assert {r["deployment"]: r["tokens"] for r in rows} == {"small": 512, "big": 4096}
    return stack


@pytest.fixture
def tiers(stack: Stack, llama: LlamaFactory) -> Stack:
    return start_tiers(stack, llama)


def test_chat_num_ctx_is_the_window_the_request_is_placed_in(tiers: Stack) -> None:
    seen = Seen(tiers)
    chat = seen.client.chat
    answer = chat(model="tiny", messages=SHORT, options={"num_ctx": 4096, "num_predict": 300})
    assert seen.route == "big"
    assert answer.eval_count == 300  # its own limit, on a window that holds it
    assert "x-fleetgate-truncated" not in seen.headers[-1]
    # the estimate is unchanged: num_ctx is a wish, not the request's size
    assert int(seen.headers[-1]["x-fleetgate-context-estimate"].split(";")[0]) < 512
    chat(model="tiny", messages=SHORT, options={"num_ctx": 2048, "num_predict": 8})
    assert seen.route == "big"  # the smallest window that holds 2048
    chat(model="tiny", messages=SHORT, options={"num_ctx": 512, "num_predict": 8})
    assert seen.route == "small"  # 512 holds both the estimate and the wish
    chat(model="tiny", messages=SHORT, options={"num_predict": 8})
    assert seen.route == "small"  # without num_ctx: placed as before


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_generate_num_ctx_places_the_request_whole_or_streamed(tiers: Stack, stream: bool) -> None:
    seen = Seen(tiers)

    def generate(**options: int) -> list[Any]:
        answer = seen.client.generate(
            model="tiny", prompt="hello there", stream=stream, options=options
        )
        return list(answer) if stream else [answer]

    last = generate(num_ctx=4096, num_predict=300)[-1]
    assert seen.route == "big"
    assert last.done and last.eval_count == 300
    generate(num_predict=8)
    assert seen.route == "small"


def test_a_num_ctx_no_window_holds_is_routed_biggest_first_never_refused(
    stack: Stack, llama: LlamaFactory
) -> None:
    """Over every window (and every `context_limits` entry) of the engines, which do not take
    num_ctx: not refused, no worker dropped, the biggest window first."""
    tiers = start_tiers(stack, llama, limits=True)
    body = {
        "endpoint": "ollama.chat",
        "model": "tiny",
        "messages": SHORT,
        "options": {"num_ctx": 8192, "num_predict": 8},
    }
    plan = httpx.post(tiers.url + "/v1/routing/explain", timeout=10, json=body).json()
    assert "error" not in plan
    assert [c["deployment"] for c in plan["candidates"]] == ["big", "small"]
    assert plan["dropped"] == []
    seen = Seen(tiers)
    for stream in (False, True):
        answer = seen.client.generate(
            model="tiny", prompt="hello", stream=stream, options={"num_ctx": 8192, "num_predict": 8}
        )
        last = list(answer)[-1] if stream else answer
        assert seen.route == "big" and last.done
    # a prompt no window holds is still refused, on its own size
    with pytest.raises(ollama.ResponseError) as err:
        seen.client.chat(
            model="tiny",
            messages=[{"role": "user", "content": "hello " * 5000}],
            options={"num_ctx": 8192},
        )
    assert err.value.status_code == 400 and "4096 tokens" in str(err.value)


def test_an_ollama_worker_beside_the_engines_keeps_num_ctx_as_its_window(
    stack: Stack, llama: LlamaFactory
) -> None:
    """Ollama loads the model with the request's num_ctx: there it is the window (and its
    caps drop the worker); the engines only rank by it."""
    worker = stack.ollama("w", OllamaModel("llama3.2", num_ctx=2048, max_context=16384))
    gw = stack.start_gateway(
        {
            "providers": [
                ollama_provider("w", worker),
                llama_provider("small", llama(n_ctx=512), discovery=True),
                llama_provider("big", llama(n_ctx=4096), discovery=True),
            ],
            "deployments": [
                {"id": "w", "model": "tiny", "provider": "w", "upstream_model": "llama3.2"},
                {"id": "small", "model": "tiny", "provider": "small", "upstream_model": ALIAS},
                {"id": "big", "model": "tiny", "provider": "big", "upstream_model": ALIAS},
            ],
        }
    )
    stack.lt.run(gw.pipeline.discovery.refresh())

    def plan(**options: int) -> list[tuple[str, int]]:
        body = {"endpoint": "ollama.chat", "model": "tiny", "messages": SHORT, "options": options}
        got = httpx.post(stack.url + "/v1/routing/explain", timeout=10, json=body).json()
        return [(c["deployment"], c["context_window"]) for c in got["candidates"]]

    assert plan(num_predict=8) == [("small", 512), ("w", 2048), ("big", 4096)]
    # 8192 fits only the worker, which will load the model with it; biggest engine next
    assert plan(num_ctx=8192, num_predict=8) == [("w", 8192), ("big", 4096), ("small", 512)]
    assert plan(num_ctx=1024, num_predict=8) == [("w", 1024), ("big", 4096), ("small", 512)]
    # over the worker's model maximum: the worker is dropped, the engines are not
    assert plan(num_ctx=20000, num_predict=8) == [("big", 4096), ("small", 512)]
    seen = Seen(stack)
    seen.client.chat(model="tiny", messages=SHORT, options={"num_ctx": 8192, "num_predict": 8})
    assert seen.route == "w"
    assert worker.inference_requests()[-1].body["options"]["num_ctx"] == 8192
