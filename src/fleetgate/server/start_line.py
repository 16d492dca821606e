"""The line `fleetgate serve` logs once it is ready: what runs, where, and how it is
guarded, so the first line of the log answers the first questions of an operator."""

from __future__ import annotations

from fleetgate import __version__
from fleetgate.fleet import Fleet


def start_line(
    fleet: Fleet,
    address: str,
    *,
    admin: bool,
    auth: bool,
    store: str | None,
    redis: bool = False,
    workers: int = 1,
) -> str:
    """`fleetgate 0.1.0 serving http://0.0.0.0:8080 (dashboard .../ui; admin API on; client
    keys required; store sqlite:///…; Redis off): 2 providers, 4 deployments (1 disabled),
    1 model, 1 virtual model, 2 tiers`. Never a secret: the store's address without its
    password."""
    disabled = sum(1 for d in fleet.deployments.values() if not d.enabled)
    counts = [
        _count(len(fleet.providers), "provider"),
        _count(len(fleet.deployments), "deployment")
        + (f" ({disabled} disabled)" if disabled else ""),
        _count(len(fleet.models), "model"),
    ]
    if fleet.virtual_models:
        counts.append(_count(len(fleet.virtual_models), "virtual model"))
    if fleet.tiers:
        counts.append(_count(len(fleet.tiers), "tier"))
    facts = [
        f"dashboard {address}/ui" if admin else "no dashboard",
        "admin API on" if admin else "admin API off (no admin key)",
        "client keys required" if auth else "open to any client (auth off)",
        f"store {store}" if store else "no store",
        "Redis on" if redis else "Redis off",
    ]
    if workers > 1:
        facts.append(f"{workers} workers")
    return f"fleetgate {__version__} serving {address} ({'; '.join(facts)}): " + ", ".join(counts)


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"
