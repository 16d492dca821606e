"""Whole-tree checks for capabilities and provider preferences (typos, unknown names, env)."""

from __future__ import annotations

from collections.abc import Iterator

from fleetgate.config.capabilities import KNOWN_PARAMETERS
from fleetgate.config.checks import deployment_id
from fleetgate.config.preferences import env_preferences
from fleetgate.config.registry import Loc, semantic_check
from fleetgate.config.schema import FleetConfig


@semantic_check
def supported_parameter_names(config: FleetConfig) -> Iterator[tuple[Loc, str]]:
    for i, dep in enumerate(config.deployments):
        for j, name in enumerate(dep.supported_parameters or ()):
            if name not in KNOWN_PARAMETERS:
                yield (
                    ("deployments", i, "supported_parameters", j),
                    f"warning: {name!r} is not a parameter fleetgate derives from requests; "
                    "it never matches (see docs/routing-preferences.md)",
                )


@semantic_check
def preference_names(config: FleetConfig) -> Iterator[tuple[Loc, str]]:
    known = {p.id.casefold() for p in config.providers}
    known |= {deployment_id(d).casefold() for d in config.deployments}
    for i, model in enumerate(config.models):
        prefs = model.provider
        if prefs is None:
            continue
        for field_name in ("only", "ignore", "order"):
            for j, entry in enumerate(getattr(prefs, field_name) or ()):
                if entry.strip().casefold() not in known:
                    yield (
                        ("models", i, "provider", field_name, j),
                        f"warning: {entry!r} names no provider or deployment",
                    )


@semantic_check
def provider_env(config: FleetConfig) -> Iterator[tuple[Loc, str]]:
    for var, problem in env_preferences()[1]:
        yield ("env", var), problem
