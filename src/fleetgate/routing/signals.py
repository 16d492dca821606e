"""Facts about a request body that `auto` and heartbeat detection look at.

They read the OpenAI-shaped body the ingress adapters hand over; nothing here is logged
except counts and flags.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any


def _texts(value: Any) -> Iterator[str]:
    """The strings in a message `content`, a `prompt` or an `input`."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, list):
        for item in value:
            if isinstance(item, str):
                yield item
            elif isinstance(item, dict) and isinstance(item.get("text"), str):
                yield item["text"]


def request_texts(body: dict[str, Any]) -> Iterator[str]:
    messages = body.get("messages")
    if isinstance(messages, list):
        for message in messages:
            if isinstance(message, dict):
                yield from _texts(message.get("content"))
    yield from _texts(body.get("prompt"))
    yield from _texts(body.get("input"))


def prompt_words(body: dict[str, Any], limit: int | None = None) -> int:
    """Whitespace-separated words in all text of the request; stops counting past `limit`."""
    total = 0
    for text in request_texts(body):
        total += len(text.split())
        if limit is not None and total > limit:
            break
    return total


def last_user_text(body: dict[str, Any]) -> str:
    messages = body.get("messages")
    if isinstance(messages, list):
        for message in reversed(messages):
            if isinstance(message, dict) and message.get("role") == "user":
                return " ".join(_texts(message.get("content")))
        return ""
    return " ".join(_texts(body.get("prompt")))


def has_tools(body: dict[str, Any]) -> bool:
    return bool(body.get("tools")) or bool(body.get("functions"))


def has_json_schema(body: dict[str, Any]) -> bool:
    fmt = body.get("response_format")
    return isinstance(fmt, dict) and fmt.get("type") == "json_schema"


def has_images(body: dict[str, Any]) -> bool:
    messages = body.get("messages")
    if not isinstance(messages, list):
        return False
    for message in messages:
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, list):
            for part in content:
                if isinstance(part, dict) and part.get("type") in ("image_url", "input_image"):
                    return True
    return False


def reasoning_effort(body: dict[str, Any]) -> str | None:
    """`reasoning_effort`, or the Responses-style `reasoning: {effort}`."""
    effort = body.get("reasoning_effort")
    if effort is None and isinstance(body.get("reasoning"), dict):
        effort = body["reasoning"].get("effort")
    return effort if isinstance(effort, str) else None
