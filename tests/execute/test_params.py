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
