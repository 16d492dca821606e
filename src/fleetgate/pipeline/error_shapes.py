"""Gateway errors in the client's protocol: OpenAI, Anthropic or Ollama shape."""

from __future__ import annotations

import orjson

from fleetgate.errors import GatewayError
from fleetgate.execute.context_errors import parse_context_error
from fleetgate.translate.errors import ANTHROPIC_STATUS, anthropic_error, prompt_too_long


def error_status(protocol: str, exc: GatewayError) -> int:
    """The HTTP status in the client's protocol (Anthropic says "overloaded" with 529)."""
    if protocol == "anthropic":
        return ANTHROPIC_STATUS.get(exc.status, exc.status)
    return exc.status


def error_body(protocol: str, exc: GatewayError) -> bytes:
    if protocol == "ollama":
        return orjson.dumps({"error": exc.message})
    if protocol == "anthropic":
        message = exc.message
        if exc.code == "context_too_large":
            message = prompt_too_long(None, message)
        elif exc.code == "upstream_rejected" and exc.upstream_body:
            exceeded = parse_context_error(exc.upstream_body)
            if exceeded is not None:  # Claude Code compacts on this wording
                message = prompt_too_long(exceeded, message)
        return orjson.dumps(anthropic_error(error_status(protocol, exc), message))
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
    # an error object without its message and type is not the client's shape: the
    # gateway's own error says what the upstream said, as far as it can tell
    if not isinstance(err, dict) or not isinstance(err.get("message"), str) or "type" not in err:
        return None
    if protocol == "anthropic":
        if data.get("type") != "error":
            return None
        if "prompt is too long" not in str(err.get("message")) and parse_context_error(body):
            return None  # an engine's own wording: answered as "prompt is too long"
        return body
    # an Anthropic-shaped error (`"type": "error"`) is not OpenAI's, though it nests `error`
    return body if data.get("type") != "error" else None
