"""Whole-tree checks for context tiers: `long_context` blocks and tier windows."""

from __future__ import annotations

from collections.abc import Iterator

from fleetgate.config.checks import deployment_id
from fleetgate.config.registry import Loc, semantic_check
from fleetgate.config.schema import FleetConfig


@semantic_check
def long_context_blocks(config: FleetConfig) -> Iterator[tuple[Loc, str]]:
    """An invalid block is an error: it must never silently collapse the tiers."""
    providers = {p.id for p in config.providers}
    deployment_ids = {deployment_id(d) for d in config.deployments}
    for i, model in enumerate(config.models):
        block = model.long_context
        if block is None:
            continue
        loc: Loc = ("models", i, "long_context")
        if (block.inference_url is None) == (block.provider is None):
            yield loc, "needs exactly one of `inference_url` or `provider`"
        elif block.provider is not None and block.provider not in providers:
            known = ", ".join(sorted(providers)) or "none"
            yield (*loc, "provider"), f"unknown provider {block.provider!r} (known: {known})"
        elif block.inference_url is not None and f"{model.id}@long" in providers:
            yield (
                (*loc, "inference_url"),
                f"the generated provider id {model.id + '@long'!r} is already taken",
            )
        if block.max_context_tokens <= block.base_max_context_tokens:
            yield (
                (*loc, "max_context_tokens"),
                f"must be larger than base_max_context_tokens ({block.max_context_tokens} <= "
                f"{block.base_max_context_tokens}); equal windows would make the long host a "
                "round-robin peer instead of a tier",
            )
        if len(model.id) > 195:  # ids are at most 200 characters
            yield ("models", i, "id"), "too long for a long_context tier (at most 195 characters)"
        if f"{model.id}@long" in deployment_ids:
            yield loc, f"the generated deployment id {model.id + '@long'!r} is already taken"
        base = [(j, d) for j, d in enumerate(config.deployments) if d.model == model.id]
        if not base:
            yield loc, f"model {model.id!r} has no base deployment for the long tier to extend"
        for j, dep in base:
            if dep.context_window is not None and dep.context_window >= block.max_context_tokens:
                yield (
                    ("deployments", j, "context_window"),
                    f"{dep.context_window} is not below the long tier's max_context_tokens "
                    f"({block.max_context_tokens}) of model {model.id!r}",
                )


@semantic_check
def long_tier_windows(config: FleetConfig) -> Iterator[tuple[Loc, str]]:
    """A deployment labelled `tier: long` whose window is not larger than its model's base
    (`default`) tier: best fit would send short requests to it and long ones to the base."""
    base: dict[str, tuple[int, str]] = {}  # model -> its largest base window, and whose
    for dep in config.deployments:
        window = dep.context_window
        if dep.tier == "default" and window is not None and window > base.get(dep.model, (0,))[0]:
            base[dep.model] = (window, deployment_id(dep))
    for j, dep in enumerate(config.deployments):
        window, largest = dep.context_window, base.get(dep.model)
        if dep.tier != "long" or window is None or largest is None or window > largest[0]:
            continue
        yield (
            ("deployments", j, "context_window"),
            f"the long tier's window ({window}) is not larger than the base tier's "
            f"({largest[0]}, deployment {largest[1]!r}) of model {dep.model!r}; give the long "
            "tier the larger window, or swap the `tier` labels",
        )
