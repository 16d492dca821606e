"""Stop strings across protocols: what each upstream is sent, and what each client gets back."""

from __future__ import annotations

import anthropic
import ollama
import pytest

from fleetgate.testing.llama import ALIAS
from tests.engines import LlamaFactory, llama_provider
from tests.harness import Stack, anthropic_provider, deployment

# a reply whose stream splits the blank line between two deltas
PIECES = ["First", " line.\n", "\nSecond", " line END", " never"]


@pytest.fixture
def on_claude(stack: Stack) -> Stack:
    """One Anthropic deployment that validates and honours stop sequences as Anthropic does."""
    api = stack.anthropic("claude", reply_pieces=PIECES)
    stack.start_gateway(
        {
            "providers": [anthropic_provider("an", api)],
            "deployments": [deployment("m", "an", upstream_model="claude-x")],
        }
    )
    return stack


def _sent_stops(stack: Stack) -> object:
    return stack.apis["claude"].requests[-1].body.get("stop_sequences")


@pytest.mark.parametrize("stop", [["\n\n", "END"], "\n\n", ["\n\n", "", " \t"]])
def test_whitespace_stops_on_anthropic_are_held_by_the_gateway(
    on_claude: Stack, client_for, stop: object
) -> None:
    """Anthropic refuses a stop sequence that is only whitespace; an OpenAI client may send
    one. The upstream is sent the others, and the answer ends at the held one."""
    oc = client_for(on_claude)
    hi = [{"role": "user", "content": "hi"}]
    resp = oc.chat.completions.create(model="m", messages=hi, stop=stop, max_tokens=20)
    assert resp.choices[0].message.content == "First line."
    assert resp.choices[0].finish_reason == "stop"
    sends_end = isinstance(stop, list) and "END" in stop
    assert _sent_stops(on_claude) == (["END"] if sends_end else None)
    chunks = list(
        oc.chat.completions.create(
            model="m",
            messages=hi,
            stop=stop,
            max_tokens=20,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "First line."
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices]
    assert [f for f in finishes if f] == ["stop"]
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens > 0


def test_a_held_stop_that_never_completes_lets_its_start_through(
    on_claude: Stack, client_for
) -> None:
    """The newline kept back at a delta's end (it may begin "\\n\\n\\n") goes out when the
    next delta shows it does not."""
    oc = client_for(on_claude)
    hi = [{"role": "user", "content": "hi"}]
    stream = oc.chat.completions.create(
        model="m", messages=hi, stop=["\n\n\n"], max_tokens=20, stream=True
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "".join(PIECES)
    assert chunks[-1].choices[0].finish_reason == "stop"


def test_an_upstream_stop_before_the_held_one_wins(on_claude: Stack, client_for) -> None:
    oc = client_for(on_claude)
    hi = [{"role": "user", "content": "hi"}]
    resp = oc.chat.completions.create(model="m", messages=hi, stop=["line", " "], max_tokens=20)
    assert resp.choices[0].message.content == "First"
    assert _sent_stops(on_claude) == ["line"]


def test_ollama_whitespace_stop_on_anthropic(on_claude: Stack) -> None:
    c = ollama.Client(host=on_claude.url, timeout=10)
    hi = [{"role": "user", "content": "hi"}]
    resp = c.chat(model="m", messages=hi, options={"stop": ["\n\n"]}, stream=False)
    assert resp.message.content == "First line." and resp.done_reason == "stop"
    parts = list(c.chat(model="m", messages=hi, options={"stop": ["\n\n"]}, stream=True))
    assert "".join(p.message.content for p in parts) == "First line."
    assert parts[-1].done and parts[-1].done_reason == "stop" and parts[-1].eval_count
    assert _sent_stops(on_claude) is None
    generated = c.generate(model="m", prompt="hi", options={"stop": [" "]}, stream=False)
    assert generated.response == "First" and generated.done_reason == "stop"


# ---- the real llama.cpp engine ---------------------------------------------------------------


@pytest.fixture
def on_llama(stack: Stack, llama: LlamaFactory) -> Stack:
    server = llama(n_ctx=1024)
    stack.start_gateway(
        {
            "providers": [llama_provider("native", server)],
            "deployments": [deployment("m", "native", upstream_model=ALIAS)],
        }
    )
    return stack


def test_anthropic_stop_sequence_on_llama_is_named_as_anthropic_does(on_llama: Stack) -> None:
    """llama.cpp's own /v1/messages says `end_turn` where a stop sequence ended the output;
    the client gets `stop_sequence`, as Anthropic answers."""
    c = anthropic.Anthropic(base_url=on_llama.url, api_key="x", max_retries=0, timeout=30)
    hi = [{"role": "user", "content": "Write a short poem about the sea."}]
    free = c.messages.create(model="m", max_tokens=12, extra_body={"temperature": 0}, messages=hi)
    text = "".join(b.text for b in free.content if b.type == "text")
    assert len(text) >= 4, "the engine wrote too little to stop inside"
    stop = text[len(text) // 2 : len(text) // 2 + 2]
    kept = text[: text.find(stop)]
    msg = c.messages.create(
        model="m", max_tokens=12, extra_body={"temperature": 0}, messages=hi, stop_sequences=[stop]
    )
    assert (msg.stop_reason, msg.stop_sequence) == ("stop_sequence", stop)
    assert "".join(b.text for b in msg.content if b.type == "text") == kept
    with c.messages.stream(
        model="m", max_tokens=12, extra_body={"temperature": 0}, messages=hi, stop_sequences=[stop]
    ) as stream:
        final = stream.get_final_message()
    assert (final.stop_reason, final.stop_sequence) == ("stop_sequence", stop)
    assert "".join(b.text for b in final.content if b.type == "text") == kept
    assert free.stop_reason == "max_tokens"  # no stop asked: the engine's own reason stays
