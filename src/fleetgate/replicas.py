"""A provider's replicas (`endpoints:`) as providers and deployments of their own.

`endpoints: [10.0.0.5:8000, 10.0.0.6:8000]` or `endpoints: [vllm-headless:8000]` (a name
whose A/AAAA records are the replicas) turns provider `p` into one provider per replica,
`p@10.0.0.5:8000`, each with its deployments (`d@10.0.0.5:8000`, same model): the plan then
balances between replicas, polls each one's engine load and keeps a conversation on the
replica that caches it, in the proxy and the picker alike.

Names are resolved off the request path (`ReplicaNames`, every `REFRESH_SECONDS`); the fleet
is rebuilt when what they resolve to changes. A name not resolved yet stays one replica,
reached by name.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import Callable, Mapping
from urllib.parse import urlsplit, urlunsplit

from fleetgate.addresses import endpoint_text, is_ip
from fleetgate.config.checks import deployment_id
from fleetgate.config.schema import FleetConfig

log = logging.getLogger("fleetgate.replicas")

REFRESH_SECONDS = 5.0

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


async def resolve_names(names: set[str]) -> dict[str, tuple[str, ...]]:
    loop = asyncio.get_running_loop()
    out: dict[str, tuple[str, ...]] = {}
    for name in sorted(names):
        try:
            infos = await loop.getaddrinfo(name, None, type=socket.SOCK_STREAM)
        except OSError as exc:
            log.warning("replicas: cannot resolve %s: %s", name, exc)
            continue
        out[name] = tuple(sorted({str(info[4][0]) for info in infos}))
    return out


class ReplicaNames:
    """Resolves the fleet's replica names now and then; rebuilds the fleet when they move.

    `rebuild(config)` swaps in the fleet built from `config` again (the holder's own)."""

    def __init__(self, config: Callable[[], FleetConfig], rebuild: Callable[[], None]) -> None:
        self._config = config
        self._rebuild = rebuild
        self._task: asyncio.Task[None] | None = None

    async def refresh(self) -> bool:
        """Resolve once; True when the replicas changed (and the fleet was rebuilt)."""
        names = replica_names(self._config())
        if not names:
            return False
        found = await resolve_names(names)
        changed = any(RESOLVED.get(name) != addresses for name, addresses in found.items())
        if changed:
            RESOLVED.update(found)
            self._rebuild()
        return changed

    async def start(self) -> None:
        await self.refresh()
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(REFRESH_SECONDS)
            try:
                await self.refresh()
            except Exception:  # a bad answer must not end the loop
                log.exception("replicas: refresh failed")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
