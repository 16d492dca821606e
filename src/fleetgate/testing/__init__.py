"""Test helpers for fleetgate: a fake OpenAI-compatible inference engine, a fake Ollama,
a fake Anthropic API."""

from fleetgate.testing.fake_anthropic import FakeAnthropic
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
from fleetgate.testing.fake_ollama import FakeOllama, OllamaModel

__all__ = [
    "ErrorStyle",
    "FakeAnthropic",
    "FakeEngine",
    "FakeOllama",
    "Fault",
    "FaultKind",
    "OllamaModel",
    "ReceivedRequest",
    "context_exceeded_error",
    "count_prompt_tokens",
    "requested_completion_tokens",
]
