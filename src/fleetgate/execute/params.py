"""Applies one attempt's parameter overrides (its scope's `params`) to the upstream body."""

from __future__ import annotations

from typing import Any

# output-budget fields a `max_tokens` cap lowers, in the order they are looked for
_BUDGET_FIELDS = ("max_completion_tokens", "max_tokens", "max_output_tokens")
_SAMPLING_FIELDS = ("temperature", "top_p", "reasoning_effort")


def apply_params(body: dict[str, Any], params: dict[str, Any], endpoint: str) -> dict[str, Any]:
    """A new body with the overrides applied; the client's body is never changed.

    Sampling fields are set; `max_tokens` caps every budget field the client sent (or sets
    `max_tokens` when it sent none); `extra_body` sets top-level fields. Embeddings take
    only `extra_body`.
    """
    out = dict(body)
    if endpoint != "embeddings":
        for name in _SAMPLING_FIELDS:
            if name in params:
                out[name] = params[name]
        cap = params.get("max_tokens")
        if cap is not None:
            present = [f for f in _BUDGET_FIELDS if isinstance(out.get(f), int)]
            for name in present:
                out[name] = min(out[name], cap)
            if not present:
                out["max_tokens"] = cap
    extra = params.get("extra_body")
    if extra:
        out.update(extra)
    return out
