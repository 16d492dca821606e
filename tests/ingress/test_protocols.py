"""The Ollama, Anthropic and Responses protocols through the gateway, with the official SDKs."""

from __future__ import annotations

import anthropic
import httpx
import ollama
import orjson
import pytest

from fleetgate.testing import Fault, OllamaModel
from tests.harness import Stack, deployment, ollama_provider, provider, wait_until


@pytest.fixture
def fleet(stack: Stack) -> Stack:
    w = stack.ollama("w1", OllamaModel("llama3.2:3b", num_ctx=8192))
    v = stack.engine("v")
    stack.start_gateway(
        {
            "providers": [ollama_provider("ol", w), provider("vl", v)],
            "deployments": [
                deployment("chat", "ol", upstream_model="llama3.2:3b"),
                deployment("vonly", "vl", upstream_model="up-v"),
            ],
            # a test here breaks three streams of one worker in a row: keep it in
            "routing": {"circuit": {"failure_threshold": 3}},
        }
    )
    return stack


def test_ollama_chat_and_generate_with_the_ollama_client(fleet: Stack) -> None:
    client = ollama.Client(host=fleet.url, timeout=10)
    resp = client.chat(
        model="chat", messages=[{"role": "user", "content": "hi there"}], stream=False
    )
    assert resp.model == "chat"
    assert resp.message.content.startswith("w1 says:")
    assert resp.prompt_eval_count == 3  # 2 words + 1 message
    sent = fleet.workers["w1"].inference_requests()[-1]
    assert sent.path == "/api/chat" and sent.body["model"] == "llama3.2:3b"

    parts = list(
        client.chat(model="chat", messages=[{"role": "user", "content": "x"}], stream=True)
    )
    assert len(parts) == 10 and parts[-1].done and not parts[0].done
    assert {p.model for p in parts} == {"chat"}
    assert "".join(p.message.content for p in parts).startswith("w1 says: w1 w2")

    gen = list(client.generate(model="chat", prompt="once upon", stream=True))
    assert gen[-1].done and gen[-1].context == [1, 2, 3]
    assert "".join(g.response for g in gen).startswith("w1 says:")
    whole = client.generate(model="chat", prompt="once upon", stream=False)
    assert whole.model == "chat" and whole.prompt_eval_count == 2


def test_ollama_stream_is_ndjson_and_default_streams(fleet: Stack) -> None:
    resp = httpx.post(
        fleet.url + "/api/chat",
        timeout=10,
        json={"model": "chat", "messages": [{"role": "user", "content": "hello"}]},
    )
    assert resp.status_code == 200
    assert resp.headers["content-type"].startswith("application/x-ndjson")
    lines = [orjson.loads(line) for line in resp.content.splitlines() if line]
    assert lines[-1]["done"] is True and all(x["model"] == "chat" for x in lines)
    assert resp.headers["x-fleetgate-route"] == "ol"


def test_ollama_show_is_answered_by_a_worker(fleet: Stack) -> None:
    show = ollama.Client(host=fleet.url, timeout=10).show("chat")
    assert "num_ctx" in show.parameters and show.modelinfo["llama.context_length"] == 131072
    assert fleet.workers["w1"].requests[-1].body == {"model": "llama3.2:3b"}


def test_usage_is_recorded_per_protocol(fleet: Stack) -> None:
    resp = httpx.post(
        fleet.url + "/api/chat",
        timeout=10,
        json={"model": "chat", "messages": [{"role": "user", "content": "a b c"}], "stream": False},
    )
    rid = resp.headers["x-request-id"]
    wait_until(lambda: httpx.get(f"{fleet.url}/v1/requests/{rid}", timeout=5).status_code == 200, 5)
    attempt = httpx.get(f"{fleet.url}/v1/requests/{rid}", timeout=5).json()["attempts"][0]
    assert (attempt["prompt_tokens"], attempt["completion_tokens"]) == (4, 8)


def test_ollama_embed_tags_version(fleet: Stack) -> None:
    client = ollama.Client(host=fleet.url, timeout=10)
    emb = client.embed(model="chat", input=["alpha", "beta gamma"])
    assert emb.model == "chat" and len(emb.embeddings) == 2 and len(emb.embeddings[0]) == 8
    names = {m.model for m in client.list().models}
    assert names == {"chat", "vonly"}
    assert httpx.get(fleet.url + "/api/version", timeout=5).json()["version"]


def test_ollama_errors_have_ollama_shape(fleet: Stack) -> None:
    client = ollama.Client(host=fleet.url, timeout=10)
    with pytest.raises(ollama.ResponseError) as err:
        client.chat(model="nope", messages=[{"role": "user", "content": "x"}], stream=False)
    assert err.value.status_code == 404 and "nope" in err.value.error
    # a translated deployment's OpenAI-shaped refusal reaches the client in Ollama's shape
    fleet.engines["v"].fail_next(Fault("bad_request", message="bad sampling options"))
    resp = httpx.post(
        fleet.url + "/api/chat",
        timeout=5,
        json={"model": "vonly", "messages": [{"role": "user", "content": "x"}]},
    )
    assert resp.status_code == 400
    body = resp.json()
    assert set(body) == {"error"} and "bad sampling options" in body["error"]
    bad = httpx.post(
        fleet.url + "/api/chat",
        timeout=5,
        json={"model": "chat", "messages": [], "options": {"num_ctx": 4096.0}},
    )
    assert bad.status_code == 400 and "options.num_ctx" in bad.json()["error"]


def test_ollama_upstream_error_mid_chain_and_in_stream(fleet: Stack) -> None:
    fleet.workers["w1"].fail_next(400, "invalid options")
    resp = httpx.post(
        fleet.url + "/api/generate",
        timeout=5,
        json={"model": "chat", "prompt": "x", "stream": False},
    )
    assert resp.status_code == 400 and resp.json() == {"error": "invalid options"}


def test_anthropic_messages_with_the_anthropic_client(fleet: Stack) -> None:
    client = anthropic.Anthropic(base_url=fleet.url, api_key="x", max_retries=0, timeout=10)
    msg = client.messages.create(
        model="chat", max_tokens=5, messages=[{"role": "user", "content": "hello world"}]
    )
    assert msg.model == "chat"
    assert msg.content[0].text == "w1 says: w1 w2 w3 w4 w5"
    assert msg.usage.input_tokens == 3
    sent = fleet.workers["w1"].inference_requests()[-1]
    assert sent.path == "/v1/messages" and sent.body["model"] == "llama3.2:3b"

    with client.messages.stream(
        model="chat", max_tokens=64, system="be brief", messages=[{"role": "user", "content": "hi"}]
    ) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text.startswith("w1 says:") and final.model == "chat"
    assert final.stop_reason == "end_turn"


def test_anthropic_errors_have_anthropic_shape(fleet: Stack) -> None:
    client = anthropic.Anthropic(base_url=fleet.url, api_key="x", max_retries=0, timeout=10)
    with pytest.raises(anthropic.NotFoundError) as err:
        client.messages.create(
            model="nope", max_tokens=5, messages=[{"role": "user", "content": "x"}]
        )
    assert err.value.body["type"] == "error"
    assert err.value.body["error"]["type"] == "not_found_error"
    with pytest.raises(anthropic.BadRequestError):
        client.messages.create(model="chat", max_tokens=5, messages=[])


def test_responses_raw_and_streaming(fleet: Stack, client_for) -> None:
    resp = httpx.post(
        fleet.url + "/v1/responses",
        timeout=10,
        json={"model": "chat", "input": "tell me", "instructions": "short"},
    )
    assert resp.status_code == 200
    body = resp.json()
    assert body["model"] == "chat" and body["status"] == "completed"
    assert body["usage"]["input_tokens"] == 3
    assert fleet.workers["w1"].inference_requests()[-1].path == "/v1/responses"

    raw = httpx.post(
        fleet.url + "/v1/responses",
        timeout=10,
        json={"model": "chat", "input": [{"role": "user", "content": "hi"}], "stream": True},
    )
    assert raw.headers["content-type"].startswith("text/event-stream")
    events = [e for e in raw.content.split(b"\n\n") if e]
    assert events[0].startswith(b"event: response.created\ndata: ")
    assert b'"model":"chat"' in events[-1] and b"llama3.2" not in raw.content

    client = client_for(fleet)
    kinds = [e.type for e in client.responses.create(model="chat", input="hi", stream=True)]
    assert kinds[0] == "response.created" and kinds[-1] == "response.completed"
    assert client.responses.create(model="chat", input="hi").output_text.startswith("w1 says")


def test_openai_chat_still_reaches_ollama_v1(fleet: Stack, client_for) -> None:
    client = client_for(fleet)
    chunks = list(
        client.chat.completions.create(
            model="chat", messages=[{"role": "user", "content": "hi"}], stream=True
        )
    )
    assert {c.model for c in chunks} == {"chat"}
    assert fleet.workers["w1"].inference_requests()[-1].path == "/v1/chat/completions"


def test_ndjson_error_line_before_output_falls_back(stack: Stack) -> None:
    a = stack.ollama("a", "llama3.2")
    b = stack.ollama("b", "llama3.2")
    stack.start_gateway(
        {
            "providers": [ollama_provider("a", a), ollama_provider("b", b)],
            "deployments": [
                {"id": "a", "model": "m", "provider": "a", "upstream_model": "llama3.2"},
                {
                    "id": "b",
                    "model": "m",
                    "provider": "b",
                    "upstream_model": "llama3.2",
                    "priority": 1,
                },
            ],
        }
    )
    a.stream_error_next("runner crashed")
    parts = list(
        ollama.Client(host=stack.url, timeout=10).chat(
            model="m", messages=[{"role": "user", "content": "x"}], stream=True
        )
    )
    assert parts[-1].done and "".join(p.message.content for p in parts).startswith("b says:")
    # with no other worker the error line reaches the client as an Ollama error
    a.stream_error_next("runner crashed")
    b.stream_error_next("runner crashed too")
    with pytest.raises(ollama.ResponseError) as err:
        list(
            ollama.Client(host=stack.url, timeout=10).chat(
                model="m", messages=[{"role": "user", "content": "x"}], stream=True
            )
        )
    assert "runner crashed" in err.value.error


def test_ndjson_and_anthropic_rewrite_event_by_event() -> None:
    from fleetgate.execute.framing import NDJSON, SSE
    from fleetgate.execute.rewrite import ModelRewriter

    rewriter = ModelRewriter("llama3.2", "chat")
    block = b'{"model":"llama3.2:latest","done":false}\n{"model":"llama3.2:latest","done":true}\n'
    assert NDJSON.rewrite(rewriter, block).count(b'"model":"chat"') == 2
    event = b'event: message_start\ndata: {"type":"message_start","message":{"model":"x:1"}}'
    out = SSE.rewrite(rewriter, event + b"\n\n")
    assert out.startswith(b"event: message_start\ndata: ")
    assert NDJSON.is_error(b'{"error":"boom"}') and not NDJSON.is_error(b'{"done":true}')
    assert not SSE.is_error(b'{"type":"response.created","error":null}')


def test_a_stream_broken_after_output_ends_with_an_error_in_the_clients_framing(
    fleet: Stack,
) -> None:
    worker = fleet.workers["w1"]
    worker.break_stream_next(after_events=4)
    client = anthropic.Anthropic(base_url=fleet.url, api_key="x", max_retries=0, timeout=10)
    with (
        pytest.raises(anthropic.APIError) as err,
        client.messages.stream(
            model="chat", max_tokens=64, messages=[{"role": "user", "content": "hi"}]
        ) as stream,
    ):
        list(stream.text_stream)
    assert "stream broke" in str(err.value)

    worker.break_stream_next(after_events=3)
    raw = httpx.post(
        fleet.url + "/api/chat",
        timeout=10,
        json={"model": "chat", "messages": [{"role": "user", "content": "hi"}]},
    )
    lines = [orjson.loads(line) for line in raw.content.splitlines() if line]
    assert len(lines) == 4 and "stream broke" in lines[-1]["error"]
    assert all("done" in line for line in lines[:-1])

    worker.break_stream_next(after_events=5)
    raw = httpx.post(
        fleet.url + "/v1/responses",
        timeout=10,
        json={"model": "chat", "input": "hi", "stream": True},
    )
    last = [e for e in raw.content.split(b"\n\n") if e][-1]
    assert last.startswith(b"event: error\ndata: ")
    assert orjson.loads(last.split(b"data: ", 1)[1])["code"] == "stream_interrupted"
