"""A request's view of each deployment's context window.

The discovered window (see `fleetgate.discovery`), except on Ollama workers when a native
request names `options.num_ctx`: the worker then loads the model with that context, so that
is the window the request gets (the `num_ctx` filter has already checked it against caps).
"""

from __future__ import annotations

from typing import Any

from fleetgate.context.placement import WindowOf, effective_window
from fleetgate.discovery.store import WindowStore
from fleetgate.fleet import Deployment
from fleetgate.ingress.profile import RequestProfile

NATIVE_ENDPOINTS = frozenset(
    {"ollama.chat", "ollama.generate", "ollama.embed", "ollama.embeddings"}
)


def requested_num_ctx(profile: RequestProfile) -> int | None:
    """`options.num_ctx` of a native Ollama request (validated at ingress)."""
    if profile.endpoint not in NATIVE_ENDPOINTS:
        return None
    options: Any = profile.body.get("options")
    value = options.get("num_ctx") if isinstance(options, dict) else None
    return value if type(value) is int and value > 0 else None


def window_function(profile: RequestProfile, windows: WindowStore | None) -> WindowOf:
    if windows is None:
        return effective_window
    num_ctx = requested_num_ctx(profile)

    def window_of(dep: Deployment) -> int | None:
        if num_ctx is not None and dep.provider.kind == "ollama":
            return num_ctx
        return windows.window(dep)

    return window_of
