"""Whole-tree checks that a per-field schema cannot express (references, uniqueness)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

from fleetgate.config.registry import Loc, semantic_check
from fleetgate.config.schema import DeploymentConfig, FleetConfig
from fleetgate.config.secrets import (
    ADMIN_KEY_ENV,
    ENV_REF,
    literal_secrets,
    secret_key_set,
    unencrypted_warning,
)
from fleetgate.config.suggest import did_you_mean


def deployment_id(dep: DeploymentConfig) -> str:
    return dep.id or f"{dep.provider}/{dep.upstream_model or dep.model}"


@semantic_check
def unique_provider_ids(config: FleetConfig) -> Iterator[tuple[Loc, str]]:
    seen: set[str] = set()
    for i, provider in enumerate(config.providers):
        if provider.id in seen:
            yield ("providers", i, "id"), f"duplicate provider id {provider.id!r}"
        seen.add(provider.id)


@semantic_check
def provider_credentials(config: FleetConfig) -> Iterator[tuple[Loc, str]]:
    for i, provider in enumerate(config.providers):
        key = provider.api_key
        if key is None or "${" not in key:
            continue
        match = ENV_REF.match(key)
        if match is None:
            yield ("providers", i, "api_key"), "an env reference must be exactly ${NAME}"
        elif match.group(1) not in os.environ:
            yield (
                ("providers", i, "api_key"),
                f"warning: env var {match.group(1)} is not set; the provider's deployments "
                "are unavailable until it is",
            )


@semantic_check
def admin_key(config: FleetConfig) -> Iterator[tuple[Loc, str]]:
    """An `admin.key` that names an unset variable leaves the admin API and the dashboard
    off (unless FLEETGATE_ADMIN_KEY is set, which overrides it)."""
    key = config.admin.key
    if key is None or "${" not in key or os.environ.get(ADMIN_KEY_ENV):
        return
    match = ENV_REF.match(key)
    if match is None:
        yield ("admin", "key"), "an env reference must be exactly ${NAME}"
    elif not os.environ.get(match.group(1)):
        yield (
            ("admin", "key"),
            f"warning: env var {match.group(1)} is not set; the admin API and the dashboard "
            f"are off until it (or {ADMIN_KEY_ENV}) is",
        )


@semantic_check
def unencrypted_secrets(config: FleetConfig) -> Iterator[tuple[Loc, str]]:
    """Literal provider credentials, while no key encrypts them in the store."""
    if secret_key_set():
        return
    for i, provider in enumerate(config.providers):
        paths = literal_secrets(provider.model_dump(include={"api_key", "keys", "headers"}))
        if paths:
            yield ("providers", i), "warning: " + unencrypted_warning(provider.id, paths)


@semantic_check
def deployment_references(config: FleetConfig) -> Iterator[tuple[Loc, str]]:
    providers = {p.id for p in config.providers}
    seen: set[str] = set()
    for i, dep in enumerate(config.deployments):
        if dep.provider not in providers:
            known = ", ".join(sorted(providers)) or "none"
            hint = did_you_mean(dep.provider, providers)
            yield (
                ("deployments", i, "provider"),
                f"unknown provider {dep.provider!r}{hint} (known: {known})",
            )
        dep_id = deployment_id(dep)
        if dep_id in seen:
            yield ("deployments", i, "id"), f"duplicate deployment id {dep_id!r}"
        seen.add(dep_id)


@semantic_check
def model_references(config: FleetConfig) -> Iterator[tuple[Loc, str]]:
    served = {d.model for d in config.deployments}
    seen: set[str] = set()
    for i, model in enumerate(config.models):
        if model.id in seen:
            yield ("models", i, "id"), f"duplicate model id {model.id!r}"
        seen.add(model.id)
        if model.id not in served:
            yield ("models", i, "id"), f"warning: model {model.id!r} has no deployment"


@semantic_check
def local_tokenizers(config: FleetConfig) -> Iterator[tuple[Loc, str]]:
    """A `tokenizer:` that is no file here (a warning: the config may be checked elsewhere
    than where it serves)."""
    for i, dep in enumerate(config.deployments):
        if dep.tokenizer and not Path(dep.tokenizer).is_file():
            yield (
                ("deployments", i, "tokenizer"),
                f"warning: {dep.tokenizer} is not a file here; exact counts on this deployment "
                "will fall back to the estimate until it is",
            )
