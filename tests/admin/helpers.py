"""Helpers for admin API tests: a gateway with its control plane, and an admin client."""

from __future__ import annotations

import time
from typing import Any

import httpx

from fleetgate.control.plane import ControlOptions
from tests.harness import Stack, deployment, provider, wait_until

ADMIN_KEY = "admin-secret-for-tests"


def options(db_url: str, **extra: Any) -> ControlOptions:
    return ControlOptions(database_url=db_url, admin_key=ADMIN_KEY, **extra)


def admin(stack: Stack, key: str = ADMIN_KEY) -> httpx.Client:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    return httpx.Client(base_url=stack.url, headers=headers, timeout=10)


def two_tier_fleet(stack: Stack) -> dict[str, Any]:
    """Model `m` on a short-window engine `a` and a long-window engine `b`."""
    a = stack.engines.get("a") or stack.engine("a")
    b = stack.engines.get("b") or stack.engine("b")
    return {
        "providers": [provider("pa", a), provider("pb", b)],
        "deployments": [
            deployment("m", "pa", upstream_model="up-a", context_window=4096),
            deployment("m", "pb", upstream_model="up-b", context_window=100_000),
        ],
        "models": [{"id": "m", "description": "two windows"}],
    }


def early_in_a_minute(margin: float = 10.0) -> None:
    """Rate limits count per fixed minute; start a counted sequence well inside one."""
    wait_until(lambda: time.time() % 60 < 60 - margin, margin + 1, "a fresh minute window")
