"""A deployment's effective context window, from the strongest evidence, clamped by limits.

Evidence, strongest first: a context error that stated the limit, or an answer a window
cut short (for one cache period) →
Ollama `/api/ps` (the loaded model's context) → Ollama `/api/show` (Modelfile `num_ctx`) →
an engine's own report (vLLM / SGLang `max_model_len`, llama.cpp `/props`) → the config
(the deployment's `context_window`, else the provider's `default_context_tokens`) → for
Ollama workers, `model_capabilities.context.default_worker_tokens`. The result is clamped by
the model's maximum, the provider's matching `context_limits` glob and the deployment's
declared `context_window`.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass

from fleetgate.config.schema import ModelCapabilitiesConfig
from fleetgate.discovery.evidence import Evidence
from fleetgate.fleet import Deployment

_GLOB_CHARS = frozenset("*?[")


@dataclass(frozen=True, slots=True)
class WindowView:
    """The window routing uses for one deployment, and why."""

    tokens: int | None
    source: str  # api_ps | api_show | api_models | model_info | props | config | default
    #              | parsed_from_error | cut_short | unknown
    model_max: int | None = None
    limit_pattern: str | None = None  # the context_limits glob that matched
    clamped_by: str | None = None  # model_max | context_limits | context_window
    loaded: bool = False  # Ollama: the model is loaded on the worker
    loaded_context: int | None = None
    updated_at: float | None = None  # when the worker was last asked
    error: str | None = None  # the last probe's failure, if any

    def public(self, deployment_id: str) -> dict[str, object]:
        return {"deployment": deployment_id, **{k: getattr(self, k) for k in self.__slots__}}


def _specificity(pattern: str) -> tuple[int, int, int]:
    literal = sum(1 for ch in pattern if ch not in _GLOB_CHARS)
    wildcards = len(pattern) - literal
    return (0 if wildcards == 0 else 1, -literal, wildcards)


def match_limit(limits: tuple[tuple[str, int], ...], model: str) -> tuple[str, int] | None:
    """The most specific `context_limits` entry matching `model`: exact names first, then
    the glob with the most literal characters (so `large-*` beats `*`)."""
    ranked = sorted(enumerate(limits), key=lambda p: (_specificity(p[1][0]), p[0]))
    for _, (pattern, tokens) in ranked:
        if fnmatch.fnmatchcase(model, pattern):
            return pattern, tokens
    return None


def resolve_window(
    dep: Deployment,
    evidence: Evidence | None,
    parsed_limit: int | None,
    capabilities: ModelCapabilitiesConfig,
    parsed_source: str = "parsed_from_error",
) -> WindowView:
    provider = dep.provider
    ev = evidence or Evidence()
    tokens: int | None
    if parsed_limit is not None:
        tokens, source = parsed_limit, parsed_source
    elif ev.loaded_context is not None:
        tokens, source = ev.loaded_context, "api_ps"
    elif ev.num_ctx is not None:
        tokens, source = ev.num_ctx, "api_show"
    elif ev.engine_window is not None:
        tokens, source = ev.engine_window, ev.engine_source or "api_models"
    elif dep.context_window is not None:
        tokens, source = dep.context_window, "config"
    elif provider.default_context_tokens is not None:
        tokens, source = provider.default_context_tokens, "config"
    elif provider.kind == "ollama":
        tokens, source = capabilities.context.default_worker_tokens, "default"
    else:
        tokens, source = None, "unknown"
    matched = match_limit(provider.context_limits, dep.upstream_model)
    clamped_by = None
    if tokens is not None:
        for name, cap in (
            ("model_max", ev.model_max),
            ("context_limits", matched[1] if matched else None),
            ("context_window", dep.context_window),
        ):
            if cap is not None and cap < tokens:
                tokens, clamped_by = cap, name
    return WindowView(
        tokens=tokens,
        source=source,
        model_max=ev.model_max,
        limit_pattern=matched[0] if matched else None,
        clamped_by=clamped_by,
        loaded=ev.loaded,
        loaded_context=ev.loaded_context,
        updated_at=ev.fetched_at or None,
        error=ev.error,
    )
