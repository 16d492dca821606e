"""A provider's replicas (`endpoints:`) as providers and deployments of their own.

`endpoints: [10.0.0.5:8000, 10.0.0.6:8000]` or `endpoints: [vllm-headless:8000]` (a name
whose A/AAAA records are the replicas) turns provider `p` into one provider per replica,
`p@10.0.0.5:8000`, each with its deployments (`d@10.0.0.5:8000`, same model): the plan then
balances between replicas, polls each one's engine load and keeps a conversation on the
replica that caches it, in the proxy and the picker alike.

Names are resolved off the request path (`discovery/replicas.py`, every few seconds); the
fleet is rebuilt when what they resolve to changes. A name not resolved yet stays one replica,
reached by name.
"""

from __future__ import annotations

from collections.abc import Mapping
from urllib.parse import urlsplit, urlunsplit

from fleetgate.config.addresses import endpoint_text, is_ip
from fleetgate.config.checks import deployment_id
from fleetgate.config.schema import FleetConfig

# name -> the `ip` addresses it resolved to last; shared by every fleet this process builds
# (a fleet swap from the admin API keeps what the names resolved to)
RESOLVED: dict[str, tuple[str, ...]] = {}


def _split(endpoint: str) -> tuple[str, int]:
    host, _, port = endpoint.rpartition(":")
    return host.strip("[]"), int(port)


def replica_addresses(endpoints: list[str], resolved: Mapping[str, tuple[str, ...]]) -> list[str]:
    """Each replica's `ip:port` (or `name:port` while its name is unresolved), once."""
    found: dict[str, None] = {}
    for endpoint in endpoints:
        host, port = _split(endpoint)
        hosts = (host,) if is_ip(host) else resolved.get(host) or (host,)
        for h in hosts:
            found.setdefault(endpoint_text(h, port), None)
    return list(found)


def _with_host(base_url: str, address: str) -> str:
    url = urlsplit(base_url)
    return urlunsplit((url.scheme, address, url.path, url.query, url.fragment))


def expand_replicas(
    config: FleetConfig, resolved: Mapping[str, tuple[str, ...]] | None = None
) -> FleetConfig:
    """The config with each replicated provider (and its deployments) one per replica."""
    if not any(p.endpoints for p in config.providers):
        return config
    names = RESOLVED if resolved is None else resolved
    providers = []
    replicas: dict[str, list[tuple[str, str]]] = {}  # provider id -> (replica id, address)
    for p in config.providers:
        if not p.endpoints:
            providers.append(p)
            continue
        replicas[p.id] = []
        for address in replica_addresses(p.endpoints, names):
            replica_id = f"{p.id}@{address}"
            update = {"id": replica_id, "base_url": _with_host(p.base_url, address)}
            providers.append(p.model_copy(update={**update, "endpoints": None}))
            replicas[p.id].append((replica_id, address))
    deployments = []
    for d in config.deployments:
        if d.provider not in replicas:
            deployments.append(d)
            continue
        for replica_id, address in replicas[d.provider]:
            dep_id = f"{deployment_id(d)}@{address}"
            deployments.append(d.model_copy(update={"provider": replica_id, "id": dep_id}))
    return config.model_copy(update={"providers": providers, "deployments": deployments})


def replica_names(config: FleetConfig) -> set[str]:
    """The names among the config's endpoints (IPs need no resolving)."""
    names = set()
    for p in config.providers:
        for endpoint in p.endpoints or ():
            host, _ = _split(endpoint)
            if not is_ip(host):
                names.add(host)
    return names
