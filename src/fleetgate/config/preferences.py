"""Provider preferences as data: the request body's `provider` object and the gateway-wide
`FLEETGATE_PROVIDER_*` environment variables, parsed into `ProviderPreferences`.

Merging the layers into the set a plan follows is routing's (`routing/preferences.py`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import orjson
from pydantic import ValidationError

from fleetgate.config.schema import ProviderPreferences
from fleetgate.errors import invalid

ENV_LISTS = {
    "only": "FLEETGATE_PROVIDER_ONLY",
    "ignore": "FLEETGATE_PROVIDER_IGNORE",
    "order": "FLEETGATE_PROVIDER_ORDER",
}


def _error_path(loc: tuple[Any, ...]) -> str:
    out = "provider"
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else f".{part}"
    return out


def parse_request_preferences(value: Any) -> ProviderPreferences | None:
    """The body's `provider` object; a malformed one is a 400 naming the field."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise invalid("`provider` must be an object of routing preferences.", "provider")
    try:
        return ProviderPreferences.model_validate(value)
    except ValidationError as exc:
        err = exc.errors()[0]
        path = _error_path(err["loc"])
        msg = "is not a known preference" if err["type"] == "extra_forbidden" else err["msg"]
        raise invalid(f"`{path}`: {msg} (see docs/routing-preferences.md).", path) from exc


def parse_env_list(raw: str) -> list[str]:
    """A comma-separated list (`a, b`) or a JSON list (`["a", "b"]`); raises ValueError."""
    text = raw.strip()
    if text.startswith("["):
        try:
            value = orjson.loads(text)
        except orjson.JSONDecodeError as exc:
            raise ValueError(f"not a valid JSON list: {exc}") from exc
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise ValueError("a JSON list must hold only strings")
        return [v.strip() for v in value if v.strip()]
    return [part.strip() for part in text.split(",") if part.strip()]


def env_preferences(
    environ: Mapping[str, str] | None = None,
) -> tuple[ProviderPreferences | None, list[tuple[str, str]]]:
    """Gateway-wide preferences from the environment, and (variable, problem) pairs."""
    environ = os.environ if environ is None else environ
    fields: dict[str, list[str]] = {}
    problems: list[tuple[str, str]] = []
    for name, var in ENV_LISTS.items():
        raw = environ.get(var)
        if raw is None or not raw.strip():
            continue
        try:
            fields[name] = parse_env_list(raw)
        except ValueError as exc:
            problems.append((var, str(exc)))
    return (ProviderPreferences(**fields) if fields else None), problems
