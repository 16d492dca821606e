"""The fleet as an immutable snapshot: providers, deployments, models.

A `Fleet` is built once from a validated `FleetConfig` and never changed; a new config
builds a new `Fleet` that `FleetHolder.swap` installs atomically, so the hot path reads
`holder.fleet` without locks.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from fleetgate.capabilities import deployment_capabilities, health_check_defaults
from fleetgate.config.checks import ENV_REF, deployment_id
from fleetgate.config.schema import (
    CircuitConfig,
    FleetConfig,
    ProviderKind,
    ProviderPreferences,
    Timeouts,
)
from fleetgate.context.families import infer_family
from fleetgate.context.tiers import expand_tiers
from fleetgate.fleet_routes import (
    Tier,
    VirtualModel,
    build_tiers,
    build_virtual_models,
    params_dict,
)
from fleetgate.redact import Redactor, redactor_for
from fleetgate.routing.preferences import env_preferences


@dataclass(frozen=True, slots=True)
class Provider:
    id: str
    kind: ProviderKind
    base_url: str
    api_key: str | None
    api_key_env: str | None  # the env var named by the config, when it used one
    headers: tuple[tuple[str, str], ...]
    timeouts: Timeouts
    max_concurrency: int
    concurrency_limit: int | None = None  # gateway-side slots; None: no limit
    queue_size: int = 32
    queue_timeout: float = 30.0
    default_context_tokens: int | None = None
    context_limits: tuple[tuple[str, int], ...] = ()  # (glob, tokens), as configured
    unified_kv: bool = False
    discovery: bool = True
    truncates: str = "refuses"  # "silently": keeps the prompt's end and answers 200
    # alternative credentials: (label, resolved key or None, env var named or None)
    keys: tuple[tuple[str, str | None, str | None], ...] = ()
    # client protocols served natively (`protocols: [...]`); None: the kind's own list
    protocols: frozenset[str] | None = None
    # the active health check while a circuit is open: GET this path (None: off), this often
    health_path: str | None = None
    health_interval: float = 2.0

    @property
    def has_credentials(self) -> bool:
        """False only when the config names an env var that is not set."""
        return self.api_key_env is None or self.api_key is not None

    def credential(self, label: str | None) -> tuple[str | None, str | None] | None:
        """(key, env var) of the labelled credential (the default one without a label);
        None for a label the provider does not define."""
        if label is None:
            return self.api_key, self.api_key_env
        for name, key, env in self.keys:
            if name == label:
                return key, env
        return None


@dataclass(frozen=True, slots=True)
class Deployment:
    id: str
    model: str
    provider: Provider
    upstream_model: str
    context_window: int | None
    weight: float
    priority: int
    price_input: float
    price_output: float
    index: int  # position in the config; the final tie-breaker, so plans are deterministic
    tier: str = "default"
    capabilities: frozenset[str] = frozenset()  # need names (see capabilities.py)
    # True when the config lists `supported_parameters` (not the kind's default): only then
    # are unsupported sampling knobs removed from the body sent to it
    parameters_declared: bool = False
    quantization: str | None = None
    params: dict[str, Any] | None = None  # overrides of scope `deployment`
    tokenizer_family: str = "generic"  # how the context estimate costs text here
    tokenizer: str | None = None  # a local tokenizer.json for exact counts
    enabled: bool = True  # False: kept in the fleet, sent nothing (reason `disabled`)


@dataclass(frozen=True, slots=True)
class Model:
    id: str
    owned_by: str
    deployments: tuple[Deployment, ...]
    created: int = 0
    context_guard: str | None = None  # "allow" | "reject"; None: the global setting
    preferences: ProviderPreferences | None = None

    @property
    def context_length(self) -> int | None:
        windows = [d.context_window for d in self.deployments if d.context_window]
        return max(windows) if windows else None


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
    # enabled virtual models by lower-cased name, and named tiers (see fleet_routes.py)
    virtual_models: dict[str, VirtualModel] = field(default_factory=dict)
    tiers: dict[str, Tier] = field(default_factory=dict)
    # removes every provider credential from upstream text leaving the gateway
    redactor: Redactor = field(default_factory=Redactor)


def resolve_secret(raw: str | None) -> str | None:
    """A configured secret: the literal, or the value of the `${ENV}` it names."""
    return _resolve_key(raw)[0]


def _resolve_key(raw: str | None) -> tuple[str | None, str | None]:
    if raw is None:
        return None, None
    match = ENV_REF.match(raw)
    if match is None:
        return raw, None
    return os.environ.get(match.group(1)), match.group(1)


def build_fleet(config: FleetConfig, version: int = 0) -> Fleet:
    tiered = expand_tiers(config)  # long_context blocks become plain deployments
    providers: dict[str, Provider] = {}
    for p in tiered.providers:
        key, env = _resolve_key(p.api_key)
        check_path, check_interval = health_check_defaults(p.kind)
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
            keys=tuple((label, *_resolve_key(raw)) for label, raw in p.keys.items()),
            protocols=frozenset(p.protocols) if p.protocols is not None else None,
            health_path=(p.health_check.path or check_path) if p.health_check.enabled else None,
            health_interval=p.health_check.interval_seconds or check_interval,
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
            enabled=d.enabled,
        )
        deployments[dep.id] = dep
        by_model.setdefault(dep.model, []).append(dep)
    owners = {m.id: m.owned_by for m in config.models}
    guards = {m.id: m.context_guard for m in config.models}
    prefs = {m.id: m.provider for m in config.models}
    models = {
        model_id: Model(
            id=model_id,
            owned_by=owners.get(model_id, "fleetgate"),
            deployments=tuple(deps),
            context_guard=guards.get(model_id),
            preferences=prefs.get(model_id),
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
