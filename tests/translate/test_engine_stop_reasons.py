"""An Anthropic client's stop sequence, told from the model's end, on vLLM and SGLang."""

from __future__ import annotations

from collections.abc import Iterator

import anthropic
import ollama
import pytest

from tests.harness import Stack, deployment, provider
from tests.translate.stop_engines import StoppingChat, Style

# the engine's chat template stops at "<|im_end|>" itself (SGLang adds it to `stop`)
PIECES = ["One", " two", " END", " three", "<|im_end|>", " four"]
TEMPLATE_STOPS = ("<|im_end|>",)


@pytest.fixture(params=["vllm", "sglang"])
def engine(stack: Stack, request: pytest.FixtureRequest) -> Iterator[StoppingChat]:
    """A chat-only deployment `m` of vLLM (`protocols: [openai]`) or SGLang."""
    style: Style = request.param
    chat = StoppingChat(style, PIECES, template_stops=TEMPLATE_STOPS)
    stack.lt.run(chat.start())
    try:
        extra = {"protocols": ["openai"]} if style == "vllm" else {"kind": "sglang"}
        stack.start_gateway(
            {
                "providers": [provider("p", chat, **extra)],
                "deployments": [deployment("m", "p")],
            }
        )
        yield chat
    finally:
        stack.lt.run(chat.stop())


def _client(stack: Stack) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=stack.url, api_key="x", max_retries=0, timeout=10)


def _both(c: anthropic.Anthropic, stops: list[str]) -> list[anthropic.types.Message]:
    """The answer, whole and streamed, to a request with `stops`."""
    hi: list[anthropic.types.MessageParam] = [{"role": "user", "content": "count"}]
    extra = {"stop_sequences": stops} if stops else {}
    whole = c.messages.create(model="m", max_tokens=50, messages=hi, **extra)  # type: ignore[arg-type]
    with c.messages.stream(model="m", max_tokens=50, messages=hi, **extra) as stream:  # type: ignore[arg-type]
        streamed = stream.get_final_message()
    return [whole, streamed]


def _text(msg: anthropic.types.Message) -> str:
    return "".join(b.text for b in msg.content if b.type == "text")


def test_the_clients_stop_sequence_is_named(stack: Stack, engine: StoppingChat) -> None:
    """vLLM names the stop string in `stop_reason`, SGLang in `matched_stop`: the client
    gets `stop_reason: stop_sequence` and the sequence, as Anthropic answers."""
    for msg in _both(_client(stack), ["END", "zzz"]):
        assert (msg.stop_reason, msg.stop_sequence) == ("stop_sequence", "END")
        assert _text(msg) == "One two "
    assert engine.bodies["/v1/chat/completions"][-1]["stop"] == ["END", "zzz"]


@pytest.mark.parametrize("stops", [[], ["four"]])
def test_the_engines_own_stop_is_the_models_end(
    stack: Stack, engine: StoppingChat, stops: list[str]
) -> None:
    """The chat template's stop string (or the EOS token's id) that the engine names is
    no stop sequence of the client's: `end_turn`, none named."""
    for msg in _both(_client(stack), stops):
        assert (msg.stop_reason, msg.stop_sequence) == ("end_turn", None)
        assert _text(msg) == "One two END three"


def test_a_natural_end_named_by_token_id(stack: Stack, engine: StoppingChat) -> None:
    """An EOS token id (an int) where the client asked for stops: `end_turn`."""
    engine.pieces = ["One", " two"]
    for msg in _both(_client(stack), ["END"]):
        assert (msg.stop_reason, msg.stop_sequence) == ("end_turn", None)
        assert _text(msg) == "One two"


def test_vllms_own_messages_endpoint_is_passed_over_for_stop_sequences(stack: Stack) -> None:
    """vLLM's /v1/messages says `end_turn` at a stop sequence and names none: a request with
    `stop_sequences` goes to its chat completions, which name it; one without stays native."""
    chat = StoppingChat("vllm", PIECES)
    stack.lt.run(chat.start())
    try:
        stack.start_gateway(
            {"providers": [provider("p", chat)], "deployments": [deployment("m", "p")]}
        )
        c = _client(stack)
        for msg in _both(c, ["END"]):
            assert (msg.stop_reason, msg.stop_sequence) == ("stop_sequence", "END")
            assert _text(msg) == "One two "
        assert len(chat.bodies["/v1/chat/completions"]) == 2
        assert "/v1/messages" not in chat.bodies
        for msg in _both(c, []):
            assert (msg.stop_reason, msg.stop_sequence) == ("end_turn", None)
        assert len(chat.bodies["/v1/messages"]) == 2
    finally:
        stack.lt.run(chat.stop())


# ---- OpenAI's four stop sequences -------------------------------------------------------------

# an Anthropic or Ollama client may send more stops than OpenAI's four; the fifth ends it here,
# across two of the engine's stream pieces
MANY = ["zz1", "zz2", "zz3", "zz4", "D thr"]


@pytest.fixture
def on_openai(stack: Stack) -> Iterator[StoppingChat]:
    """An `openai`-kind deployment `m` that refuses a fifth stop sequence, as OpenAI does."""
    chat = StoppingChat("openai", PIECES)
    stack.lt.run(chat.start())
    try:
        stack.start_gateway(
            {
                "providers": [provider("o", chat, kind="openai", api_key="k")],
                "deployments": [deployment("m", "o")],
            }
        )
        yield chat
    finally:
        stack.lt.run(chat.stop())


def test_stops_past_openais_four_are_held_for_anthropic(
    stack: Stack, on_openai: StoppingChat
) -> None:
    """OpenAI is sent the first four stop sequences; the gateway ends the answer at the
    fifth and names it, whole and streamed."""
    for msg in _both(_client(stack), MANY):
        assert (msg.stop_reason, msg.stop_sequence) == ("stop_sequence", "D thr")
        assert _text(msg) == "One two EN"
    sent = on_openai.bodies["/v1/chat/completions"]
    assert [b["stop"] for b in sent] == [MANY[:4], MANY[:4]]


def test_stops_past_openais_four_are_held_for_ollama(stack: Stack, on_openai: StoppingChat) -> None:
    c = ollama.Client(host=stack.url, timeout=10)
    hi = [{"role": "user", "content": "count"}]
    whole = c.chat(model="m", messages=hi, options={"stop": MANY})
    assert (whole.message.content, whole.done_reason) == ("One two EN", "stop")
    parts = list(c.chat(model="m", messages=hi, options={"stop": MANY}, stream=True))
    assert "".join(p.message.content or "" for p in parts) == "One two EN"
    assert parts[-1].done and parts[-1].done_reason == "stop"
    assert parts[-1].eval_count == 6  # the upstream's usage is kept
    assert [b["stop"] for b in on_openai.bodies["/v1/chat/completions"]] == [MANY[:4]] * 2


def test_a_stop_openai_is_sent_still_ends_it_there(stack: Stack, on_openai: StoppingChat) -> None:
    """The upstream stops at one of the four before the held one: its end stands (OpenAI
    names no stop, so an Anthropic client sees the model's end)."""
    stops = ["END", *MANY]
    for msg in _both(_client(stack), stops):
        assert (msg.stop_reason, msg.stop_sequence) == ("end_turn", None)
        assert _text(msg) == "One two "
