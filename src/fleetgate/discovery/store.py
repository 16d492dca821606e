"""The runtime store of discovered windows (apart from the immutable fleet).

Routing reads it synchronously through `effective_window(deployment)`; the discovery task
and the executor (after a context error that states the limit) write to it.
"""

from __future__ import annotations

import time

from fleetgate.config.schema import ModelCapabilitiesConfig
from fleetgate.discovery.evidence import Evidence
from fleetgate.discovery.window import WindowView, resolve_window
from fleetgate.fleet import Deployment


class WindowStore:
    def __init__(self, capabilities: ModelCapabilitiesConfig | None = None) -> None:
        self.capabilities = capabilities or ModelCapabilitiesConfig()
        self._evidence: dict[str, Evidence] = {}
        # dep id -> (limit, when, source): a context error's stated limit, or the window an
        # answer cut short showed
        self._parsed: dict[str, tuple[int, float, str]] = {}
        self._views: dict[str, tuple[Deployment, WindowView]] = {}

    # ---- writes ------------------------------------------------------------------------
    def set_capabilities(self, capabilities: ModelCapabilitiesConfig) -> None:
        self.capabilities = capabilities
        self._views.clear()

    def record(self, deployment_id: str, evidence: Evidence) -> None:
        self._evidence[deployment_id] = evidence
        self._views.pop(deployment_id, None)

    def note_context_error(
        self,
        deployment_id: str,
        limit: int,
        now: float | None = None,
        source: str = "parsed_from_error",
    ) -> None:
        """A context error stated the worker's limit (or an answer cut short showed it,
        `source="cut_short"`): trust it at once, for one cache period."""
        when = time.time() if now is None else now
        self._parsed[deployment_id] = (limit, when, source)
        self._views.pop(deployment_id, None)

    # ---- reads (synchronous: routing never awaits) ------------------------------------
    def evidence(self, deployment_id: str) -> Evidence | None:
        return self._evidence.get(deployment_id)

    def view(self, dep: Deployment, now: float | None = None) -> WindowView:
        parsed = self._parsed.get(dep.id)
        if parsed is not None:
            when = time.time() if now is None else now
            if when - parsed[1] > self.capabilities.cache_ttl:
                del self._parsed[dep.id]
                self._views.pop(dep.id, None)
                parsed = None
        cached = self._views.get(dep.id)
        if cached is not None and cached[0] is dep:
            return cached[1]
        view = resolve_window(
            dep,
            self._evidence.get(dep.id),
            parsed[0] if parsed else None,
            self.capabilities,
            parsed[2] if parsed else "parsed_from_error",
        )
        self._views[dep.id] = (dep, view)
        return view

    def effective_window(self, dep: Deployment) -> tuple[int | None, str]:
        """(tokens or None when unknown, where the number came from)."""
        view = self.view(dep)
        return view.tokens, view.source

    def window(self, dep: Deployment) -> int | None:
        """The window routing uses for `dep` (declared, or read from its engine); None when
        unknown."""
        return self.view(dep).tokens

    def is_loaded(self, dep: Deployment) -> bool:
        ev = self._evidence.get(dep.id)
        return ev is not None and ev.loaded

    def stale(self, deployment_id: str, now: float) -> bool:
        ev = self._evidence.get(deployment_id)
        return ev is None or now - ev.fetched_at >= self.capabilities.cache_ttl
