"""The `ip:port` each provider is reached at, as the data plane must be told it.

An IP in the base URL is its own endpoint. A name (a Kubernetes headless Service, say) is
resolved, every A/AAAA record a replica, and resolved again every few seconds, so replicas
that come and go are followed without a restart: by the same resolver and refresh loop as
the providers' `endpoints` names (`discovery/replicas.py`).
"""

from __future__ import annotations

from fleetgate.config.addresses import endpoint_text, host_port, is_ip
from fleetgate.discovery.replicas import NamesRefresher, resolve_names
from fleetgate.fleet import Fleet, FleetHolder, Provider
from fleetgate.fleet.data_plane import provider_blocker


class EndpointBook(NamesRefresher):
    def __init__(self, holder: FleetHolder) -> None:
        self.holder = holder
        self._by_provider: dict[str, tuple[str, ...]] = {}
        # why a provider cannot be handed to the data plane, judged once a fleet (not a pick)
        self._blocked: dict[str, str] = {}
        self._names: dict[str, tuple[str, int]] = {}  # provider id -> the name to resolve
        self._index(holder.fleet)
        holder.on_swap(lambda _old, new: self._index(new))

    def _index(self, fleet: Fleet) -> None:
        book: dict[str, tuple[str, ...]] = {}
        names: dict[str, tuple[str, int]] = {}
        blocked: dict[str, str] = {}
        for provider in fleet.providers.values():
            reason = provider_blocker(provider)
            if reason is not None:
                blocked[provider.id] = reason
                continue
            where = host_port(provider.base_url)
            if where is None:
                continue
            host, port = where
            if is_ip(host):
                book[provider.id] = (endpoint_text(host, port),)
            else:
                names[provider.id] = where
                book[provider.id] = self._by_provider.get(provider.id, ())
        self._by_provider, self._names, self._blocked = book, names, blocked

    def blocker(self, provider: Provider) -> str | None:
        """Why the provider cannot be handed to the data plane (None: it can), as
        `provider_blocker` says, read from the fleet's index."""
        return self._blocked.get(provider.id)

    def of(self, provider: Provider) -> tuple[str, ...]:
        """The provider's endpoints (empty: none the data plane can be sent to)."""
        return self._by_provider.get(provider.id, ())

    async def refresh(self) -> None:
        names = self._names
        found = await resolve_names({host for host, _port in names.values()})
        for provider_id, (host, port) in list(names.items()):
            if host in found:
                addresses = found[host]
                self._by_provider[provider_id] = tuple(endpoint_text(a, port) for a in addresses)
