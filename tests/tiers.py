"""Shared set-up for the context-tier tests: a 1k base engine and a 10k long engine."""

from __future__ import annotations

from typing import Any

from fleetgate.testing import FakeEngine
from tests.harness import Stack, deployment, provider

BASE_WINDOW = 1000
LONG_WINDOW = 10000


def tiered_config(
    base: FakeEngine, long: FakeEngine, context: dict[str, Any] | None = None, **model: Any
) -> dict[str, Any]:
    """Model `m`: deployment `base` (1k) plus a `long_context` block on `long` (10k). The
    fake engines count words: no tokenizer fingerprint, so the family's estimate stands."""
    return {
        "routing": {
            "context": {"default_output_reserve": 64, "fingerprint": False, **(context or {})}
        },
        "providers": [provider("base", base)],
        "deployments": [deployment("m", "base", upstream_model="up-m")],
        "models": [
            {
                "id": "m",
                "long_context": {
                    "inference_url": long.url + "/v1",
                    "max_context_tokens": LONG_WINDOW,
                    "base_max_context_tokens": BASE_WINDOW,
                },
                **model,
            }
        ],
    }


def tiered_stack(
    stack: Stack, context: dict[str, Any] | None = None, **kw: Any
) -> tuple[FakeEngine, FakeEngine]:
    base = stack.engine("base", context_window=BASE_WINDOW)
    long = stack.engine("long", context_window=LONG_WINDOW)
    stack.start_gateway(tiered_config(base, long, context, **kw))
    return base, long


def chat_calls(engine: FakeEngine) -> int:
    return sum(1 for r in engine.requests if r.path == "/v1/chat/completions")


def words(n: int, word: str = "word") -> str:
    return " ".join([word] * n)
