"""Checks a native request's `options.num_ctx` against the gateway cap and each worker's caps.

Above `model_capabilities.context.max_requested_tokens` (unless -1) the request is refused
with a 400 naming `options.num_ctx`. An Ollama worker whose model maximum (`/api/show`) or
matching `context_limits` glob is smaller is dropped with the reason (it would load the
model with that context); when that drops every worker, the request is refused the same
way. Other engines do not take `num_ctx`: there it is only the window the client wishes
for, which placement weighs (`context/placement.py`), and it drops none of them. In
`observe` mode nothing is refused: the excess is only noted.

With `model_capabilities.truncation_num_ctx`, a native chat or generate request that names
no `num_ctx` is sent each worker's effective window as `options.num_ctx` (a per-route
parameter, shown by explain), so Ollama never silently cuts a prompt that fits the window.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from fleetgate.discovery.window import match_limit
from fleetgate.errors import invalid
from fleetgate.routing.plan import Candidate, Dropped, PlanContext
from fleetgate.routing.windows import requested_num_ctx


class NumCtxFilter:
    name = "num_ctx"

    def apply(
        self, ctx: PlanContext, candidates: list[Candidate]
    ) -> tuple[list[Candidate], list[Dropped]]:
        num_ctx = requested_num_ctx(ctx.profile)
        if num_ctx is None:
            return _sized(ctx, candidates), []
        caps = ctx.fleet.config.model_capabilities
        observe = caps.mode == "observe"
        cap = caps.context.max_requested_tokens
        if cap != -1 and num_ctx > cap:
            if not observe:
                raise invalid(
                    f"`options.num_ctx` ({num_ctx}) is larger than this gateway allows "
                    f"({cap}, model_capabilities.context.max_requested_tokens).",
                    "options.num_ctx",
                )
            ctx.notes["num_ctx_over_cap"] = cap
        kept: list[Candidate] = []
        dropped: list[Dropped] = []
        for c in candidates:
            dep = c.deployment
            if dep.provider.kind != "ollama":
                kept.append(c)
                continue
            reason = None
            view = ctx.windows.view(dep) if ctx.windows is not None else None
            limit = match_limit(dep.provider.context_limits, dep.upstream_model)
            if view is not None and view.model_max is not None and num_ctx > view.model_max:
                reason = f"options.num_ctx {num_ctx} exceeds the model maximum {view.model_max}"
            elif limit is not None and num_ctx > limit[1]:
                reason = (
                    f"options.num_ctx {num_ctx} exceeds the worker's context_limits "
                    f"{limit[0]!r} ({limit[1]})"
                )
            if reason is None or observe:
                kept.append(c)
            else:
                dropped.append(Dropped(dep.id, self.name, reason))
        return kept, dropped


def _sized(ctx: PlanContext, candidates: list[Candidate]) -> list[Candidate]:
    """Candidates whose upstream body carries `options.num_ctx` = their window."""
    profile = ctx.profile
    if (
        not ctx.fleet.config.model_capabilities.truncation_num_ctx
        or profile.endpoint not in ("ollama.chat", "ollama.generate")
        or ctx.window_of is None
    ):
        return candidates
    options: Any = profile.body.get("options")
    base = options if isinstance(options, dict) else {}
    out = []
    for c in candidates:
        window = ctx.window_of(c.deployment)
        if window is None or c.deployment.provider.kind != "ollama":
            out.append(c)
            continue
        params = dict(c.params or {})
        extra = dict(params.get("extra_body") or {})
        extra["options"] = {**base, **(extra.get("options") or {}), "num_ctx": window}
        params["extra_body"] = extra
        out.append(replace(c, params=params))
    return out
