"""The context estimate: what counts, how much, and that it stays on the safe side."""

from __future__ import annotations

import math

import orjson

from fleetgate.config.schema import ContextConfig
from fleetgate.context.estimate import estimate_context_tokens
from fleetgate.testing import count_prompt_tokens

SETTINGS = ContextConfig()
PNG = "A" * 9000  # a base64 payload: costs the image reserve, not its bytes


def text_cost(n_bytes: int, margin: float = 0.2) -> int:
    return math.ceil(n_bytes / 4 * (1 + margin))


def test_chat_text_overhead_and_explicit_output_limit() -> None:
    body = {
        "messages": [
            {"role": "system", "content": "x" * 100},
            {"role": "user", "content": [{"type": "text", "text": "y" * 300}]},
        ],
        "max_tokens": 50,
    }
    est = estimate_context_tokens(body, "chat.completions", SETTINGS)
    assert est.prompt_tokens == text_cost(400) + 2 * SETTINGS.message_overhead
    assert est.output_reserve == 50
    assert est.total == est.prompt_tokens + 50
    assert not est.exact
    assert est.header() == f"{est.total}; estimate"


def test_margin_is_configurable_and_multibyte_text_counts_bytes() -> None:
    body = {"messages": [{"role": "user", "content": "é" * 100}], "max_tokens": 1}
    no_margin = ContextConfig(margin_percent=0, message_overhead=0)
    assert estimate_context_tokens(body, "chat.completions", no_margin).prompt_tokens == 50
    double = ContextConfig(margin_percent=100, message_overhead=0)
    assert estimate_context_tokens(body, "chat.completions", double).prompt_tokens == 100


def test_output_reserve_synonyms_and_default() -> None:
    base = {"messages": [{"role": "user", "content": "hi"}]}
    for field in ("max_tokens", "max_completion_tokens", "max_output_tokens"):
        est = estimate_context_tokens({**base, field: 77}, "chat.completions", SETTINGS)
        assert est.output_reserve == 77, field
    ollama = {**base, "options": {"num_predict": 33}}
    assert estimate_context_tokens(ollama, "chat.completions", SETTINGS).output_reserve == 33
    unlimited = {**base, "options": {"num_predict": -1}}
    est = estimate_context_tokens(unlimited, "chat.completions", SETTINGS)
    assert est.output_reserve == SETTINGS.default_output_reserve
    custom = ContextConfig(default_output_reserve=5)
    assert estimate_context_tokens(base, "chat.completions", custom).output_reserve == 5
    emb = estimate_context_tokens({"input": "hello"}, "embeddings", SETTINGS)
    assert emb.output_reserve == 0


def test_images_audio_and_tools() -> None:
    settings = ContextConfig(image_tokens=700, audio_tokens=300, message_overhead=0)
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    body = {
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "image_url", "image_url": {"url": "data:image/png;base64," + PNG}},
                    {"type": "input_audio", "input_audio": {"data": "B" * 9000}},
                    {"type": "text", "text": "z" * 40},
                ],
            }
        ],
        "tools": tools,
        "max_tokens": 1,
    }
    est = estimate_context_tokens(body, "chat.completions", settings)
    tool_bytes = len(orjson.dumps(tools))
    # the base64 payloads cost the fixed reserves, not their bytes
    assert est.prompt_tokens == 700 + 300 + text_cost(40 + tool_bytes)
    assert est.media_parts == 2


def test_responses_instructions_input_and_completion_suffix() -> None:
    settings = ContextConfig(message_overhead=0, margin_percent=0)
    responses = {
        "instructions": "i" * 40,
        "input": [
            {"role": "user", "content": [{"type": "input_text", "text": "u" * 80}]},
            {"type": "function_call_output", "call_id": "c1", "output": "o" * 20},
        ],
        "max_output_tokens": 9,
    }
    est = estimate_context_tokens(responses, "responses", settings)
    assert est.prompt_tokens >= (40 + 80 + 20) // 4
    assert est.output_reserve == 9
    completion = {"prompt": "p" * 400, "suffix": "s" * 400, "max_tokens": 1}
    assert estimate_context_tokens(completion, "completions", settings).prompt_tokens == 200
    anthropic = {"system": [{"type": "text", "text": "s" * 400}], "messages": [], "max_tokens": 1}
    assert estimate_context_tokens(anthropic, "messages", settings).prompt_tokens == 100


def test_batches_count_their_longest_sequence_and_token_ids_count_one_each() -> None:
    settings = ContextConfig(margin_percent=0)
    batch = {"input": ["a" * 40, "b" * 400, "c" * 4]}
    assert estimate_context_tokens(batch, "embeddings", settings).prompt_tokens == 100
    ids = {"prompt": list(range(300)), "max_tokens": 1}
    assert estimate_context_tokens(ids, "completions", settings).prompt_tokens == 300


def test_estimate_is_not_below_the_fake_engines_count_for_ordinary_text() -> None:
    """English-like text: the estimate (with its margin) stays at or above a real count."""
    words = ("the gateway routes each request to a deployment that can hold it " * 60).strip()
    body = {"messages": [{"role": "user", "content": words}], "max_tokens": 10}
    est = estimate_context_tokens(body, "chat.completions", SETTINGS)
    assert est.prompt_tokens >= count_prompt_tokens(body)
