"""Gateway glue for virtual models and `auto`: catalog entries and the sticky-tier store."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from fleetgate.discovery.store import WindowStore
from fleetgate.fleet import Deployment, Fleet
from fleetgate.routing.sticky import MemoryStickyTiers


def largest_window(deployments: Iterable[Deployment], windows: WindowStore | None) -> int | None:
    """The largest window among `deployments`: discovered when a store is given, else declared."""
    if windows is None:
        found = [d.context_window for d in deployments]
    else:
        found = [windows.effective_window(d)[0] for d in deployments]
    return max((w for w in found if w), default=None)


def virtual_catalog(fleet: Fleet, windows: WindowStore | None = None) -> list[dict[str, Any]]:
    """`GET /v1/models` rows of the enabled virtual models, with their largest route window."""
    rows = []
    for vm in fleet.virtual_models.values():
        entry: dict[str, Any] = {
            "id": vm.name,
            "object": "model",
            "created": 0,
            "owned_by": "fleetgate",
        }
        context_length = largest_window(vm.deployments, windows)
        if context_length is not None:
            entry["context_length"] = context_length
        rows.append(entry)
    return rows


def sticky_tiers_for(fleet: Fleet) -> MemoryStickyTiers:
    store = MemoryStickyTiers()
    configure_sticky(store, fleet)
    return store


def configure_sticky(store: Any, fleet: Fleet) -> None:
    auto = fleet.config.auto
    if auto is not None and isinstance(store, MemoryStickyTiers):
        store.configure(auto.stickiness.ttl_seconds, auto.stickiness.max_entries)
