"""Context tiers as data: a model's `long_context` block and `name@window` model references.

`expand_tiers` turns both into plain deployments with declared windows, so the fleet (and
everything after it) sees one shape however the tiers were written. A config without
either is returned unchanged.
"""

from __future__ import annotations

import re

from fleetgate.config.checks import deployment_id
from fleetgate.config.schema import (
    DeploymentConfig,
    FleetConfig,
    LongContextConfig,
    ModelConfig,
    ProviderConfig,
)

LONG_TIER = "long"
DEFAULT_TIER = "default"

# `provider-model-name@1048576`: the window rides on the model reference
_WINDOW_SUFFIX = re.compile(r"^(.+)@([1-9][0-9]{0,9})$")


def split_window_suffix(reference: str) -> tuple[str, int | None]:
    """`("name", 1048576)` for `name@1048576`; `(reference, None)` without a suffix."""
    match = _WINDOW_SUFFIX.match(reference)
    if match is None:
        return reference, None
    return match.group(1), int(match.group(2))


def long_provider_id(model_id: str) -> str:
    return f"{model_id}@{LONG_TIER}"


def long_deployment_id(model_id: str) -> str:
    return f"{model_id}@{LONG_TIER}"


def _with_window_suffix(dep: DeploymentConfig) -> DeploymentConfig:
    # An explicit context_window means the name is taken verbatim (some providers' own
    # model names end in @<digits>, e.g. dated ids).
    if dep.context_window is not None or not dep.upstream_model:
        return dep
    name, window = split_window_suffix(dep.upstream_model)
    if window is None:
        return dep
    return dep.model_copy(
        update={"id": deployment_id(dep), "upstream_model": name, "context_window": window}
    )


def _long_deployment(
    model: ModelConfig,
    block: LongContextConfig,
    base: DeploymentConfig,
    providers: list[ProviderConfig],
) -> DeploymentConfig:
    provider_id = block.provider
    if provider_id is None:
        assert block.inference_url is not None  # the semantic check guarantees one of them
        provider_id = long_provider_id(model.id)
        base_provider = next(p for p in providers if p.id == base.provider)
        providers.append(
            ProviderConfig(
                id=provider_id,
                kind=block.kind or base_provider.kind,
                base_url=block.inference_url,
                api_key=base_provider.api_key,
                headers=base_provider.headers,
                timeouts=base_provider.timeouts,
                max_concurrency=base_provider.max_concurrency,
            )
        )
    return DeploymentConfig(
        id=long_deployment_id(model.id),
        model=model.id,
        provider=provider_id,
        upstream_model=block.upstream_model or base.upstream_model or base.model,
        context_window=block.max_context_tokens,
        weight=base.weight,
        priority=base.priority,
        price=base.price,
        tier=LONG_TIER,
        tokenizer_family=base.tokenizer_family,
        tokenizer=base.tokenizer,
    )


def expand_tiers(config: FleetConfig) -> FleetConfig:
    """The config with `long_context` blocks expanded and window suffixes applied.

    Base deployments of a model with a block get `base_max_context_tokens` unless they
    declare their own window; the long host becomes deployment `<model>@long` (tier
    `long`, provider `<model>@long` when the block gives an `inference_url`).
    """
    blocks = [m for m in config.models if m.long_context is not None]
    deployments = [_with_window_suffix(d) for d in config.deployments]
    changed = any(a is not b for a, b in zip(deployments, config.deployments, strict=True))
    if not blocks and not changed:
        return config
    providers = list(config.providers)
    for model in blocks:
        block = model.long_context
        assert block is not None
        base_indexes = [i for i, d in enumerate(deployments) if d.model == model.id]
        if not base_indexes:
            continue  # rejected by the semantic check; nothing to expand
        for i in base_indexes:
            if deployments[i].context_window is None:
                deployments[i] = deployments[i].model_copy(
                    update={"context_window": block.base_max_context_tokens}
                )
        base = deployments[base_indexes[0]]
        deployments.append(_long_deployment(model, block, base, providers))
    return config.model_copy(update={"providers": providers, "deployments": deployments})
