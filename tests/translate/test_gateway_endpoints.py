"""The small endpoints clients call: models.retrieve, count_tokens, Ollama's listings."""

from __future__ import annotations

import anthropic
import httpx
import ollama
import openai
import pytest

from fleetgate.testing import OllamaModel
from fleetgate.testing.llama import ALIAS
from tests.engines import LlamaFactory, llama_provider
from tests.harness import Stack, anthropic_provider, deployment, ollama_provider


@pytest.fixture
def mixed(stack: Stack) -> Stack:
    """An Ollama worker, a vLLM engine and an Anthropic API, each serving one model."""
    worker = stack.ollama("w", OllamaModel("llama3.2:3b", num_ctx=8192))
    engine = stack.engine("v", context_window=32768)
    api = stack.anthropic("claude")
    stack.start_gateway(
        {
            "providers": [
                ollama_provider("ol", worker),
                {"id": "vl", "kind": "vllm", "base_url": engine.url + "/v1"},
                anthropic_provider("an", api),
            ],
            "deployments": [
                deployment("small", "ol", upstream_model="llama3.2:3b"),
                deployment("big", "vl", context_window=32768),
                deployment("claude", "an", upstream_model="claude-x"),
            ],
            "virtual_models": [{"name": "coder", "routes": [{"model": "big"}]}],
        }
    )
    return stack


def test_models_retrieve(mixed: Stack, client_for) -> None:
    client: openai.OpenAI = client_for(mixed)
    model = client.models.retrieve("big")
    assert (model.id, model.object) == ("big", "model")
    assert model.model_extra["context_length"] == 32768
    assert client.models.retrieve("coder").id == "coder"
    with pytest.raises(openai.NotFoundError) as err:
        client.models.retrieve("nope")
    assert err.value.body["code"] == "model_not_found"


def test_models_list_and_retrieve_in_the_anthropic_sdk(mixed: Stack) -> None:
    c = anthropic.Anthropic(base_url=mixed.url, api_key="x", max_retries=0, timeout=10)
    page = c.models.list()
    models = {m.id: m for m in page.data}
    assert set(models) == {"small", "big", "claude", "coder"} and page.has_more is False
    big = models["big"]
    assert (big.type, big.display_name, big.max_input_tokens) == ("model", "big", 32768)
    assert big.created_at.year >= 1970
    coder = c.models.retrieve("coder")
    assert (coder.id, coder.type, coder.max_input_tokens) == ("coder", "model", 32768)
    with pytest.raises(anthropic.NotFoundError) as err:
        c.models.retrieve("nope")
    # in Anthropic's shape: the SDK says so with its `anthropic-version` header
    assert err.value.body["type"] == "error"
    assert err.value.body["error"]["type"] == "not_found_error"
    assert "nope" in err.value.body["error"]["message"]


def test_tags_list_every_reachable_model_with_real_worker_facts(mixed: Stack) -> None:
    models = {m.model: m for m in ollama.Client(host=mixed.url, timeout=10).list().models}
    assert set(models) == {"small", "big", "claude", "coder"}
    small = models["small"]
    assert small.size == 4_900_000_000 and len(small.digest) == 32
    assert small.details.family == "llama" and small.details.quantization_level == "Q4_K_M"
    assert small.modified_at.year > 2000
    assert models["big"].size == 0  # no Ollama worker to say


def test_ps_lists_loaded_models(mixed: Stack) -> None:
    c = ollama.Client(host=mixed.url, timeout=10)
    assert {m.model for m in c.ps().models} == {"big", "claude"}  # engines keep them loaded
    c.generate(model="small", prompt="hi", stream=False, options={"num_ctx": 4096})
    loaded = {m.model: m for m in c.ps().models}
    assert loaded["small"].size_vram == 4_900_000_000 and loaded["small"].context_length == 4096
    assert loaded["big"].context_length == 32768


def test_show_from_a_worker_or_from_the_fleet(mixed: Stack) -> None:
    c = ollama.Client(host=mixed.url, timeout=10)
    assert c.show("small").modelinfo["llama.context_length"] == 131072  # the worker's own
    big = c.show("big")
    assert big.modelinfo["fleetgate.context_length"] == 32768
    assert "completion" in big.capabilities and "tools" in big.capabilities
    with pytest.raises(ollama.ResponseError) as err:
        c.show("nope")
    assert err.value.status_code == 404


def test_show_and_tags_for_virtual_models(stack: Stack) -> None:
    """A virtual model's name is answered from the fleet, also where it shadows a real model
    an Ollama worker serves: the name reaches the virtual model, so that is what is shown."""
    worker = stack.ollama("w", OllamaModel("llama3.2:3b", num_ctx=8192))
    engine = stack.engine("v", context_window=32768)
    stack.start_gateway(
        {
            "providers": [
                ollama_provider("ol", worker),
                {"id": "vl", "kind": "vllm", "base_url": engine.url + "/v1"},
            ],
            "deployments": [
                deployment("small", "ol", upstream_model="llama3.2:3b"),
                deployment("big", "vl", context_window=32768),
            ],
            "virtual_models": [
                {"name": "Coder", "routes": [{"model": "big"}]},
                {
                    "name": "small",
                    "allow_shadowing": True,
                    "routes": [{"model": "big"}, {"deployment": "ol"}],
                },
            ],
        }
    )
    c = ollama.Client(host=stack.url, timeout=10)
    names = [m.model for m in c.list().models]
    assert sorted(names) == ["Coder", "big", "small"]  # each name once
    coder = c.show("coder")  # virtual names match whatever their case
    assert coder.modelinfo["fleetgate.context_length"] == 32768
    assert "tools" in coder.capabilities and "a virtual model" in coder.modelfile
    shadowing = c.show("small")  # the fleet's answer: its routes' largest window (big's)
    assert shadowing.modelinfo["fleetgate.context_length"] == 32768
    assert "llama.context_length" not in shadowing.modelinfo  # not the worker's own show
    answer = c.chat(model="Coder", messages=[{"role": "user", "content": "hi"}], stream=False)
    assert answer.message.content.startswith("v says:")


def test_ollama_chat_reaches_an_anthropic_provider(mixed: Stack) -> None:
    c = ollama.Client(host=mixed.url, timeout=10)
    resp = c.chat(model="claude", messages=[{"role": "user", "content": "hi"}], stream=False)
    assert resp.message.content == "claude says: w1 w2 w3 w4 w5 w6 w7 w8"
    parts = list(c.chat(model="claude", messages=[{"role": "user", "content": "hi"}], stream=True))
    assert "".join(p.message.content for p in parts) == resp.message.content
    assert parts[-1].done and parts[-1].eval_count == 8


def test_responses_reach_an_anthropic_provider(mixed: Stack, client_for) -> None:
    client: openai.OpenAI = client_for(mixed)
    assert client.responses.create(model="claude", input="hi").output_text.startswith("claude")
    with client.responses.stream(model="claude", input="hi") as stream:
        final = stream.get_final_response()
    assert final.output_text == "claude says: w1 w2 w3 w4 w5 w6 w7 w8"
    assert final.usage is not None and final.usage.output_tokens == 8  # read mid-translation


def test_count_tokens_native_and_estimated(mixed: Stack) -> None:
    c = anthropic.Anthropic(base_url=mixed.url, api_key="x", max_retries=0, timeout=10)
    ask = {"messages": [{"role": "user", "content": "one two three"}]}
    raw = c.messages.with_raw_response.count_tokens(model="claude", **ask)
    assert raw.parse().input_tokens == 4  # the Anthropic API's own count
    assert raw.headers["x-fleetgate-token-count"] == "exact"
    estimated = c.messages.with_raw_response.count_tokens(model="small", **ask)
    assert estimated.headers["x-fleetgate-token-count"] == "estimate"
    assert estimated.parse().input_tokens > 0
    with pytest.raises(anthropic.NotFoundError):
        c.messages.count_tokens(model="nope", **ask)
    bad = httpx.post(mixed.url + "/v1/messages/count_tokens", json={"model": "big"}, timeout=5)
    assert bad.status_code == 400 and bad.json()["type"] == "error"


def test_count_tokens_on_llama_is_exact(stack: Stack, llama: LlamaFactory) -> None:
    server = llama(n_ctx=1024)
    stack.start_gateway(
        {
            "providers": [
                llama_provider("native", server),
                llama_provider("chat", server, protocols=["openai"]),
            ],
            "deployments": [
                {"id": "n", "model": "nat", "provider": "native", "upstream_model": ALIAS},
                {"id": "t", "model": "tr", "provider": "chat", "upstream_model": ALIAS},
            ],
        }
    )
    c = anthropic.Anthropic(base_url=stack.url, api_key="x", max_retries=0, timeout=30)
    ask = {"system": "Be exact.", "messages": [{"role": "user", "content": "How long is this?"}]}
    counted = c.messages.with_raw_response.count_tokens(model="nat", **ask)
    assert counted.headers["x-fleetgate-token-count"] == "exact"
    real = c.messages.create(model="nat", max_tokens=1, **ask)
    seen = real.usage.input_tokens + (real.usage.cache_read_input_tokens or 0)
    assert counted.parse().input_tokens == seen
    # through the tokenizer (apply-template + tokenize) for a chat-only provider: the same
    tokenized = c.messages.with_raw_response.count_tokens(model="tr", **ask)
    assert tokenized.headers["x-fleetgate-token-count"] == "exact"
    assert tokenized.parse().input_tokens == seen
