"""Provider credentials in a config: which values are secrets, and which are written literally.

A provider's `api_key`, each value of its `keys` and each value of its `headers` may carry
a credential. Written as an `${ENV}` reference it stays a reference everywhere (the file,
the store, the admin API); written literally, the store keeps it encrypted when
`FLEETGATE_SECRET_KEY` is set (store/secrets.py), and in plain text otherwise, which
`fleetgate check`, the start and `/admin/status` warn about.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fleetgate.config.schema import FleetConfig

ENV_REF = re.compile(r"^\$\{([A-Za-z_][A-Za-z0-9_]*)\}$")
SECRET_KEY_ENV = "FLEETGATE_SECRET_KEY"
ADMIN_KEY_ENV = "FLEETGATE_ADMIN_KEY"
SECRET_MAPS = ("keys", "headers")  # every value of these may be a credential


def is_env_ref(value: object) -> bool:
    return isinstance(value, str) and ENV_REF.match(value) is not None


def secret_fields(body: Mapping[str, Any]) -> Iterator[tuple[str, str | None, str]]:
    """Each credential of a provider body: (field, key within it or None, value)."""
    api_key = body.get("api_key")
    if isinstance(api_key, str):
        yield "api_key", None, api_key
    for name in SECRET_MAPS:
        values = body.get(name)
        if isinstance(values, Mapping):
            for key, value in values.items():
                if isinstance(value, str):
                    yield name, key, value


def literal_secrets(body: Mapping[str, Any]) -> list[str]:
    """The paths (`api_key`, `headers.X-Secret`) of a provider's literal credentials."""
    return [
        field if key is None else f"{field}.{key}"
        for field, key, value in secret_fields(body)
        if not is_env_ref(value)
    ]


def secret_key_set(environ: Mapping[str, str] | None = None) -> bool:
    return bool((os.environ if environ is None else environ).get(SECRET_KEY_ENV, "").strip())


def unencrypted_warning(provider_id: str, paths: list[str]) -> str:
    """What to say of a provider's literal credentials while no secret key is set."""
    return (
        f"provider {provider_id!r}: {', '.join(paths)} "
        f"{'is a literal credential' if len(paths) == 1 else 'are literal credentials'}, "
        f"kept unencrypted in the store; write ${{VAR}} references instead, or set "
        f"{SECRET_KEY_ENV} to encrypt them (docs/security.md)"
    )


def secret_warnings(config: FleetConfig, admin_key: str | None) -> list[str]:
    """What a start logs and `/admin/status` lists: the admin API off for want of a key,
    and literal credentials kept unencrypted for want of a secret key."""
    out = []
    if not admin_key:
        raw = config.admin.key
        match = ENV_REF.match(raw) if raw else None
        why = f"admin.key names {match.group(1)}, which is not set" if match else "no admin key"
        out.append(
            f"the admin API and the dashboard are off: {why}; set {ADMIN_KEY_ENV} (or "
            "admin.key) and restart"
        )
    if not secret_key_set():
        for provider in config.providers:
            paths = literal_secrets(provider.model_dump(include={"api_key", "keys", "headers"}))
            if paths:
                out.append(unencrypted_warning(provider.id, paths))
    return out
