"""Whole-tree checks of virtual models, tiers, `auto` and provider key labels."""

from __future__ import annotations

import os
from collections.abc import Iterator

from fleetgate.config.checks import ENV_REF, deployment_id
from fleetgate.config.registry import Loc, semantic_check
from fleetgate.config.schema import MAX_ROUTES, FleetConfig, RouteConfig
from fleetgate.config.suggest import did_you_mean


@semantic_check
def provider_key_labels(config: FleetConfig) -> Iterator[tuple[Loc, str]]:
    for i, provider in enumerate(config.providers):
        for label, raw in provider.keys.items():
            if "${" not in raw:
                continue
            loc: Loc = ("providers", i, "keys", label)
            match = ENV_REF.match(raw)
            if match is None:
                yield loc, "an env reference must be exactly ${NAME}"
            elif match.group(1) not in os.environ:
                yield (
                    loc,
                    f"warning: env var {match.group(1)} is not set; routes using key label "
                    f"{label!r} are unavailable until it is",
                )


def _route_problems(
    config: FleetConfig, routes: list[RouteConfig], base: Loc
) -> Iterator[tuple[Loc, str]]:
    deployments = {deployment_id(d): d for d in config.deployments}
    providers = {p.id: p for p in config.providers}
    if len(routes) > MAX_ROUTES:
        yield (*base, "routes"), f"has {len(routes)} routes; at most {MAX_ROUTES} are allowed"
    for j, route in enumerate(routes):
        loc: Loc = (*base, "routes", j)
        if route.deployment is not None:
            targets = [deployments[route.deployment]] if route.deployment in deployments else []
            if not targets:
                known = ", ".join(sorted(deployments)) or "none"
                hint = did_you_mean(route.deployment, deployments)
                yield (
                    (*loc, "deployment"),
                    f"unknown deployment {route.deployment!r}{hint} (known: {known})",
                )
        else:
            targets = [d for d in config.deployments if d.model == route.model]
            if not targets:
                models = {d.model for d in config.deployments}
                known = ", ".join(sorted(models)) or "none"
                hint = did_you_mean(route.model or "", models)
                yield (
                    (*loc, "model"),
                    f"unknown model {route.model!r}: no deployment serves it{hint} "
                    f"(known: {known})",
                )
        if route.key_label is None:
            continue
        for dep in targets:
            provider = providers.get(dep.provider)
            if provider is not None and route.key_label not in provider.keys:
                yield (
                    (*loc, "key_label"),
                    f"provider {provider.id!r} (of deployment {deployment_id(dep)!r}) has no "
                    f"key labelled {route.key_label!r} under `keys`",
                )


@semantic_check
def virtual_models(config: FleetConfig) -> Iterator[tuple[Loc, str]]:
    real = {m.lower(): m for m in [d.model for d in config.deployments]}
    real.update({deployment_id(d).lower(): deployment_id(d) for d in config.deployments})
    real.update({m.id.lower(): m.id for m in config.models})
    seen: dict[str, str] = {}
    for i, v in enumerate(config.virtual_models):
        base: Loc = ("virtual_models", i)
        key = v.name.lower()
        if key in seen:
            yield (
                (*base, "name"),
                f"duplicate virtual model name {v.name!r} (names are case-insensitive; "
                f"{seen[key]!r} comes first)",
            )
        seen.setdefault(key, v.name)
        if key in real and not v.allow_shadowing:
            yield (
                (*base, "name"),
                f"{v.name!r} shadows the real model or deployment id {real[key]!r}; rename it "
                "or set allow_shadowing: true",
            )
        auto_on = config.auto is not None and config.auto.enabled
        if key == "auto" and auto_on and not v.allow_shadowing:
            yield (
                (*base, "name"),
                "'auto' shadows automatic tier selection; rename it or set allow_shadowing: true",
            )
        yield from _route_problems(config, v.routes, base)
        if v.continue_on_default and "default" not in config.tiers:
            yield (
                (*base, "continue_on_default"),
                "warning: there is no tier named 'default', so nothing is appended",
            )


@semantic_check
def tiers(config: FleetConfig) -> Iterator[tuple[Loc, str]]:
    for name, tier in config.tiers.items():
        yield from _route_problems(config, tier.routes, ("tiers", name))


@semantic_check
def auto_tiers(config: FleetConfig) -> Iterator[tuple[Loc, str]]:
    auto = config.auto
    if auto is None or not auto.enabled:
        return
    known = ", ".join(sorted(config.tiers)) or "none"
    if auto.default_tier not in config.tiers:
        yield (
            ("auto", "default_tier"),
            f"auto needs the tier {auto.default_tier!r} (configured tiers: {known})",
        )
    for field in ("simple_tier", "reasoning_tier"):
        name = getattr(auto, field)
        if name not in config.tiers:
            yield (
                ("auto", field),
                f"warning: no tier {name!r}; auto uses {auto.default_tier!r} instead",
            )
    if auto.reasoning_at < auto.default_at:
        yield ("auto", "reasoning_at"), "must be at least `default_at`"
    for i, rule in enumerate(auto.keywords):
        if rule.tier not in config.tiers:
            hint = did_you_mean(rule.tier, config.tiers)
            yield (
                ("auto", "keywords", i, "tier"),
                f"unknown tier {rule.tier!r}{hint} (configured tiers: {known})",
            )
