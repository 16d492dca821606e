"""Reasoning across protocols: what each client asked to see of a model's thinking, on
deployments reached by translation (a chat engine that reasons, Anthropic's thinking)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import anthropic
import ollama
import openai
import pytest

from tests.harness import Stack, anthropic_provider, deployment, provider
from tests.translate.reasoners import (
    REASONING,
    TEXT,
    ReasoningChat,
    ThinkingMessages,
    signature,
)

HI = [{"role": "user", "content": "Where is Paris?"}]
THOUGHT = "".join(REASONING)
ANSWER = "".join(TEXT)


@dataclass
class Upstreams:
    chat: ReasoningChat
    messages: ThinkingMessages


@pytest.fixture(params=["reasoning_content", "reasoning"])
def reasoner(stack: Stack, request: pytest.FixtureRequest) -> Iterator[Upstreams]:
    """A chat engine that reasons (vLLM's field, or the newer `reasoning`), and an Anthropic
    API, behind one gateway: `m` on the engine (chat only), `claude` on Anthropic."""
    chat, messages = ReasoningChat(request.param), ThinkingMessages()
    for upstream in (chat, messages):
        stack.lt.run(upstream.start())
    try:
        stack.start_gateway(
            {
                "providers": [
                    provider("p", chat, protocols=["openai"]),
                    anthropic_provider("a", messages),
                ],
                "deployments": [deployment("m", "p"), deployment("claude", "a")],
            }
        )
        yield Upstreams(chat, messages)
    finally:
        for upstream in (chat, messages):
            stack.lt.run(upstream.stop())


def test_ollama_think_false_shows_no_reasoning(stack: Stack, reasoner: Upstreams) -> None:
    """`think: false` on a chat engine whose model reasons all the same: Ollama shows no
    thinking then, but the translation put it in `message.thinking` (and generate's
    `thinking`), whole and streamed. Without `think` it is shown, as before."""
    c = ollama.Client(host=stack.url, timeout=10)
    chat = c.chat(model="m", messages=HI, think=False, stream=False)
    assert (chat.message.thinking, chat.message.content) == (None, ANSWER)
    lines = list(c.chat(model="m", messages=HI, think=False, stream=True))
    assert all(line.message.thinking is None for line in lines)
    assert "".join(line.message.content or "" for line in lines) == ANSWER
    assert lines[-1].done and lines[-1].eval_count == 4
    generated = c.generate(model="m", prompt="Where is Paris?", think=False, stream=False)
    assert (generated.thinking, generated.response) == (None, ANSWER)
    parts = list(c.generate(model="m", prompt="Where is Paris?", think=False, stream=True))
    assert all(p.thinking is None for p in parts) and "".join(p.response for p in parts) == ANSWER
    # asked for (or not told), the thinking is there, beside the content
    shown = c.chat(model="m", messages=HI, stream=False)
    assert (shown.message.thinking, shown.message.content) == (THOUGHT, ANSWER)
    streamed = list(c.generate(model="m", prompt="?", think=True, stream=True))
    assert "".join(p.thinking or "" for p in streamed) == THOUGHT


def test_ollama_think_true_makes_anthropic_think(stack: Stack, reasoner: Upstreams) -> None:
    """`think: true` asked nothing of the deployment (only the levels did): Anthropic, which
    thinks only when asked, answered without thinking. It asks for the default level now,
    and the signed thinking comes back as Ollama's, whole and streamed."""
    c = ollama.Client(host=stack.url, timeout=10)
    chat = c.chat(model="claude", messages=HI, think=True, stream=False)
    assert (chat.message.thinking, chat.message.content) == (THOUGHT, ANSWER)
    lines = list(c.chat(model="claude", messages=HI, think=True, stream=True))
    assert "".join(line.message.thinking or "" for line in lines) == THOUGHT
    parts = list(c.generate(model="claude", prompt="Where is Paris?", think=True, stream=True))
    assert "".join(p.thinking or "" for p in parts) == THOUGHT
    assert "".join(p.response for p in parts) == ANSWER
    sent = reasoner.messages.bodies
    assert [b["thinking"] for b in sent] == [{"type": "enabled", "budget_tokens": 8192}] * 3
    assert all(b["max_tokens"] > 8192 for b in sent)
    low = c.chat(model="claude", messages=HI, think="low", stream=False)
    assert low.message.thinking == THOUGHT and sent[-1]["thinking"]["budget_tokens"] == 2048
    # without `think`, or with `false`, Anthropic is not asked to think
    assert c.chat(model="claude", messages=HI, stream=False).message.thinking is None
    assert c.chat(model="claude", messages=HI, think=False, stream=False).message.thinking is None
    assert "thinking" not in sent[-1] and "thinking" not in sent[-2]
    c.chat(model="m", messages=HI, think=True, stream=False)
    assert reasoner.chat.bodies[-1]["reasoning_effort"] == "medium"


def _anthropic(stack: Stack) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=stack.url, api_key="x", max_retries=0, timeout=10)


@pytest.mark.parametrize("thinking", [None, {"type": "disabled"}])
def test_anthropic_without_thinking_gets_no_thinking_blocks(
    stack: Stack, reasoner: Upstreams, thinking: dict[str, str] | None
) -> None:
    """An Anthropic request that does not enable thinking is answered without thinking
    blocks, by Anthropic; on a chat engine whose model reasons anyway the translation put a
    thinking block first, so a client reading `content[0].text` failed. Whole and streamed,
    the text is the only block (index 0)."""
    c = _anthropic(stack)
    extra = {} if thinking is None else {"thinking": thinking}
    whole = c.messages.create(model="m", max_tokens=300, messages=HI, **extra)  # type: ignore[arg-type]
    assert [b.type for b in whole.content] == ["text"] and whole.content[0].text == ANSWER
    with c.messages.stream(model="m", max_tokens=300, messages=HI, **extra) as s:  # type: ignore[arg-type]
        events = list(s)
        final = s.get_final_message()
    starts = [(e.index, e.content_block.type) for e in events if e.type == "content_block_start"]
    assert starts == [(0, "text")] and [b.type for b in final.content] == ["text"]
    assert final.content[0].text == ANSWER  # type: ignore[union-attr]
    assert "reasoning_effort" not in reasoner.chat.bodies[-1]


@pytest.mark.parametrize(
    "thinking", [{"type": "enabled", "budget_tokens": 2000}, {"type": "adaptive"}]
)
def test_anthropic_thinking_on_a_chat_engine(
    stack: Stack, reasoner: Upstreams, thinking: dict[str, Any]
) -> None:
    """Thinking enabled (or adaptive): the reasoning is a thinking block before the text,
    whole and streamed (blocks 0 and 1), with the `signature` field the SDK reads; carried
    back in the next turn it is the assistant's reasoning again, never its content."""
    c = _anthropic(stack)
    whole = c.messages.create(model="m", max_tokens=3000, messages=HI, thinking=thinking)  # type: ignore[arg-type]
    assert [b.type for b in whole.content] == ["thinking", "text"]
    block = whole.content[0]
    assert isinstance(block, anthropic.types.ThinkingBlock) and block.thinking == THOUGHT
    assert isinstance(block.signature, str)
    with c.messages.stream(model="m", max_tokens=3000, messages=HI, thinking=thinking) as s:  # type: ignore[arg-type]
        events = list(s)
        final = s.get_final_message()
    starts = [(e.index, e.content_block.type) for e in events if e.type == "content_block_start"]
    assert starts == [(0, "thinking"), (1, "text")]
    assert [b.model_dump() for b in final.content] == [b.model_dump() for b in whole.content]
    history = [*HI, {"role": "assistant", "content": [b.model_dump() for b in whole.content]}]
    c.messages.create(
        model="m",
        max_tokens=3000,
        thinking=thinking,  # type: ignore[arg-type]
        messages=[*history, {"role": "user", "content": "And Rome?"}],
    )
    carried = reasoner.chat.bodies[-1]["messages"][1]
    assert carried == {"role": "assistant", "content": ANSWER, "reasoning_content": THOUGHT}


def test_responses_reasoning_items_are_carried_back(
    stack: Stack, reasoner: Upstreams, client_for: Callable[..., openai.OpenAI]
) -> None:
    """A Responses client that sends its earlier output back (`input += response.output`)
    sends the `reasoning` items with it; the translation dropped them, so a chat engine
    never saw the assistant's earlier reasoning. Each is the `reasoning_content` of the
    assistant message (or function call) that follows it, never content."""
    c = client_for(stack)
    first = c.responses.create(model="m", input="Where is Paris?", reasoning={"effort": "low"})
    assert [item.type for item in first.output] == ["reasoning", "message"]
    assert reasoner.chat.bodies[-1]["reasoning_effort"] == "low"
    earlier = [item.model_dump(exclude_none=True) for item in first.output]
    c.responses.create(
        model="m",
        input=[
            {"role": "user", "content": "Where is Paris?"},
            *earlier,  # type: ignore[list-item]
            {"role": "user", "content": "And Rome?"},
        ],
    )
    sent = reasoner.chat.bodies[-1]["messages"]
    assert sent[1] == {"role": "assistant", "content": ANSWER, "reasoning_content": THOUGHT}
    summary = {
        "type": "reasoning",
        "id": "rs_1",
        "summary": [{"type": "summary_text", "text": "Look it up."}],
    }
    call = {"type": "function_call", "call_id": "call_1", "name": "atlas", "arguments": "{}"}
    answer = {"type": "function_call_output", "call_id": "call_1", "output": "France"}
    c.responses.create(model="m", input=[{"role": "user", "content": "?"}, summary, call, answer])  # type: ignore[list-item]
    sent = reasoner.chat.bodies[-1]["messages"]
    assert sent[1]["reasoning_content"] == "Look it up." and sent[1]["content"] is None
    assert [m["role"] for m in sent] == ["user", "assistant", "tool"]


ATLAS = {"type": "function", "function": {"name": "atlas", "parameters": {"type": "object"}}}


@pytest.mark.parametrize("stream", [False, True])
def test_openai_tool_loop_with_anthropic_thinking(
    stack: Stack, reasoner: Upstreams, client_for: Callable[..., openai.OpenAI], stream: bool
) -> None:
    """An OpenAI client with `reasoning_effort` on Anthropic, in a tool loop: the answer's
    thinking went back as a thinking block with an empty signature, which Anthropic refuses
    ("Invalid `signature`"), so the loop's second request failed. The signed blocks come
    with the answer (`thinking_blocks`, whole or streamed) and go back as they came."""
    c = client_for(stack)
    ask = [{"role": "user", "content": "Where is Paris? Use the atlas."}]
    if stream:
        with c.chat.completions.stream(
            model="claude", messages=ask, tools=[ATLAS], reasoning_effort="low"
        ) as s:
            message = s.get_final_completion().choices[0].message
    else:
        answer = c.chat.completions.create(
            model="claude", messages=ask, tools=[ATLAS], reasoning_effort="low"
        )
        message = answer.choices[0].message
    assert message.tool_calls and message.model_extra is not None
    assert message.model_extra["reasoning_content"] == THOUGHT
    history = [
        *ask,
        message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": message.tool_calls[0].id, "content": "France"},
    ]
    done = c.chat.completions.create(
        model="claude",
        messages=history,  # type: ignore[arg-type]
        tools=[ATLAS],
        reasoning_effort="low",
    )
    assert done.choices[0].message.content == ANSWER
    _sent_back_signed(reasoner)


def _sent_back_signed(reasoner: Upstreams) -> None:
    """The last request to Anthropic thinks, and its assistant turn opens with the signed
    thinking Anthropic gave."""
    sent = reasoner.messages.bodies[-1]
    assert sent["thinking"]["type"] == "enabled"
    assert sent["messages"][1]["content"][0] == {
        "type": "thinking",
        "thinking": THOUGHT,
        "signature": signature(THOUGHT),
    }


def test_unsigned_reasoning_is_not_sent_to_anthropic(stack: Stack, reasoner: Upstreams) -> None:
    """Reasoning that Anthropic did not sign (an Ollama `thinking`, a chat engine's
    `reasoning_content`) went to Anthropic as a thinking block with an empty signature, and
    the request was refused. It is left out; in a tool loop whose assistant turn has no
    signed thinking to start with, the request goes without thinking, as Anthropic's error
    advises, instead of failing."""
    c = ollama.Client(host=stack.url, timeout=10)
    first = c.chat(model="claude", messages=HI, think=True, stream=False)
    assert first.message.thinking == THOUGHT
    again = [*HI, first.message, {"role": "user", "content": "And Rome?"}]
    second = c.chat(model="claude", messages=again, think=True, stream=False)
    assert (second.message.content, second.message.thinking) == (ANSWER, THOUGHT)
    assert reasoner.messages.bodies[-1]["messages"][1]["content"] == [
        {"type": "text", "text": ANSWER}
    ]
    tools = [ATLAS]
    called = c.chat(model="claude", messages=HI, tools=tools, think=True, stream=False)
    assert called.message.tool_calls and called.message.thinking == THOUGHT
    loop = [*HI, called.message, {"role": "tool", "content": "France", "tool_name": "atlas"}]
    answered = list(c.chat(model="claude", messages=loop, tools=tools, think=True, stream=True))
    assert "".join(p.message.content for p in answered) == ANSWER
    assert "thinking" not in reasoner.messages.bodies[-1]


def test_thinking_asked_with_what_anthropic_takes(
    stack: Stack, reasoner: Upstreams, client_for: Callable[..., openai.OpenAI]
) -> None:
    """Anthropic refuses thinking with a `temperature` other than 1, a `top_k`, a `top_p`
    under 0.95 or a forced tool choice; an Ollama client's `think: true` with its usual
    `options.temperature` (or an OpenAI client's `reasoning_effort` with `temperature`)
    was answered 400. With thinking, those sampling fields are left out (`top_p` raised to
    0.95); a forced tool choice is kept, and the request goes without thinking."""
    c = ollama.Client(host=stack.url, timeout=10)
    options = {"temperature": 0.2, "top_k": 20, "top_p": 0.8}
    chat = c.chat(model="claude", messages=HI, think=True, options=options, stream=False)
    assert chat.message.thinking == THOUGHT
    sent = reasoner.messages.bodies[-1]
    assert sent["thinking"]["type"] == "enabled" and sent["top_p"] == 0.95
    assert "temperature" not in sent and "top_k" not in sent
    unthinking = c.chat(model="claude", messages=HI, options=options, stream=False)
    assert unthinking.message.content == ANSWER  # without thinking the sampling is as asked
    assert {k: reasoner.messages.bodies[-1][k] for k in options} == options
    o = client_for(stack)
    answer = o.chat.completions.create(
        model="claude", messages=HI, reasoning_effort="high", temperature=1, top_p=0.99
    )
    assert answer.choices[0].message.content == ANSWER
    sent = reasoner.messages.bodies[-1]
    assert (sent["temperature"], sent["top_p"], sent["thinking"]["budget_tokens"]) == (
        1,
        0.99,
        24576,
    )
    forced = o.chat.completions.create(
        model="claude", messages=HI, tools=[ATLAS], tool_choice="required", reasoning_effort="low"
    )
    assert forced.choices[0].message.tool_calls
    sent = reasoner.messages.bodies[-1]
    assert sent["tool_choice"] == {"type": "any"} and "thinking" not in sent


def test_a_routes_reasoning_effort_reaches_anthropic_as_thinking(stack: Stack) -> None:
    """A route's `params: {reasoning_effort: ...}` (the docs' reasoning tier) was set as a
    `reasoning_effort` field in the upstream body whatever its protocol: Anthropic refuses
    the field ("Extra inputs are not permitted"), so every client of such a route failed
    there. On Anthropic it is a thinking budget (with the sampling Anthropic takes with it,
    and under a route's `max_tokens` cap), as the translation of a client's own effort."""
    api = ThinkingMessages()
    stack.lt.run(api.start())
    try:
        stack.start_gateway(
            {
                "providers": [anthropic_provider("a", api)],
                "deployments": [deployment("claude", "a")],
                "virtual_models": [
                    {
                        "name": "deep",
                        "routes": [{"deployment": "a", "params": {"reasoning_effort": "high"}}],
                    },
                    {
                        "name": "brief",
                        "routes": [
                            {
                                "deployment": "a",
                                "params": {
                                    "reasoning_effort": "medium",
                                    "temperature": 0.3,
                                    "max_tokens": 2000,
                                },
                            }
                        ],
                    },
                ],
            }
        )
        o = openai.OpenAI(base_url=stack.url + "/v1", api_key="x", max_retries=0, timeout=10)
        chat = o.chat.completions.create(model="deep", messages=HI)  # type: ignore[arg-type]
        assert chat.choices[0].message.model_extra == {
            "reasoning_content": THOUGHT,
            "thinking_blocks": [
                {"type": "thinking", "thinking": THOUGHT, "signature": signature(THOUGHT)}
            ],
        }
        sent = api.bodies[-1]
        assert sent["thinking"] == {"type": "enabled", "budget_tokens": 24576}
        assert sent["max_tokens"] > 24576 and "reasoning_effort" not in sent
        native = _anthropic(stack).messages.create(model="deep", max_tokens=100, messages=HI)  # type: ignore[arg-type]
        assert [b.type for b in native.content] == ["thinking", "text"]
        lines = list(ollama.Client(host=stack.url).chat(model="brief", messages=HI, stream=True))
        assert "".join(line.message.thinking or "" for line in lines) == THOUGHT
        sent = api.bodies[-1]
        assert sent["thinking"] == {"type": "enabled", "budget_tokens": 1999}
        assert sent["max_tokens"] == 2000 and "temperature" not in sent
    finally:
        stack.lt.run(api.stop())


@pytest.mark.parametrize("stream", [False, True])
def test_responses_tool_loop_keeps_anthropic_thinking(
    stack: Stack, reasoner: Upstreams, client_for: Callable[..., openai.OpenAI], stream: bool
) -> None:
    """A Responses client (Codex's way: reasoning, tools, the output sent back) on Anthropic:
    its reasoning items came back without Anthropic's signature, so the tool loop's next
    step could not carry the thinking, and went without it. The signed blocks ride in the
    reasoning item's `encrypted_content` and go back to Anthropic as they came."""
    c = client_for(stack)
    tool = {"type": "function", "name": "atlas", "parameters": {"type": "object"}}
    asked = {"model": "claude", "tools": [tool], "reasoning": {"effort": "low"}}
    ask = [{"role": "user", "content": "Where is Paris? Use the atlas."}]
    if stream:
        with c.responses.stream(input=ask, **asked) as s:  # type: ignore[arg-type]
            first = s.get_final_response()
    else:
        first = c.responses.create(input=ask, **asked)  # type: ignore[arg-type]
    assert [item.type for item in first.output] == ["reasoning", "function_call"]
    call = first.output[1]
    assert isinstance(call, openai.types.responses.ResponseFunctionToolCall)
    earlier = [item.model_dump(exclude_none=True) for item in first.output]
    result = {"type": "function_call_output", "call_id": call.call_id, "output": "France"}
    done = c.responses.create(input=[*ask, *earlier, result], **asked)  # type: ignore[arg-type]
    assert done.output_text == ANSWER
    _sent_back_signed(reasoner)
