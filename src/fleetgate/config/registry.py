"""The registry of whole-tree config checks: each check module registers its checks here
with `@semantic_check`, and the loader runs them all (`loader.registered_checks`), so
`fleetgate check`, start-up and the admin API apply the same set."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from fleetgate.config.schema import FleetConfig

Loc = tuple[str | int, ...]

# Semantic checks run after the tree parses; each yields (loc, message).
SemanticCheck = Callable[[FleetConfig], Iterable[tuple[Loc, str]]]
SEMANTIC_CHECKS: list[SemanticCheck] = []


def semantic_check(fn: SemanticCheck) -> SemanticCheck:
    SEMANTIC_CHECKS.append(fn)
    return fn
