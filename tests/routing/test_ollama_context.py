"""Context as a runtime resource on Ollama fleets: admission, num_ctx, loaded bonus, truncation."""

from __future__ import annotations

from typing import Any

import httpx
import ollama
import pytest

from fleetgate.testing import OllamaModel
from tests.harness import Stack, ollama_provider, provider, wait_until

WORD = "alpha "  # the estimate (llama3 family) costs about 0.84..1.03 tokens a word, the fake 1


def words(n: int) -> str:
    return (WORD * n).strip()


def native_chat(stack: Stack, text: str, **extra: Any) -> httpx.Response:
    body = {"model": "m", "messages": [{"role": "user", "content": text}], "stream": False}
    return httpx.post(stack.url + "/api/chat", timeout=20, json={**body, **extra})


def start(
    stack: Stack, workers: dict[str, Any], caps: dict[str, Any] | None = None, **provider_extra: Any
) -> dict[str, dict]:
    config: dict[str, Any] = {
        "providers": [
            {**ollama_provider(name, w), **provider_extra.get(name, {})}
            for name, w in workers.items()
        ],
        "deployments": [
            {"id": name, "model": "m", "provider": name, "upstream_model": "llama3.2"}
            for name in workers
        ],
    }
    if caps is not None:
        config["model_capabilities"] = caps
    gw = stack.start_gateway(config)
    stack.lt.run(gw.pipeline.discovery.refresh())  # what the admin-only refresh endpoint does
    body = httpx.get(stack.url + "/v1/fleet/windows", timeout=10).json()
    return {row["deployment"]: row for row in body["data"]}


@pytest.fixture
def two(stack: Stack) -> Stack:
    small = stack.ollama("small", OllamaModel("llama3.2", num_ctx=2048, max_context=8192))
    big = stack.ollama("big", OllamaModel("llama3.2", num_ctx=4096, max_context=8192))
    view = start(
        stack,
        {"small": small, "big": big},
        {"context_guard": "reject", "context": {"max_requested_tokens": 6144}},
        small={"context_limits": {"*": 32768, "llama*": 5000}},
    )
    assert (view["small"]["tokens"], view["big"]["tokens"]) == (2048, 4096)
    return stack


def test_best_fit_and_admission_rejection_before_any_upstream_call(two: Stack) -> None:
    small, big = two.workers["small"], two.workers["big"]
    assert native_chat(two, "hi").headers["x-fleetgate-route"] == "small"
    # + 1024 output reserve: may not fit small's 2048, and small truncates silently
    assert native_chat(two, words(1100)).headers["x-fleetgate-route"] == "big"
    before = len(small.inference_requests()) + len(big.inference_requests())
    resp = native_chat(two, words(4000))  # even the lower bound is over 4096
    assert resp.status_code == 400
    message = resp.json()["error"]
    assert "4096 tokens" in message and "needs about" in message  # estimate and window
    assert len(small.inference_requests()) + len(big.inference_requests()) == before
    with pytest.raises(ollama.ResponseError) as err:
        ollama.Client(host=two.url, timeout=10).generate(model="m", prompt=words(4000))
    assert err.value.status_code == 400


def test_num_ctx_must_be_a_positive_json_integer(two: Stack) -> None:
    for bad in (4096.0, "4096", 0, -1, True):
        resp = native_chat(two, "hi", options={"num_ctx": bad})
        assert resp.status_code == 400, bad
        assert "options.num_ctx" in resp.json()["error"]
    assert not two.workers["small"].inference_requests()


def test_num_ctx_caps_gateway_model_maximum_and_context_limits(two: Stack) -> None:
    over_gateway = native_chat(two, "hi", options={"num_ctx": 7000})
    assert over_gateway.status_code == 400
    assert "max_requested_tokens" in over_gateway.json()["error"]
    # 5500 is over small's `llama*` limit (5000): only big may load the model with it
    resp = native_chat(two, "hi", options={"num_ctx": 5500})
    assert resp.status_code == 200 and resp.headers["x-fleetgate-route"] == "big"
    assert two.workers["big"].inference_requests()[-1].body["options"] == {"num_ctx": 5500}
    # the request's window is its num_ctx: 1500 words fit 5500, though no loaded window does
    assert native_chat(two, words(1500), options={"num_ctx": 5500}).status_code == 200


def test_num_ctx_over_every_model_maximum_is_a_400_naming_the_field(stack: Stack) -> None:
    w = stack.ollama("w", OllamaModel("llama3.2", num_ctx=2048, max_context=8192))
    start(stack, {"w": w}, {"context": {"max_requested_tokens": -1}})
    resp = native_chat(stack, "hi", options={"num_ctx": 9000})
    assert resp.status_code == 400
    assert "model maximum 8192" in resp.json()["error"]
    assert native_chat(stack, "hi", options={"num_ctx": 8192}).status_code == 200


def test_loaded_model_bonus_and_its_loss_to_a_larger_num_ctx(stack: Stack) -> None:
    cold = stack.ollama("cold", OllamaModel("llama3.2", num_ctx=4096))
    warm = stack.ollama("warm", OllamaModel("llama3.2"), loaded={"llama3.2": 4096})
    view = start(stack, {"cold": cold, "warm": warm}, {})
    assert (view["cold"]["source"], view["warm"]["source"]) == ("api_show", "api_ps")
    assert view["warm"]["loaded"] and not view["cold"]["loaded"]
    # equal windows: the warm worker wins although the cold one is first in the config
    assert native_chat(stack, "hi").headers["x-fleetgate-route"] == "warm"
    explain = httpx.post(
        stack.url + "/v1/routing/explain",
        timeout=5,
        json={"endpoint": "ollama.chat", "model": "m", "messages": []},
    ).json()
    assert explain["notes"]["loaded"] == ["warm"]
    # a larger num_ctx makes the warm worker reload too: no bonus, the two tie (and the
    # tie-breakers decide: nobody recorded this prompt, the bonus alone chose before)
    explain = httpx.post(
        stack.url + "/v1/routing/explain",
        timeout=5,
        json={
            "endpoint": "ollama.chat",
            "model": "m",
            "options": {"num_ctx": 8192},
            "messages": [{"role": "user", "content": "hi"}],
        },
    ).json()
    assert "loaded" not in explain["notes"]
    assert explain["headers"]["X-Fleetgate-Affinity"] == "miss"
    resp = native_chat(stack, "hi", options={"num_ctx": 8192})
    assert resp.status_code == 200


def test_warn_routes_to_the_largest_window_and_flags_it(stack: Stack) -> None:
    small = stack.ollama("small", OllamaModel("llama3.2", num_ctx=2048))
    big = stack.ollama("big", OllamaModel("llama3.2", num_ctx=3072))
    start(stack, {"small": small, "big": big}, {"context_guard": "warn"})
    resp = native_chat(stack, words(2000))
    assert resp.status_code == 200
    assert resp.headers["x-fleetgate-route"] == "big"
    assert resp.headers["x-fleetgate-context-overflow"] == "3072"
    assert "x-fleetgate-context-overflow" not in native_chat(stack, "hi").headers


def test_silent_truncation_is_detected_recorded_and_prevented(stack: Stack) -> None:
    # the config says 4096 but the worker cuts at 256: a silent worker is only ever sent
    # what fits its window, so only a misstated window lets truncation through
    w = stack.ollama("w", OllamaModel("llama3.2"), default_num_ctx=256)
    # no model_capabilities block: the guard allows overflow
    start(stack, {"w": w}, w={"discovery": False, "default_context_tokens": 4096})
    resp = native_chat(stack, words(600))
    assert resp.status_code == 200 and resp.json()["prompt_eval_count"] == 256
    assert resp.headers["x-fleetgate-truncation-suspected"] == "reported=256; lower_bound=375"
    record = httpx.get(f"{stack.url}/v1/requests/{resp.headers['x-request-id']}", timeout=5)
    assert record.json()["notes"]["truncation_suspected"] == {"reported": 256, "lower_bound": 375}
    assert "x-fleetgate-truncation-suspected" not in native_chat(stack, words(100)).headers
    # streamed: no header possible, but recorded
    streamed = httpx.post(
        stack.url + "/api/generate", timeout=20, json={"model": "m", "prompt": words(600)}
    )
    rid = streamed.headers["x-request-id"]
    wait_until(
        lambda: httpx.get(f"{stack.url}/v1/requests/{rid}", timeout=5).status_code == 200,
        5,
        "record written",
    )
    notes = httpx.get(f"{stack.url}/v1/requests/{rid}", timeout=5).json()["notes"]
    assert notes["truncation_suspected"]["reported"] == 256
    metrics = httpx.get(stack.url + "/metrics", timeout=5).text
    assert 'fleetgate_truncation_suspected_total{deployment="w"} 2.0' in metrics


def test_truncation_num_ctx_sends_the_workers_window(stack: Stack) -> None:
    w = stack.ollama("w", OllamaModel("llama3.2", num_ctx=2048), loaded={"llama3.2": 3000})
    start(stack, {"w": w}, {"truncation_num_ctx": True, "context_guard": "warn"})
    native_chat(stack, "hi", options={"temperature": 0})
    assert w.inference_requests()[-1].body["options"] == {"temperature": 0, "num_ctx": 3000}
    native_chat(stack, "hi", options={"num_ctx": 1024})  # the client's own num_ctx stands
    assert w.inference_requests()[-1].body["options"] == {"num_ctx": 1024}


def test_a_context_error_stating_the_limit_updates_the_window_at_once(
    stack: Stack, client_for
) -> None:
    short = stack.engine("short", context_window=1000)
    long = stack.engine("long", context_window=8000)
    stack.start_gateway(
        {
            "providers": [provider("short", short), provider("long", long)],
            "deployments": [
                {"id": "short", "model": "m", "provider": "short", "context_window": 4000},
                {"id": "long", "model": "m", "provider": "long", "context_window": 8000},
            ],
        }
    )
    client = client_for(stack)
    text = words(1500)  # 1501 fake tokens: over short's real 1000, under its declared 4000
    first = client.chat.completions.with_raw_response.create(
        model="m", messages=[{"role": "user", "content": text}], max_tokens=10
    )
    assert first.headers["x-fleetgate-route"] == "long"
    assert first.headers["x-fleetgate-attempts"] == "2"
    rows = httpx.get(stack.url + "/v1/fleet/windows", timeout=5).json()["data"]
    row = next(r for r in rows if r["deployment"] == "short")
    assert (row["tokens"], row["source"]) == (1000, "parsed_from_error")
    short.reset_counters()
    second = client.chat.completions.with_raw_response.create(
        model="m", messages=[{"role": "user", "content": words(1200)}], max_tokens=10
    )
    assert second.headers["x-fleetgate-route"] == "long"  # best fit now knows short is 1000
    assert second.headers["x-fleetgate-attempts"] == "1"
    assert [r for r in short.requests if r.path == "/v1/chat/completions"] == []


def test_native_requests_too_big_for_workers_go_to_a_larger_translated_window(
    stack: Stack,
) -> None:
    """A big vLLM deployment of the same model serves an /api/chat request (translated)
    that no Ollama worker's window holds."""
    w = stack.ollama("w", OllamaModel("llama3.2", num_ctx=2048))
    v = stack.engine("v", context_window=65536)
    gw = stack.start_gateway(
        {
            "model_capabilities": {"context_guard": "reject"},
            "providers": [ollama_provider("w", w), provider("v", v)],
            "deployments": [
                {"id": "w", "model": "m", "provider": "w", "upstream_model": "llama3.2"},
                {"id": "v", "model": "m", "provider": "v", "context_window": 65536},
            ],
        }
    )
    stack.lt.run(gw.pipeline.discovery.refresh())
    resp = native_chat(stack, words(2000))
    assert resp.status_code == 200 and resp.headers["x-fleetgate-route"] == "v"
    assert resp.json()["done"] is True and resp.json()["message"]["content"].startswith("v says")
    assert not w.inference_requests()
    assert v.requests[-1].path == "/v1/chat/completions"
    emb = httpx.post(stack.url + "/api/embed", timeout=10, json={"model": "m", "input": words(800)})
    assert emb.status_code == 200  # no output reserve for embeddings


def test_observe_mode_never_refuses_but_flags(stack: Stack) -> None:
    w = stack.ollama("w", OllamaModel("llama3.2", num_ctx=2048, max_context=8192))
    start(stack, {"w": w}, {"mode": "observe", "context": {"max_requested_tokens": 4096}})
    resp = native_chat(stack, words(2000))
    assert resp.status_code == 200
    assert resp.headers["x-fleetgate-context-overflow"] == "2048"
    assert native_chat(stack, "hi", options={"num_ctx": 6000}).status_code == 200
    assert w.inference_requests()[-1].body["options"] == {"num_ctx": 6000}
