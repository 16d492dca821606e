"""Native first, translation otherwise: how to talk to one deployment about one request.

Each provider kind declares the protocols it serves natively (`NATIVE`); a provider's
`protocols: [...]` replaces its kind's list. A request whose protocol the deployment does
not speak goes through the translator of that pair (`TRANSLATIONS`). A generic `openai`
host may or may not serve `/v1/responses` and `/v1/messages` (`TENTATIVE`): the first
call is native, and a 404/405 for the endpoint makes `Protocols` remember to translate
for that provider from then on.

The executor asks `Protocols.wire(profile, deployment)` for a `Wire` and lets it build the
body, read the answer and wrap the stream; a native wire passes everything through.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, replace
from functools import partial
from typing import TYPE_CHECKING, Any

import orjson

from fleetgate.execute.params import apply_params
from fleetgate.execute.rewrite import ModelRewriter, rewriter_for
from fleetgate.translate import (
    anthropic_chat,
    held_stops,
    native_fixes,
    ollama_chat,
    responses_chat,
)
from fleetgate.translate.events import (
    Chain,
    Encoder,
    StreamStage,
    encode_ndjson,
    encode_sse,
    translate_stream,
)
from fleetgate.translate.thinking import thinks

if TYPE_CHECKING:
    from fleetgate.fleet import Deployment, Provider
    from fleetgate.ingress.profile import RequestProfile
    from fleetgate.routing.plan import Candidate

# protocols, as `protocols: [...]` names them
OPENAI = "openai"  # chat completions, completions, embeddings
RESPONSES = "responses"
ANTHROPIC = "anthropic"  # messages, messages/count_tokens
OLLAMA = "ollama"  # /api/*
PROTOCOLS = (OPENAI, RESPONSES, ANTHROPIC, OLLAMA)

ENDPOINT_PROTOCOL: dict[str, str] = {
    "chat.completions": OPENAI,
    "completions": OPENAI,
    "embeddings": OPENAI,
    "responses": RESPONSES,
    "messages": ANTHROPIC,
    "ollama.chat": OLLAMA,
    "ollama.generate": OLLAMA,
    "ollama.embed": OLLAMA,
    "ollama.embeddings": OLLAMA,
    "ollama.show": OLLAMA,
}

NATIVE: dict[str, frozenset[str]] = {
    "openai": frozenset({OPENAI, RESPONSES, ANTHROPIC}),
    "vllm": frozenset({OPENAI, RESPONSES, ANTHROPIC}),
    "sglang": frozenset({OPENAI}),
    # current llama.cpp builds serve /v1/messages (+ count_tokens) and /v1/responses, but
    # their Responses stream events lack `output_index`, `content_index` and
    # `sequence_number`, which the openai SDK's stream helper needs: translated by default
    # (`protocols: [openai, responses, anthropic]` opts in)
    "llamacpp": frozenset({OPENAI, ANTHROPIC}),
    "ollama": frozenset(PROTOCOLS),
    "openrouter": frozenset({OPENAI}),
    "anthropic": frozenset({ANTHROPIC}),
}
# native protocols a kind may lack on a given host: tried, and translated after a 404/405
TENTATIVE: dict[str, frozenset[str]] = {"openai": frozenset({RESPONSES, ANTHROPIC})}

# the upstream paths of each endpoint, for messages (mirrors UPSTREAM_PATHS)
_PATHS = {
    "chat.completions": "/chat/completions",
    "completions": "/completions",
    "embeddings": "/embeddings",
    "responses": "/responses",
    "messages": "/messages",
    "ollama.chat": "/api/chat",
    "ollama.generate": "/api/generate",
    "ollama.embed": "/api/embed",
    "ollama.embeddings": "/api/embeddings",
    "ollama.show": "/api/show",
}


# the arguments after the body or the model name: `started`, when the gateway began the
# attempt (`time.perf_counter_ns()`), from which Ollama's durations are measured, and the
# request as the client sent it (whose settings a Responses answer repeats)
Answer = Callable[[dict[str, Any], str, int, dict[str, Any]], dict[str, Any]]
# the client's model name, whether the stream's reader asked for chat's closing usage chunk
# (`stream_options.include_usage`; chat clients only), `started`, and the client's request
StreamMaker = Callable[[str, bool, int, dict[str, Any]], StreamStage]


@dataclass(frozen=True, slots=True)
class Translation:
    """One client endpoint spoken to a deployment in another protocol."""

    endpoint: str  # the upstream endpoint (a key of UPSTREAM_PATHS)
    request: Callable[[dict[str, Any]], dict[str, Any]]  # client body -> upstream body
    answer: Answer  # upstream answer -> the client's
    stream: StreamMaker  # a new stream translator
    content_type: str = "text/event-stream"  # of the client's stream
    encode: Encoder = encode_sse  # the client's stream framing
    ndjson_in: bool = False  # the upstream streams NDJSON
    # the client protocol's answer to a request it serves without the upstream (Ollama's
    # load and unload requests), or None for a request to send on
    local: Callable[[dict[str, Any], str], dict[str, Any] | None] | None = None
    # of the client's stop strings, those the request does not send and the gateway holds
    # the upstream's Anthropic answer to (`held_stops`); None: the upstream gets them all
    holds: Callable[[list[str]], tuple[str, ...]] | None = None


def compose(outer: Translation, inner: Translation) -> Translation:
    """`outer` (client -> middle) then `inner` (middle -> upstream)."""

    def request(body: dict[str, Any]) -> dict[str, Any]:
        return inner.request(outer.request(body))

    def answer(
        body: dict[str, Any], model: str, started: int, request: dict[str, Any]
    ) -> dict[str, Any]:
        middle = inner.answer(body, model, started, request)
        return outer.answer(middle, model, started, request)

    def stream(model: str, usage: bool, started: int, request: dict[str, Any]) -> StreamStage:
        # the middle stream's reader is `outer`, whose request asked for the usage chunk
        return Chain(
            [
                inner.stream(model, True, started, request),
                outer.stream(model, usage, started, request),
            ]
        )

    return Translation(
        inner.endpoint,
        request,
        answer,
        stream,
        outer.content_type,
        outer.encode,
        inner.ndjson_in,
        outer.local,
        inner.holds,  # the outer translations to chat carry every stop string as it is
    )


def _untimed(answer: Callable[[dict[str, Any], str], dict[str, Any]]) -> Answer:
    """An answer translator whose protocol reports no durations."""

    def translate(
        body: dict[str, Any], model: str, started: int, request: dict[str, Any]
    ) -> dict[str, Any]:
        return answer(body, model)

    return translate


def _timed_answer(answer: Callable[[dict[str, Any], str, int], dict[str, Any]]) -> Answer:
    """An answer translator for Ollama: durations from the attempt's start."""

    def translate(
        body: dict[str, Any], model: str, started: int, request: dict[str, Any]
    ) -> dict[str, Any]:
        return answer(body, model, started)

    return translate


def _echoing(answer: Callable[[dict[str, Any], str, dict[str, Any]], dict[str, Any]]) -> Answer:
    """An answer translator for Responses, whose answer repeats the request's settings."""

    def translate(
        body: dict[str, Any], model: str, started: int, request: dict[str, Any]
    ) -> dict[str, Any]:
        return answer(body, model, request)

    return translate


def _client_stops(request: dict[str, Any]) -> tuple[str, ...]:
    """An Anthropic request's `stop_sequences`: the only stops its answer may name."""
    return tuple(held_stops.requested("messages", request))


def _to_messages(
    answer: Callable[..., dict[str, Any]], stream: Callable[..., StreamStage], thinking: bool
) -> tuple[Answer, StreamMaker]:
    """The answer and stream translators of chat to Anthropic Messages, which name the
    client's own stop sequence where the engine says one ended the output."""

    def translate(
        body: dict[str, Any], model: str, started: int, request: dict[str, Any]
    ) -> dict[str, Any]:
        return answer(body, model, thinking=thinking, stops=_client_stops(request))

    def make(model: str, usage: bool, started: int, request: dict[str, Any]) -> StreamStage:
        return stream(model, thinking=thinking, stops=_client_stops(request))

    return translate, make


def _usage_always(stage: Callable[[str], StreamStage]) -> StreamMaker:
    """A stream translator for a client protocol whose streams always carry the usage
    (and no durations)."""

    def make(model: str, usage: bool, started: int, request: dict[str, Any]) -> StreamStage:
        return stage(model)

    return make


def _echoing_stream(stage: Callable[[str, dict[str, Any]], StreamStage]) -> StreamMaker:
    """A stream translator for Responses: usage always, the request's settings repeated."""

    def make(model: str, usage: bool, started: int, request: dict[str, Any]) -> StreamStage:
        return stage(model, request)

    return make


def _timed(stage: Callable[[str, int], StreamStage]) -> StreamMaker:
    """A stream translator for Ollama: usage always, durations from the attempt's start."""

    def make(model: str, usage: bool, started: int, request: dict[str, Any]) -> StreamStage:
        return stage(model, started)

    return make


def _to_chat(stage: Callable[[str, bool], StreamStage]) -> StreamMaker:
    """A stream translator to chat chunks, whose reader may ask for the usage chunk."""

    def make(model: str, usage: bool, started: int, request: dict[str, Any]) -> StreamStage:
        return stage(model, usage)

    return make


def _asks_usage(body: dict[str, Any]) -> bool:
    """Whether a chat request asks for the closing usage chunk of its stream."""
    options = body.get("stream_options")
    return isinstance(options, dict) and options.get("include_usage") is True


_NDJSON = "application/x-ndjson"
MESSAGES_TO_CHAT = Translation(
    "chat.completions",
    anthropic_chat.messages_to_chat,
    *_to_messages(
        anthropic_chat.chat_to_messages_answer, anthropic_chat.ChatToMessagesStream, True
    ),
)
CHAT_TO_MESSAGES = Translation(
    "messages",
    anthropic_chat.chat_to_messages,
    _untimed(anthropic_chat.messages_to_chat_answer),
    _to_chat(anthropic_chat.MessagesToChatStream),
    holds=held_stops.anthropic_held,
)
RESPONSES_TO_CHAT = Translation(
    "chat.completions",
    responses_chat.responses_to_chat,
    _echoing(responses_chat.chat_to_responses_answer),
    _echoing_stream(responses_chat.ChatToResponsesStream),
)
OLLAMA_CHAT_TO_CHAT = Translation(
    "chat.completions",
    ollama_chat.ollama_chat_to_chat,
    _timed_answer(ollama_chat.chat_to_ollama_chat_answer),
    _timed(ollama_chat.ChatToOllamaChatStream),
    _NDJSON,
    encode_ndjson,
    local=ollama_chat.chat_load_answer,
)
GENERATE_TO_CHAT = Translation(
    "chat.completions",
    ollama_chat.generate_to_chat,
    _timed_answer(ollama_chat.chat_to_generate_answer),
    _timed(ollama_chat.ChatToGenerateStream),
    _NDJSON,
    encode_ndjson,
    local=ollama_chat.generate_load_answer,
)
GENERATE_TO_COMPLETIONS = Translation(
    "completions",
    ollama_chat.generate_to_completions,
    _timed_answer(ollama_chat.completions_to_generate_answer),
    _timed(ollama_chat.CompletionsToGenerateStream),
    _NDJSON,
    encode_ndjson,
    local=ollama_chat.generate_load_answer,
)
EMBED_TO_EMBEDDINGS = Translation(
    "embeddings",
    ollama_chat.embed_to_embeddings,
    _timed_answer(ollama_chat.embeddings_to_embed_answer),
    _timed(ollama_chat.no_stream),
)
EMBEDDINGS_TO_EMBEDDINGS = Translation(  # Ollama's older `/api/embeddings`: one prompt
    "embeddings",
    ollama_chat.prompt_to_embeddings,
    _untimed(ollama_chat.embeddings_to_embedding_answer),
    _timed(ollama_chat.no_stream),
    local=ollama_chat.embedding_load_answer,
)

# (client endpoint, upstream protocol) -> translation; the first available protocol wins
TRANSLATIONS: dict[tuple[str, str], Translation] = {
    ("messages", OPENAI): MESSAGES_TO_CHAT,
    ("chat.completions", ANTHROPIC): CHAT_TO_MESSAGES,
    ("responses", OPENAI): RESPONSES_TO_CHAT,
    ("responses", ANTHROPIC): compose(RESPONSES_TO_CHAT, CHAT_TO_MESSAGES),
    ("ollama.chat", OPENAI): OLLAMA_CHAT_TO_CHAT,
    ("ollama.chat", ANTHROPIC): compose(OLLAMA_CHAT_TO_CHAT, CHAT_TO_MESSAGES),
    ("ollama.generate", OPENAI): GENERATE_TO_CHAT,
    ("ollama.generate", ANTHROPIC): compose(GENERATE_TO_CHAT, CHAT_TO_MESSAGES),
    ("ollama.embed", OPENAI): EMBED_TO_EMBEDDINGS,
    ("ollama.embeddings", OPENAI): EMBEDDINGS_TO_EMBEDDINGS,
}
_RAW_GENERATE = {OPENAI: GENERATE_TO_COMPLETIONS}  # `raw` or `suffix`: no chat template

# `think: false`: Ollama shows no thinking then, so the reasoning a model gives all the same
# (Qwen3 thinks unless told not to, and no portable field tells a chat engine not to) is
# left out of the answer and the stream
_OLLAMA_CHAT_UNTHINKING = replace(
    OLLAMA_CHAT_TO_CHAT,
    answer=_timed_answer(partial(ollama_chat.chat_to_ollama_chat_answer, thinking=False)),
    stream=_timed(partial(ollama_chat.ChatToOllamaChatStream, thinking=False)),
)
_GENERATE_UNTHINKING = replace(
    GENERATE_TO_CHAT,
    answer=_timed_answer(partial(ollama_chat.chat_to_generate_answer, thinking=False)),
    stream=_timed(partial(ollama_chat.ChatToGenerateStream, thinking=False)),
)
# an Anthropic request that does not enable thinking: Anthropic answers it without thinking
# blocks (a client reading `content[0].text` relies on it), whatever a chat model reasons
_MESSAGES_UNTHINKING = Translation(
    "chat.completions",
    anthropic_chat.messages_to_chat,
    *_to_messages(
        anthropic_chat.chat_to_messages_answer, anthropic_chat.ChatToMessagesStream, False
    ),
)
# (client endpoint, upstream protocol) -> the translation for a client that asked to see no
# reasoning (`hides_reasoning`)
_UNREASONED: dict[tuple[str, str], Translation] = {
    ("messages", OPENAI): _MESSAGES_UNTHINKING,
    ("ollama.chat", OPENAI): _OLLAMA_CHAT_UNTHINKING,
    ("ollama.chat", ANTHROPIC): compose(_OLLAMA_CHAT_UNTHINKING, CHAT_TO_MESSAGES),
    ("ollama.generate", OPENAI): _GENERATE_UNTHINKING,
    ("ollama.generate", ANTHROPIC): compose(_GENERATE_UNTHINKING, CHAT_TO_MESSAGES),
}


def _four_stops(translation: Translation) -> Translation:
    def request(body: dict[str, Any]) -> dict[str, Any]:
        return held_stops.openai_sendable(translation.request(body))

    return replace(translation, request=request, holds=held_stops.openai_held)


# translations to chat completions -> the same for an `openai`-kind provider, which is sent
# no more than the four stop sequences OpenAI takes, the gateway holding the rest
_FOUR_STOPS: dict[Translation, Translation] = {
    t: _four_stops(t)
    for t in (*TRANSLATIONS.values(), *_UNREASONED.values())
    if t.endpoint == "chat.completions" and t.holds is None
}


def openai_stops(translation: Translation) -> Translation:
    """`translation` for an `openai`-kind provider (`_FOUR_STOPS`)."""
    return _FOUR_STOPS.get(translation, translation)


def hides_reasoning(endpoint: str, body: dict[str, Any]) -> bool:
    """Whether the client's protocol shows this request no reasoning: Ollama's `think: false`,
    an Anthropic request that does not enable thinking."""
    if endpoint == "messages":  # without thinking, Anthropic answers with no thinking blocks
        return not thinks(body)
    return endpoint in ("ollama.chat", "ollama.generate") and body.get("think") is False


def native_protocols(provider: Provider) -> frozenset[str]:
    return provider.protocols if provider.protocols is not None else NATIVE[provider.kind]


def _wants_output_format(body: dict[str, Any]) -> bool:
    return anthropic_chat.output_format(body) is not None


# native endpoints of a kind that ignore what a request asks for, which the translation
# carries: (kind, protocol) -> whether the request asks for it. llama.cpp's /v1/messages
# answers an `output_config.format` request with free text; its chat completions hold
# `response_format` to the schema. vLLM's /v1/messages says `end_turn` where one of the
# request's `stop_sequences` ended the output, and names none (its chat completions name
# it in `stop_reason`, which the translation reads).
NATIVE_IGNORES: dict[tuple[str, str], Callable[[dict[str, Any]], bool]] = {
    ("llamacpp", ANTHROPIC): _wants_output_format,
    ("vllm", ANTHROPIC): native_fixes.asks_stop_sequences,
}


# native answers an engine gets a field of wrong, repaired on the way back: (kind,
# protocol) -> (whether the request can get such an answer, the repair). llama.cpp's
# Messages answers say `end_turn` where a stop sequence ended them.
NATIVE_REPAIRS: dict[
    tuple[str, str], tuple[Callable[[dict[str, Any]], bool], native_fixes.Repair]
] = {
    ("llamacpp", ANTHROPIC): (native_fixes.asks_stop_sequences, native_fixes.llama_stop_reason),
}


def native_for(provider: Provider, endpoint: str, body: dict[str, Any]) -> frozenset[str]:
    """The protocols the provider serves natively for this request (a kind's native
    endpoint that would ignore part of it is not: `NATIVE_IGNORES`; a provider's own
    `protocols: [...]` is taken as it is)."""
    if provider.protocols is not None:
        return provider.protocols
    native = NATIVE[provider.kind]
    protocol = ENDPOINT_PROTOCOL[endpoint]
    ignores = NATIVE_IGNORES.get((provider.kind, protocol))
    if ignores is not None and protocol in native and ignores(body):
        return native - {protocol}
    return native


def _json_without_schema(endpoint: str, body: dict[str, Any]) -> bool:
    """Whether the request asks for JSON without a schema (chat's `json_object`), which
    Anthropic's JSON outputs cannot give: they always follow a schema."""
    if endpoint == "chat.completions":
        fmt = body.get("response_format")
    elif endpoint == "responses":
        text = body.get("text")
        fmt = text.get("format") if isinstance(text, dict) else None
    else:
        return endpoint in ("ollama.chat", "ollama.generate") and body.get("format") == "json"
    return isinstance(fmt, dict) and fmt.get("type") == "json_object"


def _translation(endpoint: str, body: dict[str, Any], protocol: str) -> Translation | None:
    if endpoint == "ollama.generate" and (body.get("raw") or body.get("suffix")):
        return _RAW_GENERATE.get(protocol)
    if hides_reasoning(endpoint, body):
        return _UNREASONED.get((endpoint, protocol))
    return TRANSLATIONS.get((endpoint, protocol))


def _needs_state(endpoint: str, body: dict[str, Any]) -> bool:
    """A Responses request that only a server keeping conversations can answer."""
    return endpoint == "responses" and (
        body.get("previous_response_id") is not None or body.get("store") is True
    )


def choose(
    endpoint: str, body: dict[str, Any], native: frozenset[str]
) -> tuple[bool, Translation | None]:
    """(served natively, else the translation to use or None when none can serve it)."""
    if ENDPOINT_PROTOCOL[endpoint] in native:
        return True, None
    if _needs_state(endpoint, body):
        return False, None
    for protocol in (OPENAI, ANTHROPIC):
        if protocol == ANTHROPIC and _json_without_schema(endpoint, body):
            continue
        if protocol in native:
            found = _translation(endpoint, body, protocol)
            if found is not None:
                return False, found
    return False, None


def unserved_reason(endpoint: str, body: dict[str, Any], provider: Provider) -> str | None:
    """Why a provider cannot serve the request, natively or translated (None: it can)."""
    native = native_for(provider, endpoint, body)
    served, translation = choose(endpoint, body, native)
    if served or translation is not None:
        return None
    if _needs_state(endpoint, body):
        return (
            f"a {provider.kind} provider has no native /responses to keep "
            "`store`/`previous_response_id` state"
        )
    if ANTHROPIC in native and _json_without_schema(endpoint, body):
        return f"a {provider.kind} provider gives JSON only to a schema (not json_object)"
    return f"a {provider.kind} provider does not serve {_PATHS[endpoint]}"


class Wire:
    """How one request is spoken to one deployment: natively, or through a translation."""

    __slots__ = ("client", "endpoint", "label", "repair", "tentative", "translation")

    def __init__(
        self,
        endpoint: str,
        translation: Translation | None,
        tentative: bool,
        client: str,
        repair: native_fixes.Repair | None = None,
    ) -> None:
        self.endpoint = endpoint  # what is sent upstream (a key of UPSTREAM_PATHS)
        self.client = client  # the client's endpoint
        self.translation = translation
        self.repair = repair  # of a native answer's bytes (`NATIVE_REPAIRS`)
        self.tentative = tentative  # native, but the host may not have the endpoint
        # what the request log says: "native", or "<client endpoint>→<upstream endpoint>"
        self.label = "native" if translation is None else f"{client}→{endpoint}"

    @property
    def passes_through(self) -> bool:
        """Whether the client's stream is the upstream's, as relayed (`stream`)."""
        return self.translation is None and self.repair is None

    def payload(self, profile: RequestProfile, candidate: Candidate) -> bytes:
        """The upstream body: translated, the candidate's overrides applied, its model set."""
        body = profile.body
        if self.translation is not None:
            body = self.translation.request(body)
        if candidate.drop_params:
            body = {k: v for k, v in body.items() if k not in candidate.drop_params}
        if candidate.params:
            body = apply_params(body, candidate.params, self.endpoint)
        return orjson.dumps({**body, "model": candidate.deployment.upstream_model})

    def headers(self, base: dict[str, str], profile: RequestProfile) -> dict[str, str]:
        """The upstream headers: `base`, and on a native wire the client's own protocol
        headers (`anthropic-beta`); a translation speaks a protocol that has none of them."""
        if self.translation is not None or not profile.passed_headers:
            return base
        return {**base, **profile.passed_headers}

    def rewriter(self, upstream: str, client: str) -> ModelRewriter:
        """Translators set the client's model name themselves."""
        return rewriter_for(upstream, client if self.translation is None else upstream)

    def held(self, request: dict[str, Any]) -> tuple[str, ...]:
        """The stop strings of the client's `request` that the gateway holds the upstream's
        answer to, because the upstream was not sent them."""
        holds = self.translation.holds if self.translation is not None else None
        return holds(held_stops.requested(self.client, request)) if holds is not None else ()

    def answer(
        self,
        body: bytes,
        model: str,
        started: int,
        request: dict[str, Any],
        parsed: object = None,
    ) -> bytes:
        """The client's answer; `started` is when the attempt began (`perf_counter_ns`),
        `request` the client's request body, `parsed` is `body` already decoded, when the
        caller has it. Raises `UnreadableAnswer` for a body the translation cannot read."""
        if self.translation is None:
            return body if self.repair is None else self.repair(body)
        data = parsed
        if data is None:
            try:
                data = orjson.loads(body)
            except orjson.JSONDecodeError as exc:
                raise UnreadableAnswer("not JSON") from exc
        if not isinstance(data, dict):
            raise UnreadableAnswer("not a JSON object")
        stops = self.held(request)
        try:
            if stops and self.endpoint == "messages":
                data = held_stops.cut_message(data, stops)
            elif stops:
                data = held_stops.cut_completion(data, stops)
            return orjson.dumps(self.translation.answer(data, model, started, request))
        except (TypeError, ValueError, KeyError, IndexError, AttributeError) as exc:
            # a field of another type than the protocol's (`"choices": true`): the
            # translators read well-formed answers and leave the checking to here
            raise UnreadableAnswer(f"{type(exc).__name__} reading it") from exc

    def local_answer(self, profile: RequestProfile) -> bytes | None:
        """The answer the translation gives without asking the upstream (None: ask it)."""
        local = self.translation.local if self.translation is not None else None
        answer = local(profile.body, profile.model) if local is not None else None
        return orjson.dumps(answer) if answer is not None else None

    def content_type(self, upstream: str) -> str:
        if self.translation is None:
            return upstream
        if upstream.startswith(("text/event-stream", "application/x-ndjson")):
            return self.translation.content_type
        return "application/json"

    def stream(
        self, upstream: AsyncIterator[bytes], model: str, body: dict[str, Any], started: int
    ) -> AsyncIterator[bytes]:
        """The client's stream; `body` is the client's request, `started` when the attempt
        began (`perf_counter_ns`)."""
        t = self.translation
        if t is None:  # `passes_through` when there is no repair either
            return upstream if self.repair is None else native_fixes.repaired(upstream, self.repair)
        stage = t.stream(model, _asks_usage(body), started, body)
        stops = self.held(body)
        if stops:
            hold: StreamStage = (
                held_stops.MessageStopsStream(stops)
                if self.endpoint == "messages"
                else held_stops.ChatStopsStream(stops)
            )
            stage = Chain([hold, stage])
        return translate_stream(upstream, stage, t.ndjson_in, t.encode)


class UnreadableAnswer(Exception):
    """An upstream's answer that a translation cannot read: JSON, perhaps, but not of the
    protocol the deployment speaks. The executor takes it as an invalid response."""


def _names_model(body: bytes, model: str) -> bool:
    """Whether an error body quotes the model name (`x`, 'x', "x"), as "no such model" does."""
    name = model.encode()
    quoted = (b"`" + name + b"`", b"'" + name + b"'", b'\\"' + name + b'\\"')
    return any(q in body for q in quoted)


class Protocols:
    """Picks each attempt's wire; remembers which hosts lack a tentative native endpoint."""

    def __init__(self) -> None:
        self._lacking: set[tuple[str, str, str]] = set()  # (provider id, base URL, protocol)
        self._wires: dict[
            tuple[str, Translation | None, bool, native_fixes.Repair | None], Wire
        ] = {}

    def _wire(
        self,
        endpoint: str,
        translation: Translation | None,
        tentative: bool,
        repair: native_fixes.Repair | None = None,
    ) -> Wire:
        key = (endpoint, translation, tentative, repair)
        wire = self._wires.get(key)
        if wire is None:
            upstream = translation.endpoint if translation is not None else endpoint
            wire = self._wires[key] = Wire(upstream, translation, tentative, endpoint, repair)
        return wire

    def wire(self, profile: RequestProfile, dep: Deployment) -> Wire:
        provider = dep.provider
        endpoint = profile.endpoint
        native = native_for(provider, endpoint, profile.body)
        protocol = ENDPOINT_PROTOCOL[endpoint]
        tentative = provider.protocols is None and protocol in TENTATIVE.get(provider.kind, ())
        if tentative and (provider.id, provider.base_url, protocol) in self._lacking:
            native = native - {protocol}
            tentative = False
        is_native, translation = choose(endpoint, profile.body, native)
        if is_native:
            fix = NATIVE_REPAIRS.get((provider.kind, protocol))
            repair = fix[1] if fix is not None and fix[0](profile.body) else None
            return self._wire(endpoint, None, tentative, repair)
        if translation is None:
            return self._wire(endpoint, None, tentative)
        if provider.kind == "openai":
            translation = openai_stops(translation)
        return self._wire(endpoint, translation, False)

    def continuation_wire(
        self, profile: RequestProfile, dep: Deployment, chat: bool
    ) -> Wire | None:
        """The wire of a request that continues an answer (`execute/resume.py`): with
        `chat`, through the deployment's chat completions (where an engine's switch to
        continue the final message is), natively or translated; else as any request. None
        when the deployment serves no chat completions."""
        if not chat:
            return self.wire(profile, dep)
        native = native_for(dep.provider, profile.endpoint, profile.body) & {OPENAI}
        is_native, translation = choose(profile.endpoint, profile.body, frozenset(native))
        if is_native:
            return self._wire(profile.endpoint, None, False)
        if translation is None:
            return None
        return self._wire(profile.endpoint, translation, False)

    def refused(
        self, wire: Wire, profile: RequestProfile, dep: Deployment, status: int, body: bytes
    ) -> Wire | None:
        """After a 404/405 to a tentative native call: remember, and the translated wire."""
        if not wire.tentative or status not in (404, 405):
            return None
        if status == 404 and _names_model(body, dep.upstream_model):
            return None  # the host has the endpoint but not the model
        provider = dep.provider
        protocol = ENDPOINT_PROTOCOL[profile.endpoint]
        self._lacking.add((provider.id, provider.base_url, protocol))
        translated = self.wire(profile, dep)
        return translated if translated.translation is not None else None

    def lacking(self, provider: Provider) -> list[str]:
        """Tentative native protocols this provider was found to lack."""
        return sorted(
            p for pid, url, p in self._lacking if (pid, url) == (provider.id, provider.base_url)
        )
