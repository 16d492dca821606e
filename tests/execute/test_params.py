"""How one attempt's parameter overrides change the upstream body."""

from __future__ import annotations

from fleetgate.execute.params import apply_params


def test_sampling_fields_are_set_and_the_client_body_is_untouched() -> None:
    body = {"model": "v", "temperature": 1.0, "messages": []}
    out = apply_params(
        body, {"temperature": 0.2, "top_p": 0.9, "reasoning_effort": "low"}, "chat.completions"
    )
    assert out == {
        "model": "v",
        "temperature": 0.2,
        "top_p": 0.9,
        "reasoning_effort": "low",
        "messages": [],
    }
    assert body["temperature"] == 1.0


def test_max_tokens_is_a_cap() -> None:
    cap = {"max_tokens": 100}
    assert apply_params({"max_tokens": 500}, cap, "chat.completions") == {"max_tokens": 100}
    assert apply_params({"max_tokens": 20}, cap, "chat.completions") == {"max_tokens": 20}
    assert apply_params({"max_completion_tokens": 500}, cap, "chat.completions") == {
        "max_completion_tokens": 100
    }
    assert apply_params({}, cap, "completions") == {"max_tokens": 100}


def test_extra_body_sets_top_level_fields_and_embeddings_take_only_it() -> None:
    params = {"temperature": 0.1, "max_tokens": 5, "extra_body": {"top_k": 3, "temperature": 2}}
    assert apply_params({}, params, "chat.completions") == {
        "temperature": 2,
        "max_tokens": 5,
        "top_k": 3,
    }
    assert apply_params({"input": "x"}, params, "embeddings") == {
        "input": "x",
        "top_k": 3,
        "temperature": 2,
    }


def test_reasoning_effort_takes_the_upstream_protocols_form() -> None:
    """Each protocol but chat's refuses (Anthropic, OpenAI's Responses) or ignores (Ollama) a
    field named `reasoning_effort`: the override is said in the upstream's own words."""
    effort = {"reasoning_effort": "low"}
    assert apply_params({"reasoning": {"summary": "auto"}}, effort, "responses") == {
        "reasoning": {"summary": "auto", "effort": "low"}
    }
    assert apply_params({}, {"reasoning_effort": "minimal"}, "ollama.chat") == {"think": "low"}
    assert apply_params({}, effort, "ollama.generate") == {"think": "low"}
    anthropic = {"max_tokens": 100, "temperature": 0.5, "top_k": 5, "messages": []}
    assert apply_params(anthropic, effort, "messages") == {
        "max_tokens": 2049,
        "messages": [],
        "thinking": {"type": "enabled", "budget_tokens": 2048},
    }
    # a cap under the budget lowers the budget, or leaves no thinking when 1024 do not fit
    capped = apply_params(anthropic, {**effort, "max_tokens": 1500}, "messages")
    assert capped["thinking"]["budget_tokens"] == 1499 and capped["max_tokens"] == 1500
    assert "thinking" not in apply_params(anthropic, {**effort, "max_tokens": 900}, "messages")
    # a forced tool choice takes no thinking; a temperature override yields to thinking
    forced = {**anthropic, "tool_choice": {"type": "any"}}
    assert apply_params(forced, effort, "messages") == forced
    thinking = {"max_tokens": 9000, "thinking": {"type": "enabled", "budget_tokens": 8192}}
    assert apply_params(thinking, {"temperature": 0.2}, "messages") == thinking
