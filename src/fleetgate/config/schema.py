"""The fleet config file as one typed tree, validated as a whole when it loads."""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
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


Modality = Literal["text", "image", "audio"]
SortBy = Literal["price", "throughput", "latency"]


def _sort_shorthand(value: object) -> object:
    # OpenRouter accepts `sort: "price"` as well as `sort: {by: price, partition: ...}`
    return {"by": value} if isinstance(value, str) else value


class SortSpec(_Strict):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)
    by: SortBy
    partition: Literal["model", "none"] = "model"
    """`model`: rank within each model's group of candidates; `none`: rank across all."""


class MaxPrice(_Strict):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)
    prompt: NonNegativeFloat | None = None
    """Highest accepted input price per million tokens."""
    completion: NonNegativeFloat | None = None
    """Highest accepted output price per million tokens."""


class ProviderPreferences(_Strict):
    """OpenRouter-compatible provider routing preferences (docs/routing-preferences.md).

    Every field is optional; an unset field leaves the decision to a wider layer
    (request → model → gateway-wide environment).
    """

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)
    only: list[str] | None = None
    ignore: list[str] | None = None
    order: list[str] | None = None
    allow_fallbacks: bool | None = None
    sort: Annotated[SortSpec | None, BeforeValidator(_sort_shorthand)] = None
    max_price: MaxPrice | None = None
    quantizations: list[str] | None = None
    require_parameters: bool | None = None


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
    supported_parameters: list[str] | None = None
    """OpenRouter's parameter vocabulary; replaces the provider kind's default list."""
    modalities: list[Modality] | None = None
    """Input modalities; replaces the provider kind's default (see capabilities.py)."""
    quantization: str | None = None
    """Weights precision, e.g. `fp8`, `bf16`, `int4` (matched by `provider.quantizations`)."""


class ModelConfig(_Strict):
    id: Identifier
    owned_by: str = "fleetgate"
    description: str | None = None
    provider: ProviderPreferences | None = None
    """Routing preferences for every request to this model (a request's own may narrow)."""


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


class FleetConfig(_Strict):
    server: ServerConfig = Field(default_factory=ServerConfig)
    routing: RoutingConfig = Field(default_factory=RoutingConfig)
    providers: list[ProviderConfig] = Field(default_factory=list)
    deployments: list[DeploymentConfig] = Field(default_factory=list)
    models: list[ModelConfig] = Field(default_factory=list)
