"""The fleet config file as one typed tree, validated as a whole when it loads."""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    NonNegativeFloat,
    NonNegativeInt,
    PositiveFloat,
    PositiveInt,
    WithJsonSchema,
    model_validator,
)

ProviderKind = Literal["openai", "vllm", "sglang", "llamacpp", "ollama", "openrouter", "anthropic"]

ContextGuard = Literal["allow", "reject"]

TokenizerFamily = Literal["qwen2", "llama3", "o200k", "generic"]

_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:/@+-]{0,199}$")


def _check_id(value: str) -> str:
    if not _ID_RE.match(value):
        raise ValueError(
            "must start with a letter or digit and hold only letters, digits and . _ : / @ + -"
        )
    return value


_URL_PATTERN = r"^https?://[^\s/]+"


def _check_url(value: str) -> str:
    if not re.match(_URL_PATTERN, value):
        raise ValueError("must be an http:// or https:// URL")
    return value.rstrip("/")


def _check_token_cap(value: int) -> int:
    if value != -1 and value < 1:
        raise ValueError("must be a positive integer, or -1 for no cap")
    return value


# the JSON schema states the same rules (the admin API's OpenAPI document shows them)
Identifier = Annotated[
    str, AfterValidator(_check_id), WithJsonSchema({"type": "string", "pattern": _ID_RE.pattern})
]
Url = Annotated[
    str, AfterValidator(_check_url), WithJsonSchema({"type": "string", "pattern": _URL_PATTERN})
]


def _check_endpoint(value: str) -> str:
    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"an endpoint is `host:port`, got {value!r}")
    return value


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Timeouts(_Strict):
    connect: PositiveFloat = 5.0
    """Seconds to open a TCP (and TLS) connection."""
    first_byte: PositiveFloat = 120.0
    """Seconds to wait for the response head, and at most between two stream chunks."""
    total: PositiveFloat = 600.0
    """Seconds for the whole upstream exchange, stream included: from its start, so the
    wait for a free pooled connection and the connect count too."""


class HealthCheckConfig(_Strict):
    """The gateway's own check of a provider whose circuit is open (docs/routing.md)."""

    enabled: bool = True
    path: Annotated[str, Field(pattern=r"^/[^\s]*$")] | None = None
    """Asked with GET, under the provider's root (its base_url without a trailing `/v1`).
    Default by kind: `/health` for vllm, sglang and llamacpp, `/api/version` for ollama,
    `/v1/models` for hosted APIs."""
    interval_seconds: Annotated[float, Field(ge=0.1)] | None = None
    """Seconds between two checks while the circuit is open. Default: 2 for engines, 10
    for hosted APIs."""


class ProviderConfig(_Strict):
    id: Identifier
    kind: ProviderKind = "openai"
    base_url: Url
    api_key: str | None = None
    """A literal key or an env reference such as `${OPENROUTER_API_KEY}`."""
    headers: dict[str, str] = Field(default_factory=dict)
    timeouts: Timeouts = Field(default_factory=Timeouts)
    max_concurrency: PositiveInt | None = None
    """Most pooled connections (and so concurrent requests) to this provider; more wait in
    the gateway for one. None: the pool grows with demand up to its kind's bound
    (`execute/upstream.py`, `POOL_BOUND`), so the upstream's own queue and 429s decide."""
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
    truncates: Literal["silently", "refuses"] | None = None
    """What the engine does with a prompt longer than its window: `silently` keeps only its
    end and answers 200 (Ollama's default), `refuses` answers a context error. A silent
    worker is never sent a request its window cannot hold. Default: by kind."""
    discovery: bool | None = None
    """Ask the worker for its real context window. Default: on for `ollama` workers, off for
    others (set true for vLLM, SGLang and llama.cpp)."""
    keys: dict[Identifier, str] = Field(default_factory=dict)
    """Alternative credentials by label (literal or `${ENV}`), chosen by a route's `key_label`."""
    protocols: list[Literal["openai", "responses", "anthropic", "ollama"]] | None = None
    """The client protocols the provider serves natively; replaces its kind's list (the
    others are translated; see docs/protocols.md)."""
    endpoints: list[Annotated[str, AfterValidator(_check_endpoint)]] | None = None
    """The provider's replicas, each `host:port` in place of the base URL's: an IP, or a
    name whose A/AAAA records are replicas (a Kubernetes headless Service), resolved again
    every few seconds. Each replica is a deployment of its own for balancing, engine load
    and affinity (`<deployment>@<ip:port>`); see docs/kubernetes.md."""
    health_check: HealthCheckConfig = Field(default_factory=HealthCheckConfig)
    """While a deployment's circuit is open, the gateway checks the provider itself and
    brings it back as soon as it answers; no client request is the probe."""


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


# provider or deployment ids (or quantizations): bounded, as a request may carry them
_PreferenceNames = Annotated[list[Annotated[str, Field(max_length=255)]], Field(max_length=256)]


class ProviderPreferences(_Strict):
    """OpenRouter-compatible provider routing preferences (docs/routing-preferences.md).

    Every field is optional; an unset field leaves the decision to a wider layer
    (request → model → gateway-wide environment).
    """

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)
    only: _PreferenceNames | None = None
    ignore: _PreferenceNames | None = None
    order: _PreferenceNames | None = None
    allow_fallbacks: bool | None = None
    sort: Annotated[SortSpec | None, BeforeValidator(_sort_shorthand)] = None
    max_price: MaxPrice | None = None
    quantizations: _PreferenceNames | None = None
    require_parameters: bool | None = None


# Body fields a route's `extra_body` may not set: they carry the request itself.
_RESERVED_BODY_FIELDS = frozenset({"model", "messages", "prompt", "input", "stream"})


class RouteParams(_Strict):
    """Parameter overrides of one scope (a virtual's route, a tier's route, a deployment)."""

    temperature: Annotated[float, Field(ge=0, le=2)] | None = None
    top_p: Annotated[float, Field(gt=0, le=1)] | None = None
    max_tokens: PositiveInt | None = None
    """A cap on the output budget: lowers the client's value, or sets it when absent."""
    reasoning_effort: Literal["minimal", "low", "medium", "high"] | None = None
    extra_body: dict[str, Any] = Field(default_factory=dict)
    """Top-level body fields to set (e.g. engine-specific knobs)."""

    @model_validator(mode="after")
    def _no_reserved_fields(self) -> RouteParams:
        reserved = sorted(_RESERVED_BODY_FIELDS & self.extra_body.keys())
        if reserved:
            raise ValueError(f"extra_body may not set {', '.join(reserved)}")
        return self


class RouteConfig(_Strict):
    """One hop of a virtual model's or a tier's chain: a deployment, or every deployment of a
    canonical model."""

    deployment: Identifier | None = None
    model: Identifier | None = None
    key_label: Identifier | None = None
    """A label from the provider's `keys`; the route then uses that credential."""
    params: RouteParams | None = None

    @model_validator(mode="after")
    def _one_target(self) -> RouteConfig:
        if (self.deployment is None) == (self.model is None):
            raise ValueError("a route names exactly one of `deployment` or `model`")
        return self


MAX_ROUTES = 12


class ResumeConfig(_Strict):
    """When a streamed answer cut mid-way continues on a sibling (docs/config.md#resume)."""

    after_interruption: bool = True
    """Continue after a reset, a stall or an error event once output has started."""
    after_window: bool = True
    """Continue an answer a window cut on a sibling with a strictly larger window."""
    max_continuations: NonNegativeInt = 2
    """Continuations one answer may take (0: none)."""
    across_models: bool = False
    """Continue on a deployment of another model (a virtual model's other routes)."""
    onto_priced: bool = False
    """Continue an answer of an unpriced deployment on one with a price."""


class VirtualModelConfig(_Strict):
    name: Identifier
    """The stable name clients send as `model`; matched case-insensitively."""
    enabled: bool = True
    routes: list[RouteConfig] = Field(default_factory=list)
    response_mode: Literal["any", "stream_only", "non_stream_only"] = "any"
    continue_on_default: bool = False
    """Append the `default` tier's chain after the virtual's own routes."""
    allow_shadowing: bool = False
    """Allow the name to equal a real model or deployment id (the virtual then wins)."""
    description: str | None = None
    resume: ResumeConfig | None = None
    """Continuation of cut answers on its routes; replaces each route's model's setting."""


class TierConfig(_Strict):
    routes: list[RouteConfig] = Field(default_factory=list)
    description: str | None = None


class KeywordRule(_Strict):
    tier: Identifier
    keywords: list[Annotated[str, Field(min_length=1)]] = Field(min_length=1)
    """Case-insensitive substrings of the last user message; the first matching rule wins."""


class HeartbeatConfig(_Strict):
    enabled: bool = True
    max_output_tokens: PositiveInt = 1
    """A heartbeat asks for at most this many output tokens (and must say so)."""
    max_prompt_words: PositiveInt = 1
    """...and its whole prompt has at most this many whitespace-separated words."""


def _check_fleetgate_header(value: str) -> str:
    if not re.match(r"^x-fleetgate-[a-z0-9-]+$", value, re.IGNORECASE):
        raise ValueError("must be a header name starting with X-Fleetgate-")
    return value.lower()


class StickinessConfig(_Strict):
    header: Annotated[str, AfterValidator(_check_fleetgate_header)] = "x-fleetgate-conversation"
    """Request header carrying the conversation key; the `user` field is used without it."""
    use_user_field: bool = True
    ttl_seconds: PositiveFloat = 1800.0
    max_entries: PositiveInt = 100_000


class AutoWeights(_Strict):
    tools: NonNegativeInt = 2
    json_schema: NonNegativeInt = 2
    images: NonNegativeInt = 2
    reasoning_low: NonNegativeInt = 1
    reasoning_medium: NonNegativeInt = 2
    reasoning_high: NonNegativeInt = 4
    words_per_point: PositiveInt = 1000
    """One point per this many prompt words."""


class AutoConfig(_Strict):
    """`model: "auto"` picks a tier by a documented score (see docs/virtual-models.md)."""

    enabled: bool = True
    simple_tier: Identifier = "simple"
    default_tier: Identifier = "default"
    reasoning_tier: Identifier = "reasoning"
    default_at: NonNegativeInt = 1
    """A score at or above this picks the default tier (below it: the simple tier)."""
    reasoning_at: NonNegativeInt = 4
    """A score at or above this picks the reasoning tier."""
    weights: AutoWeights = Field(default_factory=AutoWeights)
    keywords: list[KeywordRule] = Field(default_factory=list)
    stickiness: StickinessConfig = Field(default_factory=StickinessConfig)
    heartbeat: HeartbeatConfig = Field(default_factory=HeartbeatConfig)


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
    """Input modalities; replaces the provider kind's default (see config/capabilities.py)."""
    quantization: str | None = None
    """Weights precision, e.g. `fp8`, `bf16`, `int4` (matched by `provider.quantizations`)."""
    params: RouteParams | None = None
    """Parameter overrides sent whenever this deployment is attempted (scope `deployment`)."""
    tier: Identifier = "default"
    """Context tier label (e.g. `long`); shown in X-Fleetgate-Context-Tier."""
    tokenizer_family: TokenizerFamily | None = None
    """How the context estimate costs text here; default: inferred from the upstream name."""
    tokenizer: str | None = None
    """Path to the model's `tokenizer.json`: exact counts locally, with no engine call."""
    enabled: bool = True
    """`false`: the deployment stays in the fleet, shown as disabled, and is sent nothing
    (requests already on it finish). To drain a host, or keep it out while it is repaired."""


class LongContextConfig(_Strict):
    """A long-context host of a model; expands into a second deployment (tier `long`)."""

    inference_url: Url | None = None
    """Base URL of the long-context host (its OpenAI API, e.g. `http://host:8000/v1`)."""
    provider: Identifier | None = None
    """Or: an existing provider that serves the long tier."""
    kind: ProviderKind | None = None
    """Engine kind of `inference_url`; defaults to the kind of the base deployments."""
    upstream_model: str | None = None
    """Defaults to the base deployments' upstream model name."""
    max_context_tokens: PositiveInt
    base_max_context_tokens: PositiveInt


class ModelConfig(_Strict):
    id: Identifier
    owned_by: str = "fleetgate"
    description: str | None = None
    long_context: LongContextConfig | None = None
    context_guard: ContextGuard | None = None
    """Overrides `routing.context.guard` for this model."""
    provider: ProviderPreferences | None = None
    """Routing preferences for every request to this model (a request's own may narrow)."""
    resume: ResumeConfig = Field(default_factory=ResumeConfig)
    """Continuation of an answer cut mid-way on a sibling (docs/config.md#resume)."""


class CircuitConfig(_Strict):
    failure_threshold: PositiveInt = 2
    """Consecutive failures that open a deployment's circuit."""
    timeout_threshold: PositiveInt = 1
    """Consecutive failures that open it when the last one was a timeout or a refused
    connection: stronger evidence than a 5xx, and each one cost a client a long wait."""
    cooldown_seconds: PositiveFloat = 30.0
    """How long an open circuit keeps the deployment out before a half-open probe."""
    rate_limit_cooldown_seconds: PositiveFloat = 5.0
    """Cooldown after a 429 that carries no Retry-After."""
    max_cooldown_seconds: PositiveFloat = 300.0
    """Upper bound for a cooldown asked for by an upstream's Retry-After."""


class RefineConfig(_Strict):
    enabled: bool = True
    timeout_seconds: PositiveFloat = 2.0
    """Budget for one exact count; on timeout the estimate is used."""
    max_concurrency: PositiveInt = 4
    """Exact counts in flight at once; when full, the estimate is used."""
    band_low: PositiveFloat = 0.7
    band_high: PositiveFloat = 1.3
    """The widest band counted: an exact count is asked for when a window lies between the
    request's calibrated lower and upper bounds, never outside [low, high] x the estimate."""
    min_change: Annotated[float, Field(ge=0, le=1)] = 0.02
    """Where the estimate's spread was measured (a fitted tokenizer, a usage calibration),
    a count is made only when it puts another deployment first with at least this
    probability; 0: whenever a window lies inside the band. What is left uncounted is
    expected to move the sum of these probabilities: at 0.05 about a tenth of a request per
    300 (a JSON request needing exactly the small window, at 0.049, went to the large one),
    at 0.02 a few hundredths, for a count or two more per 300 requests."""


class ContextConfig(_Strict):
    guard: ContextGuard = "allow"
    """`reject`: refuse a request that fits no deployment, before any upstream call."""
    margin_percent: Annotated[float, Field(ge=0, le=400)] = 0.0
    """Extra margin on the estimate of text: tokens x (1 + margin / 100)."""
    default_output_reserve: Annotated[int, Field(ge=0)] = 1024
    """Output tokens assumed when the request names no limit."""
    image_tokens: Annotated[int, Field(ge=0)] = 1024
    """Reserve per image part."""
    audio_tokens: Annotated[int, Field(ge=0)] = 1024
    """Reserve per audio part."""
    message_overhead: Annotated[int, Field(ge=0)] | None = None
    """Chat-template tokens per message (default: the tokenizer family's)."""
    fingerprint: bool = True
    """Count a fixed probe set on each engine with a tokenize endpoint (llama.cpp, vLLM,
    SGLang) whose placement the estimate decides, and fit its tokenizer from the counts."""
    refine: RefineConfig = Field(default_factory=RefineConfig)


class AffinityConfig(_Strict):
    enabled: bool = True
    epsilon: Annotated[float, Field(ge=0, le=10)] = 0.25
    """Bounded load: no deployment takes more than (1 + epsilon) x the mean in-flight count."""
    ttl_seconds: PositiveFloat = 300.0
    """How long a prefix is taken to stay in the engine's cache after it last served it."""
    max_entries: PositiveInt = 100_000
    """Prefixes remembered per replica; the least recently used go first."""


class EngineLoadConfig(_Strict):
    enabled: bool = True
    interval_seconds: Annotated[float, Field(ge=0.1)] = 1.0
    """Seconds between two polls of an engine's own metrics (off the hot path)."""
    max_wait: NonNegativeFloat | None = 0.5
    """Expected wait (requests ahead per slot x time per request) beyond its peers'
    shortest, in their times per request, above which an engine ranks after them (None:
    not judged by the wait)."""
    max_queue: NonNegativeInt | None = None
    """Requests waiting in the engine, beyond its peers' shortest queue, above which it ranks
    after them, whatever its size (None: judged by the expected wait alone)."""
    max_kv_cache: Annotated[float, Field(gt=0, le=1)] = 0.95
    """KV-cache use (0-1) at or above which the engine ranks after its peers."""


class ExplorationConfig(_Strict):
    stale_after_seconds: PositiveFloat = 60.0
    """`sort` by throughput or latency: a deployment unmeasured, or measured longer ago than
    this, gets one request (when it was not tried within this time) to measure it."""


class BalancingConfig(_Strict):
    """Among deployments of equal rank: engine load, prefix-cache affinity, exploration."""

    affinity: AffinityConfig = Field(default_factory=AffinityConfig)
    engine_load: EngineLoadConfig = Field(default_factory=EngineLoadConfig)
    exploration: ExplorationConfig = Field(default_factory=ExplorationConfig)


class RoutingConfig(_Strict):
    circuit: CircuitConfig = Field(default_factory=CircuitConfig)
    context: ContextConfig = Field(default_factory=ContextConfig)
    balancing: BalancingConfig = Field(default_factory=BalancingConfig)


class ContextCapabilities(_Strict):
    max_requested_tokens: Annotated[int, AfterValidator(_check_token_cap)] = 32768
    """Largest `options.num_ctx` a native Ollama request may ask for (-1: no gateway cap)."""
    default_worker_tokens: PositiveInt = 4096
    """An Ollama worker's window when neither discovery nor its config says more."""
    estimation_margin_percent: Annotated[float, Field(ge=0, le=400)] = 0.0
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
    """Largest request body; a larger `Content-Length` is answered 413 before any is read."""
    header_timeout_seconds: PositiveFloat = 10.0
    """A request's line and headers must arrive within this (from the connection's opening,
    or the request's first byte on a kept-alive one); else 408 and the connection closes."""
    body_timeout_seconds: PositiveFloat = 60.0
    """A request's whole body must arrive within this after its headers; else 408."""
    max_connections: PositiveInt = 2048
    """Open client connections per process; one more is answered 503 and closed."""
    keep_alive_seconds: PositiveFloat = 5.0
    """An idle kept-alive connection is closed after this. Behind a load balancer, set it
    above the balancer's own idle timeout."""
    metrics_key: str | None = None
    """When set (a literal or `${ENV}`), `GET /metrics` needs it (or the admin key)."""
    log_format: Literal["text", "json"] = "text"
    """The gateway's log lines: `text`, or one JSON object a line with named fields."""
    access_log: bool = False
    """One log line per request (id, model, deployment, status, attempts, timings; never
    content), written off the request's path."""
    front: Literal["fleetgate", "uvicorn"] = "fleetgate"
    """The HTTP server front: the gateway's own (`fleetgate`), or uvicorn's protocol with
    the same limits (`uvicorn`). Both serve every endpoint; the gateway's own spends about
    half of uvicorn's CPU on a proxied request's HTTP handling."""


class StorageConfig(_Strict):
    database_url: str | None = None
    """URL of the store (`sqlite:///PATH` or `postgresql://USER@HOST:PORT/DB`); SQLite
    under `data_dir` when unset (env FLEETGATE_DATABASE_URL overrides)."""
    redis_url: str | None = None
    """Shared runtime state for many replicas (env FLEETGATE_REDIS_URL overrides)."""
    redis_namespace: str | None = None
    """Prefix of every Redis key and channel (env FLEETGATE_REDIS_NAMESPACE overrides);
    default `fleetgate:<db>`, the URL's database number: pub/sub spans every database, so
    clusters on one Redis stay apart only by name."""
    data_dir: str | None = None
    """Where the default SQLite file lives (env FLEETGATE_DATA_DIR; default `./data`)."""
    retention_days: PositiveFloat = 30.0
    """Request-log rows older than this are purged in the background."""
    log_buffer: PositiveInt = 10_000
    """Request-log rows held in memory, not yet written, before the oldest are dropped (and
    counted in `records_unwritten`)."""
    fleet_source: Literal["file", "store"] | None = None
    """Who owns the fleet sections: `file` (a changed file is applied at start) or `store`
    (the admin API; the file only seeds). Unset: `file` when this file has fleet sections."""
    log_writer: Literal["process", "thread"] = "process"
    """Who writes the request log: a child process (off the serving process's GIL and,
    given a free core, its CPU), or the serving process's DB threads."""


class AdminConfig(_Strict):
    key: str | None = None
    """The admin API key, a literal or `${ENV}` (env FLEETGATE_ADMIN_KEY overrides)."""


class AuthConfig(_Strict):
    enabled: bool = False
    """When true, every proxied request needs a client key made through the admin API."""


class OtlpConfig(_Strict):
    endpoint: str | None = None
    """The collector: `http://host:4317` for gRPC, `http://host:4318` for HTTP/protobuf (the
    signal paths `/v1/traces` and `/v1/metrics` are added); `https://` for TLS. Unset:
    `OTEL_EXPORTER_OTLP_ENDPOINT`; neither: telemetry is off."""
    protocol: Literal["grpc", "http/protobuf"] | None = None
    """Unset: `OTEL_EXPORTER_OTLP_PROTOCOL`, else `http/protobuf` (OpenTelemetry's default)."""
    headers: dict[str, str] | None = None
    """Sent with every export (a backend's API key); each value a literal or `${ENV}`.
    Unset: `OTEL_EXPORTER_OTLP_HEADERS`."""
    timeout_seconds: PositiveFloat | None = None
    """One export's deadline. Unset: `OTEL_EXPORTER_OTLP_TIMEOUT` (ms), else 10."""
    retries: NonNegativeInt = 5
    """How many times a batch is sent again when the collector is down or busy (gRPC
    `UNAVAILABLE`/`RESOURCE_EXHAUSTED`, HTTP 429/502/503/504, a refused connection); 0
    sends each once."""
    retry_backoff_seconds: PositiveFloat = 1.0
    """The first wait before a batch is sent again, doubled for each retry up to 30 s (with
    jitter); a delay the collector asks for (`Retry-After`, gRPC `RetryInfo`) comes first."""

    @model_validator(mode="after")
    def _endpoint_is_url(self) -> OtlpConfig:
        if self.endpoint is not None and not re.match(_URL_PATTERN, self.endpoint):
            raise ValueError("`endpoint` must be an http:// or https:// URL")
        return self


class TelemetryConfig(_Strict):
    otlp: OtlpConfig = Field(default_factory=OtlpConfig)
    service_name: str | None = None
    """`service.name` of every span and metric. Unset: `OTEL_SERVICE_NAME`, else fleetgate."""
    sample_ratio: Annotated[float, Field(ge=0.0, le=1.0)] | None = None
    """Share of new traces kept; a client's trace is kept or not as its `traceparent` says.
    Unset: `OTEL_TRACES_SAMPLER` / `OTEL_TRACES_SAMPLER_ARG`, else 1.0."""
    max_queue_spans: PositiveInt | None = None
    """Spans waiting for export before new ones are dropped (and counted). Unset:
    `OTEL_BSP_MAX_QUEUE_SIZE`, else 2048."""
    export_interval_seconds: PositiveFloat | None = None
    """How often the spans gathered are sent. Unset: `OTEL_BSP_SCHEDULE_DELAY` (ms), else 1."""
    metrics_interval_seconds: PositiveFloat | None = None
    """How often the GenAI metrics are sent. Unset: `OTEL_METRIC_EXPORT_INTERVAL` (ms), else
    60."""
    trace_url: str | None = None
    """Where the dashboard links a request's trace: a URL with `{trace_id}` in it (say
    `https://jaeger.internal/trace/{trace_id}`). Unset: the trace id is shown, unlinked."""

    @model_validator(mode="after")
    def _trace_url_names_the_id(self) -> TelemetryConfig:
        url = self.trace_url
        if url is not None and ("{trace_id}" not in url or not re.match(_URL_PATTERN, url)):
            raise ValueError("`trace_url` must be an http(s) URL with `{trace_id}` in it")
        return self


class FleetConfig(_Strict):
    server: ServerConfig = Field(default_factory=ServerConfig)
    routing: RoutingConfig = Field(default_factory=RoutingConfig)
    storage: StorageConfig = Field(default_factory=StorageConfig)
    admin: AdminConfig = Field(default_factory=AdminConfig)
    auth: AuthConfig = Field(default_factory=AuthConfig)
    telemetry: TelemetryConfig = Field(default_factory=TelemetryConfig)
    providers: list[ProviderConfig] = Field(default_factory=list)
    deployments: list[DeploymentConfig] = Field(default_factory=list)
    models: list[ModelConfig] = Field(default_factory=list)
    model_capabilities: ModelCapabilitiesConfig = Field(default_factory=ModelCapabilitiesConfig)
    virtual_models: list[VirtualModelConfig] = Field(default_factory=list)
    tiers: dict[Identifier, TierConfig] = Field(default_factory=dict)
    auto: AutoConfig | None = None
    """Absent: `auto` is not special (a model of that id is routed as any other)."""
