"""Literal provider credentials encrypted at rest, with the key in `FLEETGATE_SECRET_KEY`.

The store seals each literal credential of a provider (config/secrets.py says which) as
`enc:fernet:<token>` before it writes a body, and opens it when it reads one, so the rows
(and SQLite's file and WAL, and PostgreSQL's pages) never hold it in plain text. Fernet
(the `cryptography` package) is AES-128-CBC with an HMAC-SHA256 over it and a timestamp:
authenticated, so a tampered or wrongly keyed value fails loudly instead of decrypting to
noise. `${ENV}` references are not secrets and stay as they are.

The variable holds one key, or several separated by commas: the first seals, every one
opens. That is how keys rotate: put the new key first and the old one after it, start (the
start reseals every value under the new key), then drop the old one (docs/security.md).
Without a key, literals are kept as given (and warned about); a sealed value then cannot be
opened, and the store says so rather than serve a provider without its credential.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Mapping
from functools import cache
from typing import TYPE_CHECKING, Any

from fleetgate.config.loader import ConfigError, Problem
from fleetgate.config.secrets import SECRET_KEY_ENV, SECRET_MAPS, is_env_ref

if TYPE_CHECKING:
    from cryptography.fernet import MultiFernet

SEALED = "enc:fernet:"
Body = dict[str, Any]
Entities = dict[str, list[Body]]


class SecretKeyError(ConfigError):
    """The secret key is malformed, or a sealed value cannot be opened with it."""

    def __init__(self, message: str) -> None:
        super().__init__([Problem(SECRET_KEY_ENV, message)], "the store's secret key")


class SecretBox:
    """Seals and opens the literal credentials of provider bodies (None key: plain)."""

    def __init__(self, keys: tuple[str, ...]) -> None:
        self.keys = keys
        self._fernet: MultiFernet | None = None
        self._primary: Any = None
        if keys:
            from cryptography.fernet import Fernet, MultiFernet

            try:
                fernets = [Fernet(k.encode()) for k in keys]
            except ValueError as exc:
                raise SecretKeyError(
                    f"{SECRET_KEY_ENV} must hold Fernet keys (32 url-safe base64-encoded "
                    "bytes), separated by commas (docs/security.md says how to make one)"
                ) from exc
            self._fernet, self._primary = MultiFernet(fernets), fernets[0]

    @property
    def enabled(self) -> bool:
        return self._fernet is not None

    # ---- values ------------------------------------------------------------------------
    def _seal(self, value: str) -> str:
        if self._fernet is None or value.startswith(SEALED) or is_env_ref(value):
            return value
        return SEALED + self._fernet.encrypt(value.encode()).decode()

    def _open(self, value: str) -> str:
        if not value.startswith(SEALED):
            return value
        if self._fernet is None:
            raise SecretKeyError(
                f"the store holds encrypted provider credentials; set {SECRET_KEY_ENV} to "
                "the key they were encrypted with"
            )
        from cryptography.fernet import InvalidToken

        try:
            return self._fernet.decrypt(value[len(SEALED) :].encode()).decode()
        except InvalidToken as exc:
            raise SecretKeyError(
                f"a stored provider credential does not open with {SECRET_KEY_ENV}; list "
                "the key it was encrypted with after the new one (docs/security.md)"
            ) from exc

    def _stale(self, value: str) -> bool:
        """Whether a stored value should be written again: plain while a key is set, or
        sealed under another key than the first."""
        if self._fernet is None or is_env_ref(value):
            return False
        if not value.startswith(SEALED):
            return True
        from cryptography.fernet import InvalidToken

        try:
            self._primary.decrypt(value[len(SEALED) :].encode())
        except InvalidToken:
            return True
        return False

    # ---- bodies ------------------------------------------------------------------------
    def _map(self, body: Body, fn: Any) -> Body:
        out = dict(body)
        if isinstance(out.get("api_key"), str):
            out["api_key"] = fn(out["api_key"])
        for name in SECRET_MAPS:
            values = out.get(name)
            if isinstance(values, Mapping):
                out[name] = {k: fn(v) if isinstance(v, str) else v for k, v in values.items()}
        return out

    def seal(self, kind: str, body: Body) -> Body:
        return self._map(body, self._seal) if kind == "providers" else body

    def open(self, kind: str, body: Body) -> Body:
        return self._map(body, self._open) if kind == "providers" else body

    def stale(self, kind: str, body: Body) -> bool:
        if kind != "providers" or self._fernet is None:
            return False
        found: list[bool] = []
        self._map(body, lambda v: found.append(self._stale(v)) or v)
        return any(found)

    def seal_all(self, entities: Entities) -> Entities:
        return {kind: [self.seal(kind, b) for b in bodies] for kind, bodies in entities.items()}

    def open_all(self, entities: Entities) -> Entities:
        out = copy.copy(entities)
        for kind in out:
            if kind == "providers":
                out[kind] = [self.open(kind, b) for b in out[kind]]
        return out


@cache
def _box(raw: str) -> SecretBox:
    return SecretBox(tuple(k.strip() for k in raw.split(",") if k.strip()))


def secret_box() -> SecretBox:
    """The box for the key in the environment now (read on each store access, which is
    rare: config edits and reloads)."""
    return _box(os.environ.get(SECRET_KEY_ENV, ""))
