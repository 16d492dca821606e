"""Which ingress adapter parses each proxied path, and the endpoint name it produces."""

from __future__ import annotations

from collections.abc import Callable

from fleetgate.ingress.anthropic import parse_messages
from fleetgate.ingress.ollama import parse_ollama
from fleetgate.ingress.openai import parse_openai
from fleetgate.ingress.profile import RequestProfile
from fleetgate.ingress.responses import parse_responses

Parser = Callable[[str, bytes], RequestProfile]

# POST path -> (endpoint, adapter)
INGRESS_ROUTES: dict[str, tuple[str, Parser]] = {
    "/v1/chat/completions": ("chat.completions", parse_openai),
    "/v1/completions": ("completions", parse_openai),
    "/v1/embeddings": ("embeddings", parse_openai),
    "/v1/messages": ("messages", parse_messages),
    "/v1/responses": ("responses", parse_responses),
    "/api/chat": ("ollama.chat", parse_ollama),
    "/api/generate": ("ollama.generate", parse_ollama),
    "/api/embed": ("ollama.embed", parse_ollama),
    "/api/embeddings": ("ollama.embeddings", parse_ollama),  # the older embed: one prompt
    "/api/show": ("ollama.show", parse_ollama),
}


def error_protocol(path: str, anthropic_client: bool = False) -> str:
    """The protocol whose error shape a client of `path` expects. `/v1/models` serves both
    SDKs: the anthropic SDK's requests say so with their `anthropic-version` header."""
    if path.startswith("/api/"):
        return "ollama"
    if path == "/v1/messages" or path.startswith("/v1/messages/"):
        return "anthropic"
    if anthropic_client and (path == "/v1/models" or path.startswith("/v1/models/")):
        return "anthropic"
    return "openai"
