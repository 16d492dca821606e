"""The fleet config file as one typed tree, validated as a whole when it loads."""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    NonNegativeFloat,
    PositiveFloat,
    PositiveInt,
)

ProviderKind = Literal[
    "openai", "vllm", "sglang", "llamacpp", "ollama", "openrouter", "anthropic"
]

_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:/@+-]{0,199}$")


def _check_id(value: str) -> str:
    if not _ID_RE.match(value):
        raise ValueError(
            "must start with a letter or digit and hold only letters, digits and . _ : / @ + -"
        )
    return value


def _check_url(value: str) -> str:
    if not re.match(r"^https?://[^\s/]+", value):
        raise ValueError("must be an http:// or https:// URL")
    return value.rstrip("/")


Identifier = Annotated[str, AfterValidator(_check_id)]
Url = Annotated[str, AfterValidator(_check_url)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Timeouts(_Strict):
    connect: PositiveFloat = 5.0
    """Seconds to open a TCP (and TLS) connection."""
    first_byte: PositiveFloat = 120.0
    """Seconds to wait for the response head, and at most between two stream chunks."""
    total: PositiveFloat = 600.0
    """Seconds for the whole upstream exchange, stream included."""


class ProviderConfig(_Strict):
    id: Identifier
    kind: ProviderKind = "openai"
    base_url: Url
    api_key: str | None = None
    """A literal key or an env reference such as `${OPENROUTER_API_KEY}`."""
    headers: dict[str, str] = Field(default_factory=dict)
    timeouts: Timeouts = Field(default_factory=Timeouts)
    max_concurrency: PositiveInt = 256
    """Pooled connections (and so concurrent requests) to this provider."""


class Price(_Strict):
    input: NonNegativeFloat = 0.0
    """Price per million input tokens."""
    output: NonNegativeFloat = 0.0
    """Price per million output tokens."""


class DeploymentConfig(_Strict):
    id: Identifier | None = None
    """Defaults to `<provider>/<upstream_model>`."""
    model: Identifier
    """The canonical model id clients ask for."""
    provider: Identifier
    upstream_model: str | None = None
    """The name the provider knows the model by; defaults to `model`."""
    context_window: PositiveInt | None = None
    weight: PositiveFloat = 1.0
    priority: int = 0
    """Lower is tried first."""
    price: Price = Field(default_factory=Price)


class ModelConfig(_Strict):
    id: Identifier
    owned_by: str = "fleetgate"
    description: str | None = None


class CircuitConfig(_Strict):
    failure_threshold: PositiveInt = 3
    """Consecutive failures that open a deployment's circuit."""
    cooldown_seconds: PositiveFloat = 30.0
    """How long an open circuit keeps the deployment out before a half-open probe."""
    rate_limit_cooldown_seconds: PositiveFloat = 5.0
    """Cooldown after a 429 that carries no Retry-After."""
    max_cooldown_seconds: PositiveFloat = 300.0
    """Upper bound for a cooldown asked for by an upstream's Retry-After."""


class RoutingConfig(_Strict):
    circuit: CircuitConfig = Field(default_factory=CircuitConfig)


class ServerConfig(_Strict):
    host: str = "127.0.0.1"
    port: Annotated[int, Field(ge=0, le=65535)] = 8080
    max_body_bytes: PositiveInt = 32 * 1024 * 1024


class StorageConfig(_Strict):
    database_url: str | None = None
    """SQLAlchemy URL of the store; SQLite under `data_dir` when unset (env
    FLEETGATE_DATABASE_URL overrides)."""
    redis_url: str | None = None
    """Shared runtime state for many replicas (env FLEETGATE_REDIS_URL overrides)."""
    data_dir: str | None = None
    """Where the default SQLite file lives (env FLEETGATE_DATA_DIR; default `./data`)."""
    retention_days: PositiveFloat = 30.0
    """Request-log rows older than this are purged in the background."""
    log_buffer: PositiveInt = 10_000
    """Request records held in memory before the oldest unflushed ones are dropped."""


class AdminConfig(_Strict):
    key: str | None = None
    """The admin API key, a literal or `${ENV}` (env FLEETGATE_ADMIN_KEY overrides)."""


class AuthConfig(_Strict):
    enabled: bool = False
    """When true, every proxied request needs a client key made through the admin API."""


class FleetConfig(_Strict):
    server: ServerConfig = Field(default_factory=ServerConfig)
    routing: RoutingConfig = Field(default_factory=RoutingConfig)
    storage: StorageConfig = Field(default_factory=StorageConfig)
    admin: AdminConfig = Field(default_factory=AdminConfig)
    auth: AuthConfig = Field(default_factory=AuthConfig)
    providers: list[ProviderConfig] = Field(default_factory=list)
    deployments: list[DeploymentConfig] = Field(default_factory=list)
    models: list[ModelConfig] = Field(default_factory=list)
