"""What a deployment can do: the parameter vocabulary, and the defaults per provider kind.

Parameters use OpenRouter's `supported_parameters` vocabulary. Input modalities become the
capabilities `image_input` / `audio_input` (text is always assumed). A deployment's
`supported_parameters` / `modalities` in the config replace its provider kind's default
below; a name in neither is "not known to be supported". docs/routing-preferences.md
documents the table.
"""

from __future__ import annotations

from collections.abc import Iterable

from fleetgate.config.schema import ProviderKind

# the vocabulary fleetgate derives from requests (anything else in a config is kept, but
# `fleetgate check` warns about it as a likely typo)
TOOLS = "tools"
TOOL_CHOICE = "tool_choice"
RESPONSE_FORMAT = "response_format"
STRUCTURED_OUTPUTS = "structured_outputs"
LOGPROBS = "logprobs"
TOP_LOGPROBS = "top_logprobs"
IMAGE_INPUT = "image_input"
AUDIO_INPUT = "audio_input"

# Parameters whose absence changes the output's contract: a deployment lacking one is
# always dropped. Every other need is a sampling/generation knob: unless
# `require_parameters` is true, a deployment lacking it still serves the request and the
# knob is removed from the body sent to it (recorded on the attempt). A forced or refused
# `tool_choice` is such a knob: the tools are still offered, the model may call one
CONTRACT_NEEDS = frozenset(
    {
        TOOLS,
        RESPONSE_FORMAT,
        STRUCTURED_OUTPUTS,
        LOGPROBS,
        TOP_LOGPROBS,
        IMAGE_INPUT,
        AUDIO_INPUT,
    }
)

# need -> the body fields that carry it (removed together when the knob is dropped)
NEED_FIELDS: dict[str, tuple[str, ...]] = {
    "temperature": ("temperature",),
    "top_p": ("top_p",),
    "top_k": ("top_k",),
    "min_p": ("min_p",),
    "top_a": ("top_a",),
    "frequency_penalty": ("frequency_penalty",),
    "presence_penalty": ("presence_penalty",),
    "repetition_penalty": ("repetition_penalty",),
    "seed": ("seed",),
    "stop": ("stop",),
    "logit_bias": ("logit_bias",),
    "reasoning": ("reasoning", "reasoning_effort"),
    "include_reasoning": ("include_reasoning",),
    "max_tokens": ("max_tokens", "max_completion_tokens"),
    "parallel_tool_calls": ("parallel_tool_calls",),
    "verbosity": ("verbosity",),
    TOOLS: ("tools",),
    TOOL_CHOICE: ("tool_choice",),
    RESPONSE_FORMAT: ("response_format",),
    STRUCTURED_OUTPUTS: ("response_format",),
    LOGPROBS: ("logprobs",),
    TOP_LOGPROBS: ("top_logprobs",),
}

KNOWN_PARAMETERS = frozenset(NEED_FIELDS) | {"web_search_options"}

_SAMPLING = (
    "temperature",
    "top_p",
    "frequency_penalty",
    "presence_penalty",
    "seed",
    "stop",
    "max_tokens",
    "logit_bias",
)
_ENGINE_SAMPLING = (*_SAMPLING, "top_k", "min_p", "repetition_penalty")
_CONTRACT_ALL = (TOOLS, TOOL_CHOICE, RESPONSE_FORMAT, STRUCTURED_OUTPUTS, LOGPROBS, TOP_LOGPROBS)

# Defaults per provider kind: what the engine's OpenAI-compatible server accepts in its
# current releases. Image/audio input depends on the model, not the engine, so the
# self-hosted kinds default to text only; declare `modalities` for a vision model.
DEFAULT_PARAMETERS: dict[str, frozenset[str]] = {
    "openai": frozenset((*_SAMPLING, *_CONTRACT_ALL, "parallel_tool_calls", "reasoning")),
    "vllm": frozenset((*_ENGINE_SAMPLING, *_CONTRACT_ALL, "include_reasoning", "reasoning")),
    "sglang": frozenset((*_ENGINE_SAMPLING, *_CONTRACT_ALL, "reasoning")),
    "llamacpp": frozenset((*_ENGINE_SAMPLING, *_CONTRACT_ALL)),
    # Ollama takes tools but honours no tool_choice (see IGNORED_BY_PROTOCOL), and no logprobs
    "ollama": frozenset((*_ENGINE_SAMPLING, TOOLS, RESPONSE_FORMAT, STRUCTURED_OUTPUTS)),
    "openrouter": frozenset(
        (
            *_ENGINE_SAMPLING,
            *_CONTRACT_ALL,
            "top_a",
            "reasoning",
            "include_reasoning",
            "parallel_tool_calls",
        )
    ),
    # JSON outputs: `output_config.format` (always held to the schema; no schema-less mode)
    "anthropic": frozenset(
        (
            *("temperature", "top_p", "top_k", "stop", "max_tokens", TOOLS, TOOL_CHOICE),
            *("reasoning", RESPONSE_FORMAT, STRUCTURED_OUTPUTS),
        )
    ),
}

# What a kind's endpoint for a client protocol accepts and then ignores, known from the
# engine's own code rather than guessed: removed from the body sent to such a deployment
# (and recorded) even when it declares no `supported_parameters`, unless the request
# requires its parameters. Ollama's chat completions do not read `tool_choice`, and its
# /v1/messages parses `tool_choice` but never passes it on (its native /api/chat has no
# such field): a forced choice there is a plain tool offer.
IGNORED_BY_PROTOCOL: dict[tuple[str, str], frozenset[str]] = {
    ("ollama", "openai"): frozenset({TOOL_CHOICE}),
    ("ollama", "anthropic"): frozenset({TOOL_CHOICE}),
}


def ignored_needs(kind: str, protocol: str) -> frozenset[str]:
    """The needs a `kind` deployment accepts and ignores on the client's `protocol`."""
    return IGNORED_BY_PROTOCOL.get((kind, protocol), frozenset())


DEFAULT_MODALITIES: dict[str, tuple[str, ...]] = {
    "openai": ("text",),
    "vllm": ("text",),
    "sglang": ("text",),
    "llamacpp": ("text",),
    "ollama": ("text",),
    "openrouter": ("text", "image"),
    "anthropic": ("text", "image"),
}


def deployment_capabilities(
    kind: ProviderKind,
    supported_parameters: Iterable[str] | None,
    modalities: Iterable[str] | None,
) -> frozenset[str]:
    """Everything a deployment is known to support, as need names."""
    params = (
        DEFAULT_PARAMETERS[kind]
        if supported_parameters is None
        else frozenset(supported_parameters)
    )
    mods = DEFAULT_MODALITIES[kind] if modalities is None else tuple(modalities)
    return params | {f"{m}_input" for m in mods if m != "text"}


def unsupported_fields(missing: Iterable[str]) -> tuple[str, ...]:
    """The body fields to remove for needs a deployment lacks (soft needs only)."""
    fields: list[str] = []
    for need in sorted(missing):
        fields.extend(f for f in NEED_FIELDS.get(need, ()) if f not in fields)
    return tuple(fields)


# how a need reads in a message, where its name alone would not say what the request sent
_NEED_WORDS = {
    STRUCTURED_OUTPUTS: "response_format json_schema (strict)",
    IMAGE_INPUT: "image input",
    AUDIO_INPUT: "audio input",
}


def describe_needs(needs: Iterable[str]) -> str:
    """Needs as a phrase: `tools and response_format json_schema (strict)`."""
    wanted = set(needs)
    if STRUCTURED_OUTPUTS in wanted:
        wanted.discard(RESPONSE_FORMAT)  # strict structured outputs say it already
    words = [_NEED_WORDS.get(n, n) for n in sorted(wanted)]
    if len(words) <= 1:
        return "".join(words)
    return ", ".join(words[:-1]) + " and " + words[-1]
