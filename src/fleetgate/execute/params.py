"""Applies one attempt's parameter overrides (its scope's `params`) to the upstream body."""

from __future__ import annotations

from typing import Any

from fleetgate.translate.anthropic_chat import ask_thinking
from fleetgate.translate.thinking import fit_budget, thinking_sampling, thinks

# output-budget fields a `max_tokens` cap lowers, in the order they are looked for
_BUDGET_FIELDS = ("max_completion_tokens", "max_tokens", "max_output_tokens")
_SAMPLING_FIELDS = ("temperature", "top_p")
# Ollama's `think` levels; chat's `minimal` is its lowest
_THINK = {"minimal": "low", "low": "low", "medium": "medium", "high": "high"}


def _set_effort(out: dict[str, Any], effort: str, endpoint: str) -> None:
    """`reasoning_effort` in the upstream protocol's own form (each but chat's refuses, or
    ignores, a field named so): Responses' `reasoning.effort`, Anthropic's thinking budget,
    Ollama's `think`."""
    if endpoint == "responses":
        reasoning = out.get("reasoning")
        out["reasoning"] = {**(reasoning if isinstance(reasoning, dict) else {}), "effort": effort}
    elif endpoint == "messages":
        ask_thinking(out, effort)
    elif endpoint in ("ollama.chat", "ollama.generate"):
        out["think"] = _THINK.get(effort, effort)
    elif endpoint in ("chat.completions", "completions"):
        out["reasoning_effort"] = effort


def apply_params(body: dict[str, Any], params: dict[str, Any], endpoint: str) -> dict[str, Any]:
    """A new body with the overrides applied; the client's body is never changed.

    Sampling fields are set, `reasoning_effort` in the upstream protocol's form
    (`_set_effort`); `max_tokens` caps every budget field the client sent (or sets
    `max_tokens` when it sent none); `extra_body` sets top-level fields. Embeddings take
    only `extra_body`. An Anthropic request that thinks keeps the sampling Anthropic takes
    with thinking (`thinking_sampling`).
    """
    out = dict(body)
    if endpoint != "embeddings":
        for name in _SAMPLING_FIELDS:
            if name in params:
                out[name] = params[name]
        effort = params.get("reasoning_effort")
        if isinstance(effort, str):
            _set_effort(out, effort, endpoint)
        cap = params.get("max_tokens")
        if cap is not None:
            present = [f for f in _BUDGET_FIELDS if isinstance(out.get(f), int)]
            for name in present:
                out[name] = min(out[name], cap)
            if not present:
                out["max_tokens"] = cap
        if endpoint == "messages" and thinks(out):
            fit_budget(out)
            thinking_sampling(out)
    extra = params.get("extra_body")
    if extra:
        out.update(extra)
    return out
