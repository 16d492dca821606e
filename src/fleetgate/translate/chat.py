"""The Chat Completions side that every translator shares: ids, choices, tool arguments."""

from __future__ import annotations

import uuid
from typing import Any

import orjson


def new_id(prefix: str) -> str:
    return f"{prefix}{uuid.uuid4().hex[:24]}"


def swap_prefix(upstream: Any, old: str, new: str) -> str:
    """An upstream id under the client protocol's prefix (a fresh one when there is none)."""
    if isinstance(upstream, str) and upstream:
        return upstream if upstream.startswith(new) else new + upstream.removeprefix(old)
    return new_id(new)


def first_choice(answer: dict[str, Any]) -> dict[str, Any]:
    choices = answer.get("choices") or [{}]
    return choices[0] if isinstance(choices[0], dict) else {}


def reasoning_of(message: dict[str, Any]) -> str | None:
    """The reasoning text engines put beside the content (`reasoning_content`, `reasoning`)."""
    for key in ("reasoning_content", "reasoning"):
        value = message.get(key)
        if isinstance(value, str) and value:
            return value
    return None


def json_args(arguments: Any) -> Any:
    """Tool-call arguments (a JSON string in chat) as the object other protocols want."""
    if isinstance(arguments, dict):
        return arguments
    if not isinstance(arguments, str) or not arguments.strip():
        return {}
    try:
        value = orjson.loads(arguments)
    except orjson.JSONDecodeError:
        return {"_raw_arguments": arguments}
    return value if isinstance(value, dict) else {"_value": value}


def dump_args(value: Any) -> str:
    """Tool-call arguments as chat's JSON string (an unparsable original comes back as is)."""
    if isinstance(value, dict) and set(value) == {"_raw_arguments"}:
        return str(value["_raw_arguments"])
    return orjson.dumps(value if value is not None else {}).decode()
