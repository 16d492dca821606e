"""The official SDKs, unchanged, against the REAL llama.cpp engine through translation.

The provider says `protocols: [openai]`, so every non-chat request is translated to Chat
Completions (llama.cpp also serves Messages and Responses natively; both are checked).
"""

from __future__ import annotations

from typing import Any, Literal

import anthropic
import httpx
import pytest
from pydantic import BaseModel

from fleetgate.testing.llama import ALIAS
from tests.engines import LlamaFactory, llama_provider
from tests.harness import Stack
from tests.translate.test_ollama_clients import durations_hold

WEATHER = {
    "name": "get_weather",
    "description": "Weather for a city",
    "input_schema": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
}


@pytest.fixture
def on_llama(stack: Stack, llama: LlamaFactory) -> Stack:
    server = llama(n_ctx=1024)
    stack.start_gateway(
        {
            "providers": [
                llama_provider("chat", server, protocols=["openai"]),
                llama_provider("native", server),
            ],
            "deployments": [
                {"id": "t", "model": "tr", "provider": "chat", "upstream_model": ALIAS},
                {"id": "n", "model": "nat", "provider": "native", "upstream_model": ALIAS},
            ],
        }
    )
    return stack


def prompt_tokens(usage: anthropic.types.Usage) -> int:
    """The whole prompt: Anthropic's input_tokens leave out prompt-cache reads."""
    return usage.input_tokens + (usage.cache_read_input_tokens or 0)


def client(stack: Stack) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=stack.url, api_key="x", max_retries=0, timeout=30)


@pytest.mark.parametrize("model", ["tr", "nat"])
def test_anthropic_messages_on_llama(on_llama: Stack, model: str) -> None:
    c = client(on_llama)
    msg = c.messages.create(
        model=model,
        max_tokens=6,
        system=[{"type": "text", "text": "You are terse.", "cache_control": {"type": "ephemeral"}}],
        messages=[{"role": "user", "content": "Say hello."}],
    )
    assert msg.model == model and msg.stop_reason == "max_tokens"
    assert msg.usage.output_tokens == 6 and prompt_tokens(msg.usage) > 10
    assert msg.content[0].type == "text" and msg.content[0].text
    with c.messages.stream(
        model=model, max_tokens=5, messages=[{"role": "user", "content": "Count."}]
    ) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text == final.content[0].text and final.usage.output_tokens == 5
    assert prompt_tokens(final.usage) > 5


def test_translated_and_native_count_the_same_prompt(on_llama: Stack) -> None:
    c = client(on_llama)
    ask = {"max_tokens": 2, "messages": [{"role": "user", "content": "How many tokens is this?"}]}
    translated = c.messages.create(model="tr", system="Be exact.", **ask)
    native = c.messages.create(model="nat", system="Be exact.", **ask)
    assert prompt_tokens(translated.usage) == prompt_tokens(native.usage)


def test_anthropic_tools_and_results_template_as_natively(on_llama: Stack) -> None:
    """The tiny random model never calls a tool, but the engine renders what it is given:
    a translated request with tools and a tool_use / tool_result history (is_error too)
    costs exactly the prompt tokens of the same request sent natively to /v1/messages."""
    c = client(on_llama)
    history = [
        {"role": "user", "content": "Weather in Oslo and Rome?"},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Checking both."},
                {"type": "tool_use", "id": "t1", "name": "get_weather", "input": {"city": "Oslo"}},
                {"type": "tool_use", "id": "t2", "name": "get_weather", "input": {"city": "Rome"}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "t1", "content": "rain"},
                {"type": "tool_result", "tool_use_id": "t2", "content": "sun"},
            ],
        },
    ]
    seen = {}
    for model in ("tr", "nat"):
        with_tools = c.messages.create(model=model, max_tokens=2, tools=[WEATHER], messages=history)
        plain = c.messages.create(model=model, max_tokens=2, messages=history[:1])
        seen[model] = (prompt_tokens(with_tools.usage), prompt_tokens(plain.usage))
    assert seen["tr"] == seen["nat"]
    assert seen["tr"][0] > seen["tr"][1] + 40  # the tool schema and the calls are in the prompt
    failed = [{**history[2]["content"][0], "is_error": True}, history[2]["content"][1]]
    answer = c.messages.create(
        model="tr",
        max_tokens=3,
        tools=[WEATHER],
        messages=[*history[:2], {"role": "user", "content": failed}],
    )
    assert answer.usage.output_tokens == 3 and answer.stop_reason == "max_tokens"


class Answer(BaseModel):
    answer: Literal["yes", "no"]
    n: int


def test_structured_output_on_llama_follows_the_schema(on_llama: Stack) -> None:
    """`messages.parse(output_format=...)` on llama.cpp: its /v1/messages would answer the
    tiny random model's free text, so the request goes to chat completions, where the
    engine holds the output to the schema; the same deployment stays native otherwise."""
    c = client(on_llama)
    ask = {"model": "nat", "messages": [{"role": "user", "content": "yes or no?"}]}
    parsed = c.messages.parse(
        max_tokens=300,
        output_format=Answer,
        extra_headers={"x-request-id": "so-1"},
        **ask,
    )
    assert isinstance(parsed.parsed_output, Answer) and parsed.stop_reason == "end_turn"
    c.messages.create(max_tokens=2, extra_headers={"x-request-id": "so-2"}, **ask)
    wires = [
        httpx.get(f"{on_llama.url}/v1/requests/{rid}").json()["attempts"][0]["wire"]
        for rid in ("so-1", "so-2")
    ]
    assert wires == ["messages→chat.completions", "native"]


def test_context_error_of_llama_is_prompt_too_long(on_llama: Stack) -> None:
    with pytest.raises(anthropic.BadRequestError) as err:
        client(on_llama).messages.create(
            model="tr", max_tokens=4, messages=[{"role": "user", "content": "7 " * 1500}]
        )
    message = err.value.body["error"]["message"]
    assert message.startswith("prompt is too long: ") and "> 1024 maximum" in message


@pytest.mark.parametrize("model", ["tr", "nat"])
def test_openai_responses_on_llama(on_llama: Stack, client_for, model: str) -> None:
    oc = client_for(on_llama, timeout=30)
    resp = oc.responses.create(model=model, input="Say hi.", max_output_tokens=5)
    assert resp.model == model and resp.output_text
    assert resp.usage.output_tokens == 5
    events = list(
        oc.responses.create(model=model, input="Say hi.", max_output_tokens=4, stream=True)
    )
    assert events[0].type == "response.created"
    assert events[-1].type in ("response.completed", "response.incomplete")
    with oc.responses.stream(model=model, input="Say hi.", max_output_tokens=4) as stream:
        text = "".join(e.delta for e in stream if e.type == "response.output_text.delta")
    assert text


def test_translated_responses_count_like_chat(on_llama: Stack, client_for) -> None:
    oc = client_for(on_llama, timeout=30)
    resp = oc.responses.create(
        model="tr", instructions="Be exact.", input="Count me.", max_output_tokens=1
    )
    chat = oc.chat.completions.create(
        model="tr",
        max_tokens=1,
        messages=[
            {"role": "system", "content": "Be exact."},
            {"role": "user", "content": "Count me."},
        ],
    )
    assert resp.usage.input_tokens == chat.usage.prompt_tokens


def test_ollama_client_on_llama(on_llama: Stack) -> None:
    import ollama

    c = ollama.Client(host=on_llama.url, timeout=30)
    resp = c.chat(
        model="tr",
        messages=[{"role": "user", "content": "Say hi."}],
        options={"num_predict": 4},
        stream=False,
    )
    assert resp.done and resp.eval_count == 4 and resp.prompt_eval_count > 5
    parts = list(
        c.chat(
            model="tr",
            messages=[{"role": "user", "content": "Say hi."}],
            options={"num_predict": 4},
            stream=True,
        )
    )
    assert parts[-1].done and parts[-1].eval_count == 4
    assert parts[-1].prompt_eval_count == resp.prompt_eval_count
    # llama.cpp reports its own timings: the prompt's and the output's durations are the
    # engine's, within the total the gateway measured from the attempt's start
    assert parts[-1].eval_duration > 0 and parts[-1].prompt_eval_duration > 0
    gen = c.generate(model="tr", prompt="Once", system="Tell a story.", options={"num_predict": 3})
    assert gen.done and gen.eval_count == 3
    streamed = list(c.generate(model="tr", prompt="Once", options={"num_predict": 3}, stream=True))
    for answer in (resp, parts[-1], gen, streamed[-1]):
        durations_hold(answer)
    raw = c.generate(model="tr", prompt="Once upon", raw=True, options={"num_predict": 2})
    assert raw.prompt_eval_count == 2 and raw.eval_count == 2  # no chat template: two tokens


def test_ollama_embed_on_llama(stack: Stack, llama: LlamaFactory) -> None:
    import ollama

    server = llama(n_ctx=512, extra=("--embeddings", "--pooling", "mean"))
    stack.start_gateway(
        {
            "providers": [llama_provider("l", server)],
            "deployments": [{"id": "e", "model": "emb", "provider": "l", "upstream_model": ALIAS}],
        }
    )
    emb = ollama.Client(host=stack.url, timeout=30).embed(model="emb", input=["alpha", "beta"])
    assert len(emb.embeddings) == 2 and len(emb.embeddings[0]) > 8
    assert emb.embeddings[0] != emb.embeddings[1] and emb.prompt_eval_count >= 2
    # the older `/api/embeddings`: one prompt, one vector, the same as embed's
    legacy = ollama.Client(host=stack.url, timeout=30).embeddings(model="emb", prompt="alpha")
    assert legacy.embedding == pytest.approx(emb.embeddings[0])


def test_translated_responses_carry_logprobs(on_llama: Stack, client_for) -> None:
    oc = client_for(on_llama, timeout=30)
    ask: dict[str, Any] = {
        "model": "tr",
        "input": "Say hi.",
        "max_output_tokens": 4,
        "include": ["message.output_text.logprobs"],
        "top_logprobs": 2,
        # greedy: a sampled token whose bytes end inside a character is merged by
        # llama.cpp with the next one into one logprobs entry (about one run in 40
        # here), and then there are fewer entries than output tokens
        "temperature": 0,
    }
    resp = oc.responses.create(**ask)
    part = resp.output[0].content[0]
    assert len(part.logprobs) == resp.usage.output_tokens == 4
    assert b"".join(bytes(t.bytes) for t in part.logprobs) == part.text.encode()
    assert all(t.logprob <= 0 and len(t.top_logprobs) == 2 for t in part.logprobs)
    events = list(oc.responses.create(**ask, stream=True))
    deltas = [e for e in events if e.type == "response.output_text.delta"]
    per_delta = [t.token for e in deltas for t in e.logprobs]
    (done,) = [e for e in events if e.type == "response.output_text.done"]
    assert per_delta == [t.token for t in done.logprobs] and len(per_delta) == 4
    final = events[-1].response.output[0].content[0]
    assert [t.token for t in final.logprobs] == per_delta
    assert b"".join(bytes(t.bytes) for t in final.logprobs) == final.text.encode()
    assert all(len(t.top_logprobs) == 2 for e in deltas for t in e.logprobs)
    # `top_logprobs` without `include`: no logprobs, and llama.cpp is not sent a
    # `top_logprobs` it refuses without `logprobs`
    plain = oc.responses.create(model="tr", input="Say hi.", max_output_tokens=2, top_logprobs=0)
    assert plain.output[0].content[0].logprobs == []
