"""Ollama clients on OpenAI-compatible deployments: chat, generate, embed, NDJSON streams."""

from __future__ import annotations

import httpx
import ollama
import orjson
import pytest

from fleetgate.testing import Fault
from tests.harness import (
    Stack,
    anthropic_provider,
    client_requests,
    deployment,
    ollama_provider,
    provider,
    wait_until,
)
from tests.security.servers import Scripted
from tests.translate.broken_streams import SSE, anthropic_stream_failing, chat_stream_failing

HI = [{"role": "user", "content": "hi"}]
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}


@pytest.fixture
def chat_only(stack: Stack) -> Stack:
    engine = stack.engine("e", tool_calls=2)
    stack.start_gateway(
        {
            "providers": [{"id": "v", "kind": "vllm", "base_url": engine.url + "/v1"}],
            "deployments": [
                deployment("m", "v", upstream_model="up-m"),
                {"id": "vi", "model": "vis", "provider": "v", "modalities": ["text", "image"]},
            ],
        }
    )
    return stack


def client(stack: Stack) -> ollama.Client:
    return ollama.Client(host=stack.url, timeout=10)


def test_chat_plain_and_streamed(chat_only: Stack) -> None:
    c = client(chat_only)
    resp = c.chat(
        model="m",
        messages=[{"role": "user", "content": "hello there"}],
        options={"num_predict": 3, "temperature": 0.2, "top_k": 4, "seed": 7, "stop": ["x"]},
        stream=False,
    )
    assert resp.model == "m" and resp.done and resp.done_reason == "length"
    assert resp.message.content == "e says: w1 w2 w3"
    assert (resp.prompt_eval_count, resp.eval_count) == (3, 3)
    sent = chat_only.engines["e"].requests[-1]
    assert sent.path == "/v1/chat/completions"
    assert sent.body == {
        "messages": [{"role": "user", "content": "hello there"}],
        "temperature": 0.2,
        "top_k": 4,
        "seed": 7,
        "stop": ["x"],
        "max_tokens": 3,
        "model": "up-m",
    }
    parts = list(c.chat(model="m", messages=[{"role": "user", "content": "hi"}], stream=True))
    assert [p.done for p in parts] == [False] * 9 + [True]
    assert "".join(p.message.content for p in parts) == "e says: w1 w2 w3 w4 w5 w6 w7 w8"
    last = parts[-1]
    assert (last.prompt_eval_count, last.eval_count) == (2, 8)
    assert last.total_duration > 0 and last.done_reason == "stop"
    assert last.total_duration >= last.prompt_eval_duration


def test_stream_is_ndjson_by_default(chat_only: Stack) -> None:
    raw = httpx.post(
        chat_only.url + "/api/chat",
        timeout=10,
        json={"model": "m", "messages": [{"role": "user", "content": "hi"}]},
    )
    assert raw.headers["content-type"].startswith("application/x-ndjson")
    lines = [orjson.loads(line) for line in raw.content.splitlines() if line]
    assert lines[-1]["done"] is True and all(line["model"] == "m" for line in lines)
    sent = chat_only.engines["e"].requests[-1].body
    assert sent["stream"] is True and sent["stream_options"] == {"include_usage": True}


def test_chat_tools_and_their_results(chat_only: Stack) -> None:
    c = client(chat_only)
    resp = c.chat(
        model="m", messages=[{"role": "user", "content": "weather?"}], tools=[WEATHER], stream=False
    )
    calls = resp.message.tool_calls
    assert [(t.function.name, dict(t.function.arguments)) for t in calls] == [
        ("get_weather", {"city": "a0"}),
        ("get_weather", {"city": "a1"}),
    ]
    streamed = list(
        c.chat(model="m", messages=[{"role": "user", "content": "?"}], tools=[WEATHER], stream=True)
    )
    got = [t for p in streamed for t in (p.message.tool_calls or ())]
    assert [dict(t.function.arguments) for t in got] == [{"city": "a0"}, {"city": "a1"}]
    c.chat(
        model="m",
        stream=False,
        messages=[
            {"role": "user", "content": "weather?"},
            {"role": "assistant", "content": "", "tool_calls": [t.model_dump() for t in calls]},
            {"role": "tool", "content": "rain", "tool_name": "get_weather"},
            {"role": "tool", "content": "sun", "tool_name": "get_weather"},
        ],
    )
    sent = chat_only.engines["e"].requests[-1].body["messages"]
    ids = [call["id"] for call in sent[1]["tool_calls"]]
    assert sent[1]["tool_calls"][0]["function"] == {
        "name": "get_weather",
        "arguments": '{"city":"a0"}',
    }
    assert [m.get("tool_call_id") for m in sent[2:]] == ids and len(set(ids)) == 2


def test_format_and_images(chat_only: Stack) -> None:
    c = client(chat_only)
    schema = {"type": "object", "properties": {"a": {"type": "string"}}}
    c.chat(model="m", messages=[{"role": "user", "content": "j"}], format=schema, stream=False)
    assert chat_only.engines["e"].requests[-1].body["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "response", "schema": schema},
    }
    c.chat(model="m", messages=[{"role": "user", "content": "j"}], format="json", stream=False)
    assert chat_only.engines["e"].requests[-1].body["response_format"] == {"type": "json_object"}
    png = (
        "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR4nGNgYGD4DwABBAEAwS2OUAAAAABJRU5E"
        "rkJggg=="
    )
    c.chat(
        model="vis", messages=[{"role": "user", "content": "what?", "images": [png]}], stream=False
    )
    content = chat_only.engines["e"].requests[-1].body["messages"][0]["content"]
    assert content[1] == {"type": "image_url", "image_url": {"url": "data:image/png;base64," + png}}
    # a deployment without image input is not chosen for it: the same rule as for chat
    with pytest.raises(ollama.ResponseError) as err:
        c.chat(
            model="m", messages=[{"role": "user", "content": "?", "images": [png]}], stream=False
        )
    assert err.value.status_code == 400 and "image_input" in err.value.error


def test_generate_with_system_suffix_and_raw(chat_only: Stack) -> None:
    c = client(chat_only)
    out = c.generate(model="m", prompt="once upon", system="storyteller", stream=False)
    assert out.response == "e says: w1 w2 w3 w4 w5 w6 w7 w8" and out.done
    assert out.prompt_eval_count == 5
    sent = chat_only.engines["e"].requests[-1]
    assert sent.path == "/v1/chat/completions"
    assert sent.body["messages"] == [
        {"role": "system", "content": "storyteller"},
        {"role": "user", "content": "once upon"},
    ]
    parts = list(c.generate(model="m", prompt="go", stream=True, options={"num_predict": 2}))
    assert "".join(p.response for p in parts) == "e says: w1 w2" and parts[-1].eval_count == 2
    c.generate(model="m", prompt="def f(", suffix="return x", stream=False)
    sent = chat_only.engines["e"].requests[-1]
    assert sent.path == "/v1/completions"
    assert (sent.body["prompt"], sent.body["suffix"]) == ("def f(", "return x")
    raw = c.generate(model="m", prompt="<|im_start|>user", raw=True, system="ignored", stream=False)
    assert chat_only.engines["e"].requests[-1].body["prompt"] == "<|im_start|>user"
    assert raw.response.startswith("e says:")


def test_embed(chat_only: Stack) -> None:
    emb = client(chat_only).embed(model="m", input=["alpha", "beta gamma"])
    assert emb.model == "m" and len(emb.embeddings) == 2 and len(emb.embeddings[0]) == 8
    assert emb.prompt_eval_count == 3
    sent = chat_only.engines["e"].requests[-1]
    assert sent.path == "/v1/embeddings" and sent.body == {
        "input": ["alpha", "beta gamma"],
        "model": "up-m",
    }


def test_legacy_embeddings(stack: Stack) -> None:
    """The ollama SDK's `embeddings(model, prompt)` (`/api/embeddings`, older than
    `/api/embed`) was answered 404. It is served like embed: natively by an Ollama worker,
    translated to OpenAI's `/embeddings` elsewhere, each answer `{"embedding": [...]}`."""
    engine = stack.engine("e")
    worker = stack.ollama("w", "nomic")
    stack.start_gateway(
        {
            "providers": [
                {"id": "v", "kind": "vllm", "base_url": engine.url + "/v1"},
                ollama_provider("o", worker),
                anthropic_provider("a", stack.anthropic("c")),
            ],
            "deployments": [
                deployment("m", "v", upstream_model="up-m"),
                deployment("native", "o", upstream_model="nomic"),
                deployment("claude", "a"),
            ],
        }
    )
    c = client(stack)
    translated = c.embeddings(model="m", prompt="alpha beta")
    assert translated.embedding == c.embed(model="m", input="alpha beta").embeddings[0]
    assert len(translated.embedding) == 8
    sent = engine.requests[-1]
    assert sent.path == "/v1/embeddings" and sent.body == {"input": "alpha beta", "model": "up-m"}
    native = c.embeddings(model="native", prompt="alpha beta", options={"num_ctx": 2048})
    assert native.embedding == translated.embedding  # the fakes embed alike
    asked = worker.requests[-1]
    assert asked.path == "/api/embeddings"
    assert asked.body["prompt"] == "alpha beta" and asked.body["options"]["num_ctx"] == 2048
    raw = httpx.post(stack.url + "/api/embeddings", json={"model": "m", "prompt": "x"}, timeout=10)
    assert set(raw.json()) == {"embedding"}
    # no prompt: Ollama only loads the model, and answers an empty vector
    before = len(engine.requests)
    assert c.embeddings(model="m").embedding == [] and len(engine.requests) == before
    with pytest.raises(ollama.ResponseError) as err:  # Anthropic has no embeddings API
        c.embeddings(model="claude", prompt="alpha")
    assert err.value.status_code == 400 and "/api/embeddings" in err.value.error


def durations_hold(answer: ollama.ChatResponse | ollama.GenerateResponse) -> None:
    """Ollama's durations as `ollama run --verbose` reads them: positive integer ns (it
    divides the counts by them), the total holding its parts."""
    spans = [answer.prompt_eval_duration, answer.eval_duration, answer.total_duration]
    assert all(type(ns) is int and ns > 0 for ns in spans), answer
    assert answer.load_duration is not None and answer.load_duration >= 0
    assert answer.total_duration >= (
        answer.load_duration + answer.prompt_eval_duration + answer.eval_duration
    )


@pytest.mark.parametrize("kind", ["vllm", "anthropic"])
def test_durations_are_measured_from_the_attempts_start(stack: Stack, kind: str) -> None:
    """A translated answer's durations count from when the gateway began the attempt:
    whole answers had `total_duration` 0 (and, without engine timings, 0 prompt and eval
    durations: tokens/s divided by zero); streams were timed from their first event, so the
    time to it, the prompt's, was missing. The vLLM engine takes 60 ms to answer, or to
    send its first event."""
    delay = 0.06
    if kind == "vllm":
        engine = stack.engine("e", latency=delay, ttft=delay)
        upstream = {"id": "p", "kind": "vllm", "base_url": engine.url + "/v1"}
    else:
        upstream = anthropic_provider("p", stack.anthropic("e"))
    stack.start_gateway({"providers": [upstream], "deployments": [deployment("m", "p")]})
    c = client(stack)
    hi = [{"role": "user", "content": "say hi"}]
    answers = [
        c.chat(model="m", messages=hi, stream=False),
        list(c.chat(model="m", messages=hi, stream=True))[-1],
        c.generate(model="m", prompt="once upon", stream=False),
        list(c.generate(model="m", prompt="once upon", stream=True))[-1],
    ]
    for answer in answers:
        assert answer.done and answer.eval_count and answer.prompt_eval_count
        durations_hold(answer)
    if kind == "vllm":
        # the engine's 60 ms are a loop timer of libuv, whose clock is the one read at the
        # start of the loop's turn: it can fire up to a turn's work early (seen: under the
        # 60 ms once on a loaded machine). 54 ms still tells the delay in from its absence.
        waited = 0.9 * delay * 1e9
        assert all(a.total_duration >= waited for a in answers)
        # the stream's prompt took until its first event: the engine's 60 ms are in it
        assert answers[1].prompt_eval_duration >= waited
        assert answers[3].prompt_eval_duration >= waited


@pytest.mark.parametrize("kind", ["vllm", "anthropic"])
def test_load_and_unload_requests_are_answered_not_generated(stack: Stack, kind: str) -> None:
    """A chat without messages or a generate without a prompt only loads the model (with
    `keep_alive` 0: unloads it), as `ollama run` and Open WebUI send before a chat. An
    engine asked to generate from it wrote to its window's end (llama.cpp) or refused it
    (Anthropic: no messages); the gateway answers it as Ollama does."""
    if kind == "vllm":
        upstream = stack.engine("e")
        provider = {"id": "p", "kind": "vllm", "base_url": upstream.url + "/v1"}
    else:
        upstream = stack.anthropic("e")
        provider = anthropic_provider("p", upstream)
    worker = stack.ollama("w", "llama3.2")
    stack.start_gateway(
        {
            "providers": [provider, ollama_provider("o", worker)],
            "deployments": [
                deployment("m", "p", upstream_model="up-m"),
                deployment("native", "o", upstream_model="llama3.2"),
            ],
        }
    )
    c = client(stack)
    loaded = c.chat(model="m", messages=[], stream=False)
    assert (loaded.model, loaded.done, loaded.done_reason) == ("m", True, "load")
    assert (loaded.message.role, loaded.message.content) == ("assistant", "")
    streamed = list(c.chat(model="m", messages=[], stream=True))  # one object, as Ollama
    assert [(p.done, p.done_reason) for p in streamed] == [(True, "load")]
    assert c.chat(model="m", messages=[], keep_alive=0).done_reason == "unload"
    assert c.chat(model="m", messages=[], keep_alive="0s").done_reason == "unload"
    assert c.chat(model="m", messages=[], keep_alive="5m").done_reason == "load"
    generated = c.generate(model="m")
    assert (generated.response, generated.done, generated.done_reason) == ("", True, "load")
    assert c.generate(model="m", keep_alive="0m").done_reason == "unload"
    assert [p.done_reason for p in c.generate(model="m", stream=True)] == ["load"]
    assert upstream.requests == []
    rid = httpx.post(stack.url + "/api/chat", json={"model": "m"}, timeout=10).headers[
        "x-request-id"
    ]
    recent = stack.gateway.pipeline.recent if stack.gateway is not None else None
    assert recent is not None
    wait_until(lambda: recent.newest(rid) is not None, 5, "the record")
    record = recent.newest(rid)
    assert record is not None and [a.wire for a in record.attempts] == ["gateway"]
    # anything to answer still reaches the engine, whatever its keep_alive
    answer = c.generate(model="m", prompt="go", keep_alive=0, stream=False)
    assert answer.response.startswith("e says:") and len(upstream.requests) == 1
    # an Ollama worker loads and unloads its models itself: it is asked
    c.chat(model="native", messages=[], keep_alive=0)
    assert [r.body["keep_alive"] for r in worker.requests if r.path == "/api/chat"] == [0]


def _reasoning_stream() -> bytes:
    """A reasoning model's chat stream (vLLM's `reasoning_content`), then its usage."""
    deltas = [
        {"role": "assistant", "content": None, "reasoning_content": "Paris is"},
        {"reasoning_content": " in France."},
        {"content": "France"},
    ]
    chunks = [{"choices": [{"index": 0, "delta": d, "finish_reason": None}]} for d in deltas]
    chunks.append({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
    chunks.append({"choices": [], "usage": {"prompt_tokens": 9, "completion_tokens": 5}})
    frame = {"id": "c", "object": "chat.completion.chunk", "created": 0, "model": "up-m"}
    return b"".join(b"data: " + orjson.dumps({**frame, **c}) + b"\n\n" for c in chunks) + (
        b"data: [DONE]\n\n"
    )


def test_generate_streams_the_thinking(stack: Stack) -> None:
    """A streamed generate carries the model's reasoning as `thinking` beside `response`,
    as its whole answer and a streamed chat do (it used to be dropped from the lines)."""
    up = Scripted()
    up.answer = (200, {"Content-Type": "text/event-stream"}, _reasoning_stream())
    stack.lt.run(up.start())
    try:
        stack.start_gateway(
            {"providers": [provider("p", up)], "deployments": [deployment("m", "p")]}
        )
        c = client(stack)
        parts = list(c.generate(model="m", prompt="Where is Paris?", think=True, stream=True))
        assert "".join(p.thinking or "" for p in parts) == "Paris is in France."
        assert "".join(p.response for p in parts) == "France"
        assert parts[-1].done and parts[-1].eval_count == 5
        chat = list(c.chat(model="m", messages=[{"role": "user", "content": "?"}], stream=True))
        assert "".join(p.message.thinking or "" for p in chat) == "Paris is in France."
    finally:
        stack.lt.run(up.stop())


# ---- streams that fail after output had started ---------------------------------------------

BREAKS = ["chat engine breaks", "chat engine's error event", "anthropic's error event"]


@pytest.mark.parametrize("path", ["/api/chat", "/api/generate"])
@pytest.mark.parametrize("upstream", BREAKS)
def test_a_failing_stream_ends_with_the_error_line(stack: Stack, upstream: str, path: str) -> None:
    """Ollama ends a failed stream with its `{"error": ...}` line; a `done` line after it
    would say the answer had ended as it should."""
    engine = stack.engine("e")
    up = Scripted()
    if upstream == BREAKS[1]:
        up.answer = (200, SSE, chat_stream_failing("engine died", 500))
    else:
        up.answer = (200, SSE, anthropic_stream_failing("overloaded_error", "Overloaded"))
    stack.lt.run(up.start())
    try:
        providers = [provider("v", engine), provider("s", up), anthropic_provider("an", up)]
        stack.start_gateway(
            {
                "providers": providers,
                "deployments": [
                    deployment("m", "v"),
                    deployment("se", "s"),
                    deployment("ae", "an"),
                ],
            }
        )
        model, said = {
            BREAKS[0]: ("m", "retry the request"),
            BREAKS[1]: ("se", "engine died"),
            BREAKS[2]: ("ae", "Overloaded"),
        }[upstream]
        key = "message" if path == "/api/chat" else "response"
        body = {"messages": HI} if path == "/api/chat" else {"prompt": "hi"}
        engine.fail_next(Fault("break_stream", after_chunks=3))
        c = client(stack)
        call = c.chat if path == "/api/chat" else c.generate
        parts = []
        with pytest.raises(ollama.ResponseError, match=said):
            for part in call(model=model, stream=True, **body):
                parts.append(part)
        assert parts and not any(p.done for p in parts)
        engine.fail_next(Fault("break_stream", after_chunks=3))
        raw = httpx.post(stack.url + path, timeout=10, json={"model": model, **body})
        *lines, last = [orjson.loads(line) for line in raw.content.splitlines() if line]
        assert set(last) == {"error"} and said in last["error"]
        assert lines and all(line["done"] is False and key in line for line in lines)
    finally:
        stack.lt.run(up.stop())


def test_the_thinking_of_an_ollama_history_counts_in_the_estimate(stack: Stack) -> None:
    """An assistant turn's `thinking` reaches a chat engine as `reasoning_content`: the
    estimate counts it as it counts chat's, and a history too large for a window with it
    goes to the deployment that holds it."""
    small = stack.engine("small", context_window=400)
    large = stack.engine("large", context_window=8192)
    stack.start_gateway(
        {
            "providers": [provider("ps", small), provider("pl", large)],
            "deployments": [
                deployment("m", "ps", context_window=400),
                deployment("m", "pl", context_window=8192),
            ],
        }
    )
    thinking = " ".join(f"step {i} weighs the answer again." for i in range(100))

    def history(key: str) -> list[dict[str, str]]:
        said = {"role": "assistant", "content": "Paris.", key: thinking}
        return [{"role": "user", "content": "Capital of France?"}, said, *HI]

    def estimate(path: str, key: str, limit: dict[str, object]) -> int:
        body = {"model": "m", "messages": history(key), "stream": False, **limit}
        resp = httpx.post(stack.url + path, timeout=10, json=body)
        assert resp.status_code == 200, resp.text
        return int(resp.headers["x-fleetgate-context-estimate"].split(";")[0])

    ollama_estimate = estimate("/api/chat", "thinking", {"options": {"num_predict": 8}})
    assert ollama_estimate == estimate(
        "/v1/chat/completions", "reasoning_content", {"max_tokens": 8}
    )
    client(stack).chat(model="m", messages=history("thinking"), options={"num_predict": 8})
    sent = large.requests[-1].body["messages"][1]
    assert sent["reasoning_content"] == thinking and not client_requests(small)
