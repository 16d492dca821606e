"""`RequestProfile`: what the routing pipeline knows about a request, whatever its protocol."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from fleetgate.config.schema import ProviderPreferences

if TYPE_CHECKING:
    from fleetgate.context.estimate import ContextEstimate
    from fleetgate.trace_context import TraceContext


@dataclass(slots=True)
class RequestProfile:
    protocol: str  # "openai" | "anthropic" | "ollama"
    endpoint: str  # "chat.completions" | "completions" | "embeddings" | ...
    model: str  # the name the client asked for, echoed back in responses
    stream: bool
    body: dict[str, Any]  # the parsed body; passed upstream with only `model` rewritten
    output_reserve: int | None = None  # max_tokens and its synonyms, when given
    needs: frozenset[str] = frozenset()  # capabilities the request uses
    headers: dict[str, str] = field(default_factory=dict)  # routing-relevant headers only
    # the client's headers of its own protocol that a native upstream must see too
    # (Anthropic's `anthropic-beta`, which turns beta features on); never sent translated
    passed_headers: dict[str, str] = field(default_factory=dict)
    request_id: str = ""
    context: ContextEstimate | None = None  # tokens the request needs; set by routing
    # the body's OpenRouter-style `provider` object, removed from `body` at ingress
    preferences: ProviderPreferences | None = None
    # running hashes of the prompt's leading blocks (ingress/prefix.py); None: not yet hashed
    prefix: tuple[int, ...] | None = None
    trace: TraceContext | None = None  # set when tracing is on (trace_context.py)
