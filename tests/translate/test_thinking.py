"""Reasoning across protocols: what each client asked to see of a model's thinking, on
deployments reached by translation (a chat engine that reasons, Anthropic's thinking)."""

from __future__ import annotations

from collections.abc import Iterator

import ollama
import pytest

from tests.harness import Stack, anthropic_provider, deployment, provider
from tests.translate.reasoners import REASONING, TEXT, ReasoningChat, ThinkingMessages

HI = [{"role": "user", "content": "Where is Paris?"}]
THOUGHT = "".join(REASONING)
ANSWER = "".join(TEXT)


@pytest.fixture(params=["reasoning_content", "reasoning"])
def reasoner(stack: Stack, request: pytest.FixtureRequest) -> Iterator[ReasoningChat]:
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
        yield chat
    finally:
        for upstream in (chat, messages):
            stack.lt.run(upstream.stop())


def test_ollama_think_false_shows_no_reasoning(stack: Stack, reasoner: ReasoningChat) -> None:
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
