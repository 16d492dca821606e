"""Client API keys: how they are made and hashed, and the in-memory ring the hot path reads."""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass

KEY_PREFIX = "fg-"


def new_secret() -> str:
    return KEY_PREFIX + secrets.token_urlsafe(32)


def hash_secret(secret: str) -> str:
    # Keys are 256 random bits, so a fast hash is enough (no password stretching needed)
    # and keeps the per-request check at one dict lookup.
    return hashlib.sha256(secret.encode()).hexdigest()


@dataclass(frozen=True, slots=True)
class ClientKey:
    id: str
    name: str
    allowed_models: frozenset[str] | None  # lower-cased names; None: every model
    rpm: int | None
    tpm: int | None
    budget: float | None
    spent: float

    def allows(self, model: str) -> bool:
        return self.allowed_models is None or model.lower() in self.allowed_models


class KeyRing:
    """Active keys by hash; replaced whole when keys change (here or on another replica)."""

    def __init__(self) -> None:
        self._by_hash: dict[str, ClientKey] = {}
        # spend recorded here: not yet in the store, and stored since the keys were loaded
        # (so in neither case part of `ClientKey.spent` yet)
        self._unsaved: dict[str, float] = {}
        self._saved: dict[str, float] = {}

    def replace(self, keys: dict[str, ClientKey]) -> None:
        self._by_hash = keys
        self._saved = {}

    def lookup(self, secret: str) -> ClientKey | None:
        return self._by_hash.get(hash_secret(secret))

    def spent(self, key: ClientKey) -> float:
        return key.spent + self._saved.get(key.id, 0.0) + self._unsaved.get(key.id, 0.0)

    def add_spend(self, key_id: str, cost: float) -> None:
        self._unsaved[key_id] = self._unsaved.get(key_id, 0.0) + cost

    def persisted(self, spend: dict[str, float]) -> None:
        """`spend` is in the store now (the next load of the keys includes it)."""
        for key_id, cost in spend.items():
            left = self._unsaved.get(key_id, 0.0) - cost
            if left > 1e-12:
                self._unsaved[key_id] = left
            else:
                self._unsaved.pop(key_id, None)
            self._saved[key_id] = self._saved.get(key_id, 0.0) + cost

    def __len__(self) -> int:
        return len(self._by_hash)
