"""Gateway glue for virtual models and `auto`: catalog entries and the sticky-tier store."""

from __future__ import annotations

from typing import Any

from fleetgate.fleet import Fleet
from fleetgate.routing.sticky import MemoryStickyTiers


def virtual_catalog(fleet: Fleet) -> list[dict[str, Any]]:
    """`GET /v1/models` rows of the enabled virtual models, with their largest route window."""
    rows = []
    for vm in fleet.virtual_models.values():
        entry: dict[str, Any] = {
            "id": vm.name,
            "object": "model",
            "created": 0,
            "owned_by": "fleetgate",
        }
        if vm.context_length is not None:
            entry["context_length"] = vm.context_length
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
