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
    NonNegativeInt,
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


def _check_token_cap(value: int) -> int:
    if value != -1 and value < 1:
        raise ValueError("must be a positive integer, or -1 for no cap")
    return value


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
    concurrency_limit: PositiveInt | None = None
    """Requests the gateway sends this worker at once; more wait in its queue (None: no limit)."""
    queue_size: NonNegativeInt = 32
    """Requests that may wait for a slot; when full, the worker is skipped (429 if all are)."""
    queue_timeout_seconds: PositiveFloat = 30.0
    """Longest wait in the queue before the request moves on to the next candidate."""
    default_context_tokens: PositiveInt | None = None
    """The worker's context window when discovery finds no better evidence."""
    context_limits: dict[str, PositiveInt] = Field(default_factory=dict)
    """Glob on the upstream model name -> largest window allowed (most specific match wins)."""
    unified_kv: bool = False
    """llama.cpp: the KV cache is shared by all slots, so `n_ctx` is not divided by slots."""
    discovery: bool | None = None
    """Ask the worker for its real context window. Default: on for `ollama` workers, off for
    others (set true for vLLM, SGLang and llama.cpp)."""


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


class ContextCapabilities(_Strict):
    max_requested_tokens: Annotated[int, AfterValidator(_check_token_cap)] = 32768
    """Largest `options.num_ctx` a native Ollama request may ask for (-1: no gateway cap)."""
    default_worker_tokens: PositiveInt = 4096
    """An Ollama worker's window when neither discovery nor its config says more."""
    estimation_margin_percent: Annotated[float, Field(ge=0, le=400)] = 20.0
    vision_reserve_tokens_per_image: NonNegativeInt = 1024


class ModelCapabilitiesConfig(_Strict):
    mode: Literal["enforce", "observe"] = "enforce"
    """`observe`: discover and record windows and suspected truncation, but never refuse."""
    cache_ttl: PositiveFloat = 600.0
    """Seconds a discovered window is trusted before the worker is asked again."""
    context_guard: Literal["reject", "warn"] = "reject"
    """`warn`: route a request that fits no worker to the largest window, and flag it."""
    truncation_num_ctx: bool = False
    """Send native requests `options.num_ctx` sized to the worker's window (stops truncation)."""
    context: ContextCapabilities = Field(default_factory=ContextCapabilities)


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
    model_capabilities: ModelCapabilitiesConfig = Field(default_factory=ModelCapabilitiesConfig)
