"""The parts of a fleet: providers, deployments and models, as immutable records built
from the config (`snapshot.build_fleet`), and the secrets they carry."""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from fleetgate.config.checks import ENV_REF
from fleetgate.config.schema import ProviderKind, ProviderPreferences, ResumeConfig, Timeouts
from fleetgate.redact import Redactor


@dataclass(frozen=True, slots=True)
class Provider:
    id: str
    kind: ProviderKind
    base_url: str
    api_key: str | None
    api_key_env: str | None  # the env var named by the config, when it used one
    headers: tuple[tuple[str, str], ...]
    timeouts: Timeouts
    max_concurrency: int | None  # a configured cap on pooled connections; None: the kind's bound
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
    capabilities: frozenset[str] = frozenset()  # need names (see config/capabilities.py)
    # True when the config lists `supported_parameters` (not the kind's default): only then
    # are unsupported sampling knobs removed from the body sent to it
    parameters_declared: bool = False
    quantization: str | None = None
    params: dict[str, Any] | None = None  # overrides of scope `deployment`
    tokenizer_family: str = "generic"  # how the context estimate costs text here
    tokenizer: str | None = None  # a local tokenizer.json for exact counts


@dataclass(frozen=True, slots=True)
class Model:
    id: str
    owned_by: str
    deployments: tuple[Deployment, ...]
    created: int = 0
    context_guard: str | None = None  # "allow" | "reject"; None: the global setting
    preferences: ProviderPreferences | None = None
    resume: ResumeConfig = field(default_factory=ResumeConfig)

    @property
    def context_length(self) -> int | None:
        windows = [d.context_window for d in self.deployments if d.context_window]
        return max(windows) if windows else None


def resolve_secret(raw: str | None) -> str | None:
    """A configured secret: the literal, or the value of the `${ENV}` it names."""
    return resolve_key(raw)[0]


def resolve_key(raw: str | None) -> tuple[str | None, str | None]:
    """(value, env var named): the literal with None, or the `${ENV}` value with its name."""
    if raw is None:
        return None, None
    match = ENV_REF.match(raw)
    if match is None:
        return raw, None
    return os.environ.get(match.group(1)), match.group(1)


def provider_secrets(provider: Provider) -> Iterator[str]:
    """Every credential value a provider's requests may carry."""
    if provider.api_key:
        yield provider.api_key
    for _label, key, _env in provider.keys:
        if key:
            yield key
    for _name, value in provider.headers:
        yield value


def redactor_for(providers: Iterable[Provider]) -> Redactor:
    return Redactor(secret for p in providers for secret in provider_secrets(p))
