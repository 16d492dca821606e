"""The plan a request would follow, without sending anything: `POST /v1/routing/explain`,
`POST /admin/explain` and `fleetgate explain` all show it."""

from __future__ import annotations

from typing import Any

import orjson

from fleetgate.discovery.engine_load import EngineLoads
from fleetgate.discovery.store import WindowStore
from fleetgate.errors import GatewayError, invalid
from fleetgate.fleet import Fleet
from fleetgate.fleet.data_plane import proxy_only
from fleetgate.ingress.routes import INGRESS_ROUTES
from fleetgate.routing.planner import build_plan, require_route
from fleetgate.routing.sticky import StickyTiers
from fleetgate.state.affinity import MemoryAffinity
from fleetgate.state.runtime import RuntimeState


def infer_endpoint(body: dict[str, Any]) -> str:
    if "messages" in body:
        return "chat.completions"
    if "prompt" in body:
        return "completions"
    if "input" in body:
        return "embeddings"
    return "chat.completions"


def explain_request(
    body: dict[str, Any],
    fleet: Fleet,
    state: RuntimeState,
    headers: dict[str, str],
    sticky: StickyTiers | None = None,
    windows: WindowStore | None = None,
    affinity: MemoryAffinity | None = None,
    loads: EngineLoads | None = None,
) -> dict[str, Any]:
    """The plan a request would follow, without sending anything."""
    endpoint = body.pop("endpoint", None) or infer_endpoint(body)
    parsers = {name: parser for name, parser in INGRESS_ROUTES.values()}
    if not isinstance(endpoint, str) or endpoint not in parsers:
        raise GatewayError(
            "invalid_request",
            f"`endpoint` must be one of {sorted(parsers)}.",
            param="endpoint",
        )
    try:
        raw = orjson.dumps(body)
    except TypeError as exc:  # e.g. an integer beyond 64 bits, from a lenient JSON parser
        raise invalid(f"The request body cannot be read as JSON: {exc}.") from exc
    profile = parsers[endpoint](endpoint, raw)
    profile.headers = headers
    plan = build_plan(
        profile, fleet, state, sticky=sticky, windows=windows, affinity=affinity, loads=loads
    )
    result = plan.describe()
    result["endpoint"] = endpoint
    # what a picker cannot hand to Envoy, and why (docs/kubernetes.md)
    result["proxy_only"] = proxy_only(c.deployment for c in plan.candidates)
    try:
        require_route(plan)
    except GatewayError as exc:
        result["error"] = exc.body()["error"]
    return result
