"""Virtual models and named tiers as immutable route chains, built with the fleet snapshot."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from fleetgate.config.schema import FleetConfig, ResumeConfig, RouteConfig, RouteParams

if TYPE_CHECKING:
    from fleetgate.fleet.model import Deployment, Model


@dataclass(frozen=True, slots=True)
class Route:
    """One declared hop; a `model` route stands for all that model's deployments."""

    target: str  # "deployment:<id>" or "model:<id>", as declared
    deployments: tuple[Deployment, ...]  # in static order: priority, then config order
    key_label: str | None
    params: dict[str, Any] | None


@dataclass(frozen=True, slots=True)
class VirtualModel:
    name: str  # as configured; responses still echo the name the client sent
    routes: tuple[Route, ...]
    response_mode: str  # "any" | "stream_only" | "non_stream_only"
    continue_on_default: bool
    resume: ResumeConfig | None = None  # replaces the routes' models' setting

    @property
    def deployments(self) -> tuple[Deployment, ...]:
        """The deployments its own routes reach, in declared order (repeats kept)."""
        return tuple(d for r in self.routes for d in r.deployments)

    @property
    def context_length(self) -> int | None:
        windows = [d.context_window for d in self.deployments if d.context_window]
        return max(windows) if windows else None


@dataclass(frozen=True, slots=True)
class Tier:
    name: str
    routes: tuple[Route, ...]


def params_dict(params: RouteParams | None) -> dict[str, Any] | None:
    """The overrides a scope sets, without the unset ones; None when it sets nothing."""
    if params is None:
        return None
    data = params.model_dump(exclude_none=True)
    if not data.get("extra_body"):
        data.pop("extra_body", None)
    return data or None


def _route(cfg: RouteConfig, deployments: dict[str, Deployment], models: dict[str, Model]) -> Route:
    if cfg.deployment is not None:
        target = f"deployment:{cfg.deployment}"
        dep = deployments.get(cfg.deployment)
        deps: tuple[Deployment, ...] = (dep,) if dep is not None else ()
    else:
        assert cfg.model is not None
        target = f"model:{cfg.model}"
        model = models.get(cfg.model)
        found = model.deployments if model is not None else ()
        deps = tuple(sorted(found, key=lambda d: (d.priority, d.index)))
    return Route(target, deps, cfg.key_label, params_dict(cfg.params))


def build_virtual_models(
    config: FleetConfig, deployments: dict[str, Deployment], models: dict[str, Model]
) -> dict[str, VirtualModel]:
    """Enabled virtual models by lower-cased name; a disabled one releases its name."""
    out: dict[str, VirtualModel] = {}
    for v in config.virtual_models:
        if not v.enabled:
            continue
        out[v.name.lower()] = VirtualModel(
            name=v.name,
            routes=tuple(_route(r, deployments, models) for r in v.routes),
            response_mode=v.response_mode,
            continue_on_default=v.continue_on_default,
            resume=v.resume,
        )
    return out


def build_tiers(
    config: FleetConfig, deployments: dict[str, Deployment], models: dict[str, Model]
) -> dict[str, Tier]:
    return {
        name: Tier(name, tuple(_route(r, deployments, models) for r in tier.routes))
        for name, tier in config.tiers.items()
    }
