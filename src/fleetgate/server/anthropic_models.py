"""`GET /v1/models` as the Anthropic SDK reads it too (`models.list`, `models.retrieve`).

Both SDKs call the same path. Each catalog entry keeps OpenAI's fields and gains
Anthropic's (`type`, `display_name`, `created_at`, `max_input_tokens` when the window is
known); the list gains `has_more`, `first_id` and `last_id`. Each SDK ignores the other's.
"""

from __future__ import annotations

import time
from typing import Any


def anthropic_entry(entry: dict[str, Any]) -> dict[str, Any]:
    """One catalog entry with Anthropic's `ModelInfo` fields beside OpenAI's."""
    created = entry.get("created")
    seconds = created if isinstance(created, int) else 0
    out = {
        **entry,
        "type": "model",
        "display_name": entry["id"],
        "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds)),
    }
    if isinstance(entry.get("context_length"), int):
        out["max_input_tokens"] = entry["context_length"]
    return out


def anthropic_listing(body: dict[str, Any]) -> dict[str, Any]:
    """The whole `GET /v1/models` body: one page, entries as `anthropic_entry` gives them."""
    data = [anthropic_entry(e) for e in body["data"]]
    first = data[0]["id"] if data else None
    last = data[-1]["id"] if data else None
    return {**body, "data": data, "has_more": False, "first_id": first, "last_id": last}
