"""Gateway errors in the client's protocol: OpenAI, Anthropic or Ollama shape."""

from __future__ import annotations

import orjson

from fleetgate.errors import GatewayError

# Anthropic's error `type` for an HTTP status (its SDK maps status to exception classes)
_ANTHROPIC_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    503: "overloaded_error",
    529: "overloaded_error",
}


def error_body(protocol: str, exc: GatewayError) -> bytes:
    if protocol == "ollama":
        return orjson.dumps({"error": exc.message})
    if protocol == "anthropic":
        kind = _ANTHROPIC_TYPES.get(exc.status)
        if kind is None:
            kind = "api_error" if exc.status >= 500 else "invalid_request_error"
        return orjson.dumps({"type": "error", "error": {"type": kind, "message": exc.message}})
    return exc.to_json()


def upstream_error_body(protocol: str, body: bytes) -> bytes | None:
    """An upstream's own error body, when it already has the client's shape."""
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(data, dict):
        return None
    err = data.get("error")
    if protocol == "ollama":
        return body if isinstance(err, str) else None
    if protocol == "anthropic":
        return body if data.get("type") == "error" and isinstance(err, dict) else None
    return body if isinstance(err, dict) else None
