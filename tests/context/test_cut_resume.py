"""A streamed answer a window cut continues on a larger window, on two real llama.cpp engines
(`small`: n_ctx 512 declared as 1024, so the estimate places the request there; `big`:
2048): the client's stream is one answer to its own output limit, for the OpenAI, Anthropic
and Ollama protocols; its text is what small said and then what big said; usage adds up."""

from __future__ import annotations

from typing import Any

import anthropic
import httpx
import ollama
import orjson
import pytest
from openai.types.chat import ChatCompletionChunk

from tests.context.test_cut_short import LONG, record
from tests.engines import LlamaFactory, misstated_tiers
from tests.harness import Stack

WANTED = 400  # output tokens asked for: LONG holds 512 with fewer, not with these
SEAM = b": fleetgate continued on big"


@pytest.fixture
def tiers(stack: Stack, llama: LlamaFactory) -> Stack:
    stack.start_gateway(misstated_tiers(llama))
    return stack


def assert_continued(stack: Stack, request_id: str) -> int:
    """Small's cut answer, then big's continuation of it, in the log; the prompt's tokens."""
    logged = record(stack, request_id)
    cut, rest = logged["attempts"]
    assert (cut["deployment_id"], cut["status"], cut["error_class"]) == ("small", 200, "cut_short")
    assert cut["finish"] == "length" and cut["prompt_tokens"] + cut["completion_tokens"] == 512
    produced = cut["completion_tokens"]
    assert 0 < produced < WANTED
    assert (rest["deployment_id"], rest["error_class"]) == ("big", None)
    assert (rest["continuation"], rest["inherited_tokens"]) == ("window", produced)
    assert rest["completion_tokens"] == WANTED - produced  # big went on to the client's limit
    assert rest["prompt_tokens"] > cut["prompt_tokens"]  # the prompt, and the text so far
    assert logged["deployment_id"] == "big" and logged["status"] == 200
    assert logged["error_code"] is None and "context_cut_short" not in logged["notes"]
    metrics = httpx.get(stack.url + "/metrics", timeout=5).text
    assert 'fleetgate_continuations_total{reason="window"} 1.0' in metrics
    assert 'fleetgate_cut_short_total{deployment="small"} 1.0' in metrics
    return int(cut["prompt_tokens"])


def _split(raw: bytes, sep: bytes) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The JSON events before and after the seam comment."""
    before, after = raw.split(SEAM + b"\n\n")

    def events(part: bytes) -> list[dict[str, Any]]:
        out = []
        for event in part.split(sep):
            for line in event.split(b"\n"):
                data = line.removeprefix(b"data: ") if sep == b"\n\n" else line
                if data.startswith(b"{"):
                    out.append(orjson.loads(data))
        return out

    return events(before), events(after)


def test_an_openai_stream_cut_by_a_window_goes_on_to_its_limit(
    tiers: Stack, client_for: Any
) -> None:
    client = client_for(tiers, timeout=120)
    with client.chat.completions.with_streaming_response.create(
        model="tiny",
        messages=[{"role": "user", "content": LONG}],
        max_tokens=WANTED,
        stream=True,
        stream_options={"include_usage": True},
    ) as resp:
        request_id = resp.headers["x-request-id"]
        assert resp.headers["x-fleetgate-route"] == "small"  # where it began
        raw = b"".join(resp.iter_bytes())
    assert raw.endswith(b"data: [DONE]\n\n") and b"stream_interrupted" not in raw
    small, big = _split(raw, b"\n\n")
    assert {e["id"] for e in small + big} == {small[0]["id"]}  # one answer

    def text(events: list[dict[str, Any]]) -> str:
        return "".join(
            e["choices"][0]["delta"].get("content") or "" for e in events if e["choices"]
        )

    assert text(small) and text(big)
    # the SDK's chunks, read from the same bytes: one answer, its text both parts
    chunks = [ChatCompletionChunk.model_validate(e) for e in small + big]
    streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert streamed == text(small) + text(big)
    reasons = [c.choices[0].finish_reason for c in chunks if c.choices]
    assert reasons.count("length") == 1 and reasons[-1] == "length"  # small's was held back
    prompt = assert_continued(tiers, request_id)
    usage = chunks[-1].usage
    assert usage is not None
    assert usage.completion_tokens == WANTED  # produced by small + continued by big
    assert usage.prompt_tokens == prompt and usage.total_tokens == prompt + WANTED


def test_an_anthropic_stream_cut_by_a_window_goes_on_to_its_limit(tiers: Stack) -> None:
    client = anthropic.Anthropic(base_url=tiers.url, api_key="x", max_retries=0, timeout=120)
    with client.messages.stream(
        model="tiny", max_tokens=WANTED, messages=[{"role": "user", "content": LONG}]
    ) as stream:
        request_id = stream.response.headers["x-request-id"]
        streamed = "".join(stream.text_stream)
        message = stream.get_final_message()
    prompt = assert_continued(tiers, request_id)
    assert [block.type for block in message.content] == ["text"]  # one text block
    assert message.content[0].text == streamed and streamed
    assert message.stop_reason == "max_tokens"
    assert message.usage.output_tokens == WANTED
    assert message.usage.input_tokens == prompt


def test_an_ollama_stream_cut_by_a_window_goes_on_to_its_limit(tiers: Stack) -> None:
    request_id = "ollama-cut-resume"
    client = ollama.Client(host=tiers.url, timeout=120, headers={"x-request-id": request_id})
    parts = list(
        client.chat(
            model="tiny",
            messages=[{"role": "user", "content": LONG}],
            options={"num_predict": WANTED},
            stream=True,
        )
    )
    prompt = assert_continued(tiers, request_id)
    last = parts[-1]
    assert last.done and last.done_reason == "length"
    assert last.eval_count == WANTED and last.prompt_eval_count == prompt
    assert [p.done for p in parts].count(True) == 1
    assert "".join(p.message.content or "" for p in parts)
