"""Active health checks: while a deployment's circuit is open, the gateway asks its
provider itself, off the request path, and brings it back as soon as it answers.

Without them a deployment comes back only when its cooldown has run out and a client's
request, sent as the half-open probe, succeeds: a host restarted a second after its circuit
opened waits the whole cooldown, and a probe that fails costs its client an attempt. With
them, each provider with an open circuit is asked `GET <root><path>` (`health_check` in its
config; by kind, the engine's `/health`, Ollama's `/api/version`, a hosted API's
`/v1/models`) every `interval_seconds`:

- a 2xx closes the circuit of every deployment of the provider that went out because no
  connection could be opened (`connect refused`, `connect failed`, `connect timeout`: the
  line `circuit closed: ... answered its health check` in the log). A circuit that 5xx
  answers, timeouts or resets opened keeps its cooldown: the host was reachable all along,
  and an engine's `/health` answers 200 while its inference fails, hangs or breaks;
- no connection, a timeout or a 5xx keeps them out until the next check, so no client
  request is sent to probe a host known to be down;
- any other answer (a 401 or 404: a check that cannot tell) changes nothing, and the
  half-open probe of a client request works as before.

Rate-limit cooldowns (a 429, a 503 with `Retry-After`) are left to run: the upstream said
when to come back. With Redis, one replica of the cluster checks each provider per interval
and the outcome reaches every replica through the shared state.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import defaultdict

from fleetgate.discovery.background import BackgroundPoller
from fleetgate.discovery.probes import provider_headers, provider_url
from fleetgate.fleet import Deployment, FleetHolder, Provider
from fleetgate.state.runtime import CIRCUIT_OPEN, RuntimeState

log = logging.getLogger("fleetgate.health")

# the causes of an open circuit that a health check's answer disproves: no connection
HOST_DOWN = frozenset({"connect refused", "connect failed", "connect timeout"})

TICK = 0.1  # seconds between two looks at which circuits are open (no I/O when none is)
CHECK_TIMEOUT = (5.0, 2.0)  # seconds: a check in all, and its connect


def out_of_service(holder: FleetHolder, state: RuntimeState) -> dict[str, list[Deployment]]:
    """Provider id -> its enabled deployments whose circuit is open or half-open."""
    out: dict[str, list[Deployment]] = defaultdict(list)
    for dep in holder.fleet.deployments.values():
        if not dep.enabled or dep.provider.health_path is None:
            continue
        h = state.health(dep.id)
        if h.open_until and h.open_reason == CIRCUIT_OPEN and h.consecutive_failures:
            out[dep.provider.id].append(dep)
    return out


def check_headers(provider: Provider) -> dict[str, str]:
    if provider.kind == "anthropic":
        headers = dict(provider.headers)
        if provider.api_key:
            headers["x-api-key"] = provider.api_key
        headers["anthropic-version"] = "2023-06-01"
        return headers
    return provider_headers(provider)


class HealthChecker(BackgroundPoller):
    timeout = CHECK_TIMEOUT

    def __init__(self, holder: FleetHolder, state: RuntimeState) -> None:
        super().__init__()
        self.holder = holder
        self.state = state
        self.checks = 0  # checks answered or failed (tests wait on it)
        self.rounds = 0  # looks at the circuits
        self._due: dict[str, float] = {}  # provider id -> monotonic time of its next check
        self._running: set[asyncio.Task[None]] = set()
        self._busy: set[str] = set()  # providers with a check under way

    async def check_due(self) -> int:
        """Start the checks that are due; returns how many were started."""
        started = 0
        now = time.monotonic()
        targets = out_of_service(self.holder, self.state)
        for pid in set(self._due) - set(targets):
            del self._due[pid]  # back in service: the next outage checks at once
        for pid, deps in targets.items():
            provider = deps[0].provider
            if pid in self._busy or now < self._due.get(pid, 0.0):
                continue
            self._due[pid] = now + provider.health_interval
            if not await self.state.claim_check(pid, provider.health_interval):
                continue  # another replica checks it this time
            self._busy.add(pid)
            task = asyncio.get_running_loop().create_task(self._check(provider, deps))
            self._running.add(task)
            task.add_done_callback(self._running.discard)
            started += 1
        return started

    async def _check(self, provider: Provider, deps: list[Deployment]) -> None:
        import aiohttp  # loaded by the session that checks

        assert provider.health_path is not None
        path = provider.health_path
        status: int | None = None
        cause = ""
        try:
            async with self.session().get(
                provider_url(provider, path), headers=check_headers(provider)
            ) as resp:  # never follows a redirect
                status = resp.status
                await resp.read()
        except TimeoutError:
            cause = "timeout"
        except aiohttp.ClientConnectorError as exc:
            refused = isinstance(exc.os_error, ConnectionRefusedError)
            cause = "connect refused" if refused else "connect failed"
        except (aiohttp.ClientError, OSError):
            cause = "reset"
        finally:
            self._busy.discard(provider.id)
            self.checks += 1
        if status is not None and 200 <= status < 300:
            for dep in deps:
                if self.state.health(dep.id).open_cause in HOST_DOWN:
                    self.state.recover(dep.id, f"answered its health check (GET {path})")
            return
        if status is not None and status < 500:
            log.debug("health check of %s: HTTP %d says nothing of its health", provider.id, status)
            return
        cause = cause or str(status)
        until = time.time() + provider.health_interval + CHECK_TIMEOUT[0]
        for dep in deps:
            self.state.keep_out(dep.id, until, cause)

    async def _run(self) -> None:
        while True:
            try:
                await self.check_due()
            except Exception:  # checking must never take the gateway down
                log.exception("health check round failed")
            self.rounds += 1
            await asyncio.sleep(TICK)

    async def stop(self) -> None:
        for task in list(self._running):
            task.cancel()
        await super().stop()
