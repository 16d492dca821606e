"""The fleet as an immutable snapshot: providers, deployments, models, virtual models and
tiers.

A `Fleet` is built once from a validated `FleetConfig` and never changed; a new config
builds a new `Fleet` that `FleetHolder.swap` installs atomically, so the hot path reads
`holder.fleet` without locks.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from fleetgate.config.capabilities import deployment_capabilities
from fleetgate.config.checks import deployment_id
from fleetgate.config.preferences import env_preferences
from fleetgate.config.replicas import expand_replicas
from fleetgate.config.schema import (
    CircuitConfig,
    FleetConfig,
    ProviderPreferences,
    ResumeConfig,
)
from fleetgate.config.tiers import expand_tiers
from fleetgate.fleet.families import infer_family
from fleetgate.fleet.model import Deployment, Model, Provider, redactor_for, resolve_key
from fleetgate.fleet.routes import (
    Tier,
    VirtualModel,
    build_tiers,
    build_virtual_models,
    params_dict,
)
from fleetgate.redact import Redactor


@dataclass(frozen=True, slots=True)
class Fleet:
    providers: dict[str, Provider]
    deployments: dict[str, Deployment]
    models: dict[str, Model]
    circuit: CircuitConfig
    config: FleetConfig
    version: int = 0
    extra: dict[str, Any] = field(default_factory=dict)
    # gateway-wide provider preferences from FLEETGATE_PROVIDER_* (read when the fleet is built)
    env_preferences: ProviderPreferences | None = None
    # enabled virtual models by lower-cased name, and named tiers (see routes.py)
    virtual_models: dict[str, VirtualModel] = field(default_factory=dict)
    tiers: dict[str, Tier] = field(default_factory=dict)
    # removes every provider credential from upstream text leaving the gateway
    redactor: Redactor = field(default_factory=Redactor)


def build_fleet(config: FleetConfig, version: int = 0) -> Fleet:
    tiered = expand_tiers(config)  # long_context blocks become plain deployments
    tiered = expand_replicas(tiered)  # a provider's `endpoints` become one provider each
    providers: dict[str, Provider] = {}
    for p in tiered.providers:
        key, env = resolve_key(p.api_key)
        providers[p.id] = Provider(
            id=p.id,
            kind=p.kind,
            base_url=p.base_url,
            api_key=key,
            api_key_env=env,
            headers=tuple(p.headers.items()),
            timeouts=p.timeouts,
            max_concurrency=p.max_concurrency,
            concurrency_limit=p.concurrency_limit,
            queue_size=p.queue_size,
            queue_timeout=p.queue_timeout_seconds,
            default_context_tokens=p.default_context_tokens,
            context_limits=tuple(p.context_limits.items()),
            unified_kv=p.unified_kv,
            discovery=p.discovery if p.discovery is not None else p.kind == "ollama",
            truncates=p.truncates or ("silently" if p.kind == "ollama" else "refuses"),
            keys=tuple((label, *resolve_key(raw)) for label, raw in p.keys.items()),
            protocols=frozenset(p.protocols) if p.protocols is not None else None,
        )
    deployments: dict[str, Deployment] = {}
    by_model: dict[str, list[Deployment]] = {}
    for i, d in enumerate(tiered.deployments):
        dep = Deployment(
            id=deployment_id(d),
            model=d.model,
            provider=providers[d.provider],
            upstream_model=d.upstream_model or d.model,
            context_window=d.context_window,
            weight=d.weight,
            priority=d.priority,
            price_input=d.price.input,
            price_output=d.price.output,
            index=i,
            capabilities=deployment_capabilities(
                providers[d.provider].kind, d.supported_parameters, d.modalities
            ),
            parameters_declared=d.supported_parameters is not None,
            quantization=d.quantization,
            params=params_dict(d.params),
            tier=d.tier,
            tokenizer_family=d.tokenizer_family or infer_family(d.upstream_model or d.model),
            tokenizer=d.tokenizer,
        )
        deployments[dep.id] = dep
        by_model.setdefault(dep.model, []).append(dep)
    owners = {m.id: m.owned_by for m in config.models}
    guards = {m.id: m.context_guard for m in config.models}
    prefs = {m.id: m.provider for m in config.models}
    resumes = {m.id: m.resume for m in config.models}
    models = {
        model_id: Model(
            id=model_id,
            owned_by=owners.get(model_id, "fleetgate"),
            deployments=tuple(deps),
            context_guard=guards.get(model_id),
            preferences=prefs.get(model_id),
            resume=resumes.get(model_id) or ResumeConfig(),
        )
        for model_id, deps in by_model.items()
    }
    return Fleet(
        providers=providers,
        deployments=deployments,
        models=models,
        circuit=config.routing.circuit,
        config=config,
        version=version,
        env_preferences=env_preferences()[0],
        virtual_models=build_virtual_models(config, deployments, models),
        tiers=build_tiers(config, deployments, models),
        redactor=redactor_for(providers.values()),
    )


class FleetHolder:
    """Holds the live fleet; `swap` replaces it in one reference assignment."""

    __slots__ = ("_listeners", "fleet")

    def __init__(self, fleet: Fleet) -> None:
        self.fleet = fleet
        self._listeners: list[Any] = []

    def swap(self, fleet: Fleet) -> Fleet:
        old, self.fleet = self.fleet, fleet
        for listener in self._listeners:
            listener(old, fleet)
        return old

    def on_swap(self, listener: Any) -> None:
        self._listeners.append(listener)
