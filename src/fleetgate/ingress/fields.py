"""Field checks every ingress adapter shares (model name, stream flag, bounded strings)."""

from __future__ import annotations

from typing import Any

from fleetgate.config.preferences import parse_request_preferences
from fleetgate.config.schema import ProviderPreferences
from fleetgate.errors import invalid

# Longest model name a client may send: the longest name the fleet can hold (the request
# log's column). A longer one names nothing, and must never reach the log or a metric.
MAX_MODEL_NAME = 255
# Longest end-user id (`user`, Anthropic's `metadata.user_id`): an id, not a document.
MAX_USER_ID = 256


def require_model(body: dict[str, Any]) -> str:
    model = body.get("model")
    if model is None:
        raise invalid("`model` is required: name a model from GET /v1/models.", "model")
    if not isinstance(model, str) or not model:
        raise invalid("`model` must be a non-empty string.", "model")
    return bounded_name(model, "model", MAX_MODEL_NAME)


def bounded_name(value: str, name: str, limit: int) -> str:
    """A client-supplied name or id: at most `limit` characters of printable text."""
    if len(value) > limit:
        raise invalid(f"`{name}` is longer than {limit} characters.", name)
    if not value.isprintable():
        raise invalid(f"`{name}` must be printable text (no control characters).", name)
    return value


def check_user_ids(body: dict[str, Any]) -> None:
    """`user` (OpenAI) and `metadata.user_id` (Anthropic), when present, are short strings."""
    user = body.get("user")
    if user is not None:
        if not isinstance(user, str):
            raise invalid("`user` must be a string.", "user")
        bounded_name(user, "user", MAX_USER_ID)
    metadata = body.get("metadata")
    user_id = metadata.get("user_id") if isinstance(metadata, dict) else None
    if isinstance(user_id, str):
        bounded_name(user_id, "metadata.user_id", MAX_USER_ID)


def stream_flag(body: dict[str, Any], default: bool) -> bool:
    stream = body.get("stream")
    if stream is None:
        return default
    if not isinstance(stream, bool):
        raise invalid("`stream` must be true or false.", "stream")
    return stream


def positive_int(body: dict[str, Any], name: str) -> int | None:
    value = body.get(name)
    if value is None:
        return None
    if type(value) is not int or value < 1:
        raise invalid(f"`{name}` must be a positive integer.", name)
    return value


def take_preferences(body: dict[str, Any]) -> ProviderPreferences | None:
    """The body's `provider` routing preferences, validated the same way on every protocol
    and removed from the body: they are for fleetgate, never for the upstream."""
    return parse_request_preferences(body.pop("provider", None))
