"""Errors in the client's protocol when the deployment spoke another one.

Anthropic's SDK picks its exception class by HTTP status and reads `error.type`; Claude
Code compacts a conversation when a 400's message starts with "prompt is too long", so a
context-length error of any engine is worded that way for Anthropic clients.
"""

from __future__ import annotations

from typing import Any

from fleetgate.execute.context_errors import ContextExceeded

# Anthropic's error `type` for an HTTP status
ANTHROPIC_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    503: "overloaded_error",
    529: "overloaded_error",
}
# Anthropic answers "overloaded" with 529, which its SDK raises as OverloadedError
ANTHROPIC_STATUS = {503: 529}


def anthropic_type(status: int) -> str:
    kind = ANTHROPIC_TYPES.get(status)
    if kind is None:
        kind = "api_error" if status >= 500 else "invalid_request_error"
    return kind


def anthropic_error(status: int, message: str) -> dict[str, Any]:
    return {"type": "error", "error": {"type": anthropic_type(status), "message": message}}


def prompt_too_long(exceeded: ContextExceeded | None, detail: str) -> str:
    """Anthropic's wording of a context-length error, with the numbers when known."""
    if exceeded is not None and exceeded.prompt_tokens is not None and exceeded.limit:
        head = f"prompt is too long: {exceeded.prompt_tokens} tokens > {exceeded.limit} maximum"
    else:
        head = "prompt is too long"
    return f"{head} ({detail})" if detail else head


def openai_error(message: str, err_type: str, code: Any = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": err_type, "code": code, "param": None}}
