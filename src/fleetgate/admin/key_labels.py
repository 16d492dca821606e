"""A provider's key labels (`keys:`) as routes pin them (`key_label`), across provider edits.

An edit (PUT or PATCH) of a provider that removes a label and adds one holding the same
credential — as stored, or as the API shows it (`***` for a literal) — renames it: the
credential moves to the new label, and every route of a virtual model or tier that pins the
old label and reaches this provider follows, in the same atomic change (recorded in the
config history). Removing a label that routes still pin, without such a match, is refused
with 409 `in_use` listing those routes.
"""

from __future__ import annotations

from typing import Any

from fleetgate.admin.errors import AdminError
from fleetgate.store.kinds import ENTITY_KINDS, Body, Entities, routes_of


def _reaches(route: Body, provider_id: str, deployments: list[Body]) -> bool:
    dep_id = ENTITY_KINDS["deployments"].id_of
    if route.get("deployment"):
        return any(
            dep_id(d) == route["deployment"] and d.get("provider") == provider_id
            for d in deployments
        )
    if route.get("model"):
        return any(
            d.get("model") == route["model"] and d.get("provider") == provider_id
            for d in deployments
        )
    return False


def pinned_routes(entities: Entities, provider_id: str, label: str) -> list[dict[str, Any]]:
    """Routes that pin `label` and reach the provider: `[{kind, id, route}]` (route: position)."""
    deployments = entities.get("deployments", [])
    return [
        {"kind": kind, "id": name, "route": i}
        for kind, name, i, route in routes_of(entities)
        if route.get("key_label") == label and _reaches(route, provider_id, deployments)
    ]


def _listed(pins: list[dict[str, Any]]) -> str:
    return ", ".join(f"{p['kind']}/{p['id']} (route {p['route']})" for p in pins)


def follow_key_labels(
    entities: Entities, old: Body, new: Body, shown: Body, events: list[dict[str, Any]]
) -> Body:
    """The provider's new body, its renamed labels' pins moved in `entities` (and noted in
    `events`); AdminError `in_use` when a removed label is still pinned. `shown`: the old
    body as the API shows it (masked credentials)."""
    provider_id = old["id"]
    old_keys, new_keys = old.get("keys") or {}, new.get("keys") or {}
    if not isinstance(old_keys, dict) or not isinstance(new_keys, dict):
        return new  # not a map of labels: validation answers it
    new_keys = dict(new_keys)
    shown_keys: dict[str, Any] = shown.get("keys") or {}
    added = [label for label in new_keys if label not in old_keys]
    for label in [label for label in old_keys if label not in new_keys]:
        same = [a for a in added if new_keys[a] in (old_keys[label], shown_keys.get(label))]
        pins = pinned_routes(entities, provider_id, label)
        if len(same) != 1:
            if pins:
                raise AdminError(
                    "in_use",
                    f"Key label {label!r} of provider {provider_id!r} is pinned by "
                    f"{_listed(pins)}. Point those routes at another label first, or rename "
                    "it: remove it and add the new label with the same credential in one edit.",
                    users=[{"kind": p["kind"], "id": p["id"]} for p in pins],
                    routes=pins,
                )
            continue
        renamed = same[0]
        added.remove(renamed)
        new_keys[renamed] = old_keys[label]  # the credential itself, never its mask
        for pin in pins:
            kind = ENTITY_KINDS[pin["kind"]]
            body = next(b for b in entities[pin["kind"]] if kind.id_of(b) == pin["id"])
            body["routes"][pin["route"]]["key_label"] = renamed
        message = f"key label {label!r} of provider {provider_id!r} renamed to {renamed!r}"
        if pins:
            message += f"; routes following it: {_listed(pins)}"
        events.append(
            {
                "type": "key_label_renamed",
                "provider": provider_id,
                "from": label,
                "to": renamed,
                "routes": pins,
                "message": message,
            }
        )
    return {**new, "keys": new_keys} if new_keys or "keys" in new else new
