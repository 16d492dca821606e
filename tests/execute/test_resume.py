"""A stream cut mid-way continues on a sibling: a fake engine that resets, stalls or sends
an error event after a few chunks, then a healthy one. The client reads one whole answer
through the official SDKs; the record and the metrics show the continuation."""

from __future__ import annotations

from typing import Any

import anthropic
import httpx
import openai
import pytest

from fleetgate.testing import Fault
from tests.harness import Stack, deployment, provider

MSG = [{"role": "user", "content": "hello there"}]
WANTED = 12  # output tokens the client asks for
FAULTS = {
    "reset": Fault("break_stream", after_chunks=3),
    "stall": Fault("stall_stream", after_chunks=3),
    "error event": Fault("error_mid_stream", after_chunks=3, status=500, message="engine fault"),
}


def two_hosts(stack: Stack, resume: dict[str, Any] | None = None) -> Stack:
    a = stack.engine("a", reply_words=50)
    b = stack.engine("b", reply_words=50)
    timeouts = {"connect": 1, "first_byte": 0.5, "total": 10}
    config: dict[str, Any] = {
        "providers": [provider("pa", a, timeouts=timeouts), provider("pb", b, timeouts=timeouts)],
        "deployments": [
            deployment("m", "pa", priority=0, upstream_model="up"),
            deployment("m", "pb", priority=1, upstream_model="up"),
        ],
    }
    if resume is not None:
        config["models"] = [{"id": "m", "resume": resume}]
    stack.start_gateway(config)
    return stack


def record(stack: Stack, request_id: str) -> dict[str, Any]:
    return httpx.get(f"{stack.url}/v1/requests/{request_id}", timeout=5).json()


def continuation_request(stack: Stack) -> dict[str, Any]:
    """The body the healthy host was sent (its only request)."""
    [(path, body)] = [(r.path, r.body) for r in stack.engines["b"].requests]
    assert path == "/v1/chat/completions"
    return body


@pytest.mark.parametrize("fault", list(FAULTS), ids=list(FAULTS))
def test_an_openai_stream_cut_mid_way_is_continued_on_the_sibling(
    stack: Stack, client_for: Any, fault: str
) -> None:
    two_hosts(stack)
    stack.engines["a"].fail_next(FAULTS[fault])
    resp = client_for(stack).chat.completions.with_raw_response.create(
        model="m",
        messages=MSG,
        max_tokens=WANTED,
        stream=True,
        stream_options={"include_usage": True},
    )
    request_id = resp.headers["x-request-id"]
    chunks = list(resp.parse())  # the SDK's stream: it raises on an error event
    assert {c.id for c in chunks} == {chunks[0].id}  # one answer, one id
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    # "a says:", " w1", " w2" reached the client before the fault
    assert text == "a says: w1 w2" + "b says: w1 w2 w3 w4 w5 w6 w7 w8 w9"
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "length"
    usage = chunks[-1].usage
    assert usage is not None and usage.completion_tokens == WANTED  # 3 inherited + 9
    sent = continuation_request(stack)
    assert sent["messages"][-1] == {"role": "assistant", "content": "a says: w1 w2"}
    assert sent["continue_final_message"] is True and sent["add_generation_prompt"] is False
    assert sent["max_tokens"] == WANTED - 3
    logged = record(stack, request_id)
    first, second = logged["attempts"]
    assert (first["deployment_id"], first["error_class"]) == ("pa", "stream_broken")
    assert (second["deployment_id"], second["error_class"]) == ("pb", None)
    assert (second["continuation"], second["inherited_tokens"]) == ("interrupted", 3)
    assert logged["status"] == 200 and logged["error_code"] is None
    assert logged["deployment_id"] == "pb"
    metrics = httpx.get(stack.url + "/metrics", timeout=5).text
    assert 'fleetgate_continuations_total{reason="interrupted"} 1.0' in metrics


def test_an_anthropic_stream_reset_mid_way_is_one_message(stack: Stack) -> None:
    two_hosts(stack)
    stack.engines["a"].fail_next(Fault("break_stream", after_chunks=4))
    client = anthropic.Anthropic(base_url=stack.url, api_key="x", max_retries=0, timeout=10)
    with client.messages.stream(model="m", max_tokens=WANTED, messages=MSG) as stream:
        text = "".join(stream.text_stream)
        message = stream.get_final_message()
    # message_start, the text block's start, then "a says:" and " w1" reached the client

    assert text == "a says: w1" + "b says: w1 w2 w3 w4 w5 w6 w7 w8 w9 w10"
    assert [block.type for block in message.content] == ["text"]
    assert message.content[0].text == text
    assert message.stop_reason == "max_tokens"
    assert message.usage.output_tokens == WANTED
    assert message.id.startswith("msg_")
    sent = continuation_request(stack)  # llama.cpp, vLLM, SGLang continue on chat
    assert sent["messages"][-1] == {"role": "assistant", "content": "a says: w1"}
    assert sent["max_tokens"] == WANTED - 2


def test_the_stream_says_where_it_continued_in_a_comment(stack: Stack) -> None:
    two_hosts(stack)
    stack.engines["a"].fail_next(Fault("break_stream", after_chunks=3))
    body = {"model": "m", "messages": MSG, "stream": True}
    raw = httpx.post(stack.url + "/v1/chat/completions", json=body, timeout=10).content
    before, after = raw.split(b": fleetgate continued on pb\n\n")
    assert before.count(b"data: ") == 3 and after.endswith(b"data: [DONE]\n\n")
    assert b"stream_interrupted" not in raw


def test_a_stream_is_not_continued_when_the_model_says_not_to(
    stack: Stack, client_for: Any
) -> None:
    two_hosts(stack, resume={"after_interruption": False})
    stack.engines["a"].fail_next(Fault("break_stream", after_chunks=3))
    stream = client_for(stack).chat.completions.create(model="m", messages=MSG, stream=True)
    received = []
    with pytest.raises(openai.APIError) as info:
        for chunk in stream:
            received.append(chunk)
    assert len(received) == 3
    assert "stream broke" in str(info.value)
    assert stack.engines["b"].requests == []


def test_a_tool_call_in_progress_is_not_continued(stack: Stack, client_for: Any) -> None:
    two_hosts(stack)
    stack.engines["a"].fail_next(Fault("break_stream", after_chunks=2))
    tools = [{"type": "function", "function": {"name": "f", "parameters": {}}}]
    with client_for(stack).chat.completions.with_streaming_response.create(
        model="m", messages=MSG, tools=tools, stream=True
    ) as resp:
        raw = b"".join(resp.iter_bytes())
    assert b'"tool_calls"' in raw
    assert raw.rstrip().endswith(b"}")  # an error event last, no [DONE]
    assert b'"code":"stream_interrupted"' in raw
    assert b"fleetgate continued" not in raw
    assert stack.engines["b"].requests == []


def test_the_continuations_end_at_max_continuations(stack: Stack, client_for: Any) -> None:
    two_hosts(stack, resume={"max_continuations": 1})
    stack.engines["a"].fail_next(Fault("break_stream", after_chunks=3))
    stack.engines["b"].fail_next(Fault("break_stream", after_chunks=3))
    with client_for(stack).chat.completions.with_streaming_response.create(
        model="m", messages=MSG, stream=True
    ) as resp:
        raw = b"".join(resp.iter_bytes())
    assert raw.count(b"fleetgate continued") == 1
    assert b'"code":"stream_interrupted"' in raw


def two_models(stack: Stack, resume: dict[str, Any] | None, price: bool = False) -> Stack:
    """Virtual model `v`: model `m1` on a, then model `m2` on b (priced with `price`)."""
    a = stack.engine("a", reply_words=50)
    b = stack.engine("b", reply_words=50)
    priced = {"price": {"input": 1.0, "output": 2.0}} if price else {}
    virtual: dict[str, Any] = {
        "name": "v",
        "routes": [{"deployment": "pa"}, {"deployment": "pb"}],
    }
    if resume is not None:
        virtual["resume"] = resume
    stack.start_gateway(
        {
            "providers": [provider("pa", a), provider("pb", b)],
            "deployments": [
                deployment("m1", "pa", upstream_model="up"),
                deployment("m2", "pb", upstream_model="up", **priced),
            ],
            "virtual_models": [virtual],
        }
    )
    return stack


def _start_over(stack: Stack) -> None:
    stack.stop_gateway()
    for engine in stack.engines.values():
        stack.lt.run(engine.stop())
    stack.engines.clear()


def _streamed(stack: Stack, client_for: Any, model: str) -> bytes:
    with client_for(stack).chat.completions.with_streaming_response.create(
        model=model, messages=MSG, stream=True
    ) as resp:
        return b"".join(resp.iter_bytes())


def test_another_model_continues_only_on_opt_in(stack: Stack, client_for: Any) -> None:
    two_models(stack, None)
    stack.engines["a"].fail_next(Fault("break_stream", after_chunks=3))
    assert b'"code":"stream_interrupted"' in _streamed(stack, client_for, "v")
    assert stack.engines["b"].requests == []
    _start_over(stack)
    two_models(stack, {"across_models": True})
    stack.engines["a"].fail_next(Fault("break_stream", after_chunks=3))
    raw = _streamed(stack, client_for, "v")
    assert b"fleetgate continued on pb" in raw and raw.endswith(b"data: [DONE]\n\n")


def test_a_priced_deployment_continues_an_unpriced_answer_only_on_opt_in(
    stack: Stack, client_for: Any
) -> None:
    two_models(stack, {"across_models": True}, price=True)
    stack.engines["a"].fail_next(Fault("break_stream", after_chunks=3))
    assert b'"code":"stream_interrupted"' in _streamed(stack, client_for, "v")
    assert stack.engines["b"].requests == []
    _start_over(stack)
    two_models(stack, {"across_models": True, "onto_priced": True}, price=True)
    stack.engines["a"].fail_next(Fault("break_stream", after_chunks=3))
    assert b"fleetgate continued on pb" in _streamed(stack, client_for, "v")
