"""Test helpers for fleetgate: a fake OpenAI-compatible inference engine."""

from fleetgate.testing.fake_engine import (
    ErrorStyle,
    FakeEngine,
    Fault,
    FaultKind,
    ReceivedRequest,
    context_exceeded_error,
    count_prompt_tokens,
    requested_completion_tokens,
)

__all__ = [
    "ErrorStyle",
    "FakeEngine",
    "Fault",
    "FaultKind",
    "ReceivedRequest",
    "context_exceeded_error",
    "count_prompt_tokens",
    "requested_completion_tokens",
]
