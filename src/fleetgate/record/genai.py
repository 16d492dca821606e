"""The OpenTelemetry GenAI names of an upstream attempt: its operation, its provider, its
error type. One place for the spans (`telemetry/`) and the `/metrics` mirror of the GenAI
metrics, so both say the same."""

from __future__ import annotations

from fleetgate.execute.outcome import Attempt

# the upstream endpoint (execute/executor.py's UPSTREAM_PATHS) -> `gen_ai.operation.name`
OPERATIONS: dict[str, str] = {
    "chat.completions": "chat",
    "completions": "text_completion",
    "embeddings": "embeddings",
    "messages": "chat",
    "responses": "chat",
    "ollama.chat": "chat",
    "ollama.generate": "text_completion",
    "ollama.embed": "embeddings",
    "ollama.embeddings": "embeddings",
    "ollama.show": "show",
}

# provider kind -> `gen_ai.provider.name`: the conventions' well-known value where there is
# one (`openai`, `anthropic`), else the engine or service, spelt as they spell theirs
PROVIDER_NAMES: dict[str, str] = {
    "openai": "openai",
    "anthropic": "anthropic",
    "openrouter": "openrouter",
    "vllm": "vllm",
    "sglang": "sglang",
    "llamacpp": "llama_cpp",
    "ollama": "ollama",
}

OTHER = "_OTHER"  # the conventions' value for what has no name of its own
GATEWAY_WIRE = "gateway"  # an attempt's `wire` when a translation answered by itself


def upstream_endpoint(attempt: Attempt, client_endpoint: str) -> str:
    """What the attempt asked of the upstream: the client's endpoint, or the one a
    translation spoke (`wire` is "<client>→<upstream>")."""
    return _spoken(attempt.wire, client_endpoint)


def _spoken(wire: str | None, client_endpoint: str) -> str:
    if wire and "→" in wire:
        return wire.rpartition("→")[2]
    return client_endpoint


def operation_name(attempt: Attempt, client_endpoint: str) -> str:
    return operation_of(attempt.wire, client_endpoint)


def operation_of(wire: str | None, client_endpoint: str) -> str:
    """`gen_ai.operation.name` of an attempt on `wire` for a client's endpoint."""
    return OPERATIONS.get(_spoken(wire, client_endpoint), OTHER)


def provider_name(kind: str | None) -> str:
    return PROVIDER_NAMES.get(kind or "", OTHER)


def error_type(attempt: Attempt) -> str | None:
    """`error.type` of a failed attempt: the gateway's error class (`timeout`, `connect`,
    `server_error`, …, the list in docs/telemetry.md); None when it succeeded."""
    return attempt.error_class


def called_upstream(attempt: Attempt) -> bool:
    """Whether the attempt was a call upstream (a translation may answer by itself)."""
    return attempt.wire != GATEWAY_WIRE
