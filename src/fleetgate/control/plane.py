"""The control plane of one gateway replica: store, request log, client keys, and (with
Redis) the links to the other replicas. Every front (the proxy, the endpoint picker) and
the admin API depend on it; it depends on the pipeline and on none of them.

The hot path never waits on any of it: the fleet is swapped in whole, keys are looked up
in memory, and records reach the store through the recorder's background batches.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from fleetgate import __version__
from fleetgate.auth.guard import Guard, record_usage
from fleetgate.auth.keys import KeyRing
from fleetgate.config.loader import ConfigError, load_config_file
from fleetgate.config.schema import FleetConfig
from fleetgate.config.secrets import ADMIN_KEY_ENV, secret_warnings
from fleetgate.fleet import Fleet, build_fleet, resolve_secret
from fleetgate.logs import fields
from fleetgate.outage import Outage
from fleetgate.record.recorder import BatchSink, RequestRecord
from fleetgate.store.calibration import CalibrationKeeper, CalibrationStore
from fleetgate.store.client_keys import KeyStore
from fleetgate.store.config_store import ConfigStore, compose_or_raise, entities_of
from fleetgate.store.database import database_url, migrate, open_database
from fleetgate.store.errors import StoreError
from fleetgate.store.fingerprints import FingerprintKeeper
from fleetgate.store.fleet_file import (
    apply_summary,
    changes,
    describe,
    fleet_source,
    kept_summary,
    replaced_edits,
    runtime_edits,
    same,
)
from fleetgate.store.kinds import Entities
from fleetgate.store.log_writer import LogWriterProcess, can_fork_writer
from fleetgate.store.request_log import RequestLog, retention_cutoff

if TYPE_CHECKING:
    from fleetgate.pipeline.core import Pipeline
    from fleetgate.state.redis_link import RedisLink

log = logging.getLogger("fleetgate.control")

KEYS_VERSION = "keys_version"
REDIS_URL_ENV = "FLEETGATE_REDIS_URL"
REDIS_NAMESPACE_ENV = "FLEETGATE_REDIS_NAMESPACE"
# `GET /v1/requests/{id}` keeps this many records in memory when the store logs every
# request (`GET /admin/requests/{id}`): 2000 held ~2 MB of the peak RSS under load.
RECENT_WITH_STORE = 500


@dataclass(slots=True)
class ControlOptions:
    """Start-up settings that override the config file's `storage` and `admin` sections."""

    database_url: str | None = None
    data_dir: str | None = None
    redis_url: str | None = None
    redis_namespace: str | None = None  # default: `storage.redis_namespace`, then derived
    admin_key: str | None = None
    purge_interval: float = 600.0
    poll_interval: float = 1.0  # store polling when there is no working Redis
    config_path: str | None = None  # the fleet file, re-read by SIGHUP and /admin/reload


def _has_entities(config: FleetConfig) -> bool:
    return any(entities_of(config).values())


# sections a reload reads but cannot apply to a running process
_RESTART_SECTIONS = ("server", "storage", "admin", "auth")


class NoConfigFile(Exception):
    """A reload was asked of a gateway started without a fleet file."""


def _log_fleet_change(old: Fleet, new: Fleet, by: str) -> None:
    """One line per fleet swap: who changed it, to which version, and what changed."""
    what = describe(changes(entities_of(old.config), entities_of(new.config)))
    log.info(
        "fleet changed by %s (config version %d -> %d): %s",
        by,
        old.version,
        new.version,
        what,
        extra=fields(event="fleet_changed", by=by, version=new.version),
    )


class SpendSink(BatchSink):
    """Adds each key's spend to its row, one UPDATE per key per batch. While the store is
    unreachable the sums wait, one number per key (so nothing is ever dropped), and go
    with the next batch."""

    def __init__(self, keys: KeyStore, fleet: Callable[[], Fleet], ring: KeyRing, outage: Outage):
        self.keys = keys
        self.fleet = fleet
        self.ring = ring
        self.outage = outage
        self.pending: dict[str, float] = {}

    @property
    def waiting(self) -> bool:
        return bool(self.pending)

    def take(self, record: RequestRecord) -> None:
        key_id = record.client_key_id
        if key_id is not None:
            cost = record_usage(record, self.fleet())[1]
            if cost:
                self.pending[key_id] = self.pending.get(key_id, 0.0) + cost

    async def flush(self) -> None:
        pending = self.pending
        if not pending:
            return
        batch = dict(pending)
        try:
            await self.keys.add_spend(batch)
        except (StoreError, OSError) as exc:
            self.outage.failed(exc, "request-log rows and spend wait in memory")
            return
        self.outage.ok()
        for key_id, cost in batch.items():
            left = pending.pop(key_id) - cost
            if abs(left) > 1e-12:  # (records only arrive between writes; kept for safety)
                pending[key_id] = left
        self.ring.persisted(batch)


class ControlPlane:
    def __init__(
        self, pipeline: Pipeline, base: FleetConfig, options: ControlOptions | None = None
    ) -> None:
        self.pipeline = pipeline
        self.base = base
        self.options = options or ControlOptions()
        storage = base.storage
        self.url = database_url(
            storage.database_url,
            self.options.data_dir or storage.data_dir,
            explicit=self.options.database_url,
        )
        self.admin_key = (
            self.options.admin_key
            or os.environ.get(ADMIN_KEY_ENV)
            or resolve_secret(base.admin.key)
        )
        self.redis_url = (
            self.options.redis_url or os.environ.get(REDIS_URL_ENV) or storage.redis_url
        )
        self.redis_namespace = (
            self.options.redis_namespace
            or os.environ.get(REDIS_NAMESPACE_ENV)
            or storage.redis_namespace
        )
        self.db = open_database(self.url)
        self.store_outage = Outage("the store", log, self.db.shown_url)
        self.config_store = ConfigStore(self.db)
        self.request_log = RequestLog(self.db, base.storage.log_buffer, self.store_outage)
        # who writes the log's rows: the request log itself, or its writer process
        self.log_writer: RequestLog | LogWriterProcess = self.request_log
        self.keys = KeyStore(self.db)
        self.calibration = CalibrationKeeper(CalibrationStore(self.db), pipeline.state.calibration)
        self.fingerprints = FingerprintKeeper(self.db, pipeline.fingerprints.cache)
        self.ring = KeyRing()
        self.guard = Guard(self.ring, base.auth.enabled)
        self.spend = SpendSink(self.keys, lambda: self.fleet, self.ring, self.store_outage)
        self.link: RedisLink | None = None
        self._keys_version = 0
        self._fleet_lock = asyncio.Lock()
        self._tasks: list[asyncio.Task[Any]] = []
        pipeline.recent.capacity = min(pipeline.recent.capacity, RECENT_WITH_STORE)

    @property
    def fleet(self) -> Fleet:
        return self.pipeline.holder.fleet

    async def start(self) -> None:
        if self.base.storage.log_writer == "process" and can_fork_writer(self.url):
            # the pipes now; the child once the gateway is ready (`serving`)
            self.log_writer = LogWriterProcess(self.url, self.base.storage.log_buffer)
            self.log_writer.open()
        try:
            await self._start()
        except BaseException:
            if isinstance(self.log_writer, LogWriterProcess):
                await self.log_writer.stop()
            raise

    def serving(self) -> None:
        """The gateway is ready: start what its first requests do not wait for."""
        if isinstance(self.log_writer, LogWriterProcess):
            self.log_writer.spawn()

    async def _start(self) -> None:
        await migrate(self.db)
        applied = await self._fleet_from_file()
        resealed = await self.config_store.reseal()
        if resealed:
            log.info("encrypted the literal credentials of %d stored provider(s)", resealed)
        await self.reload_fleet(force=True)
        await self.reload_keys()
        for warning in secret_warnings(self.fleet.config, self.admin_key):
            log.warning(warning)
        if self.options.config_path is not None:
            with contextlib.suppress(ValueError, RuntimeError, NotImplementedError):
                # only the main thread may take a signal (a test's gateway runs in another)
                asyncio.get_running_loop().add_signal_handler(signal.SIGHUP, self._reload_on_sighup)
        self.pipeline.recorder.sinks.append(self.log_writer)
        self.pipeline.recorder.sinks.append(self.spend)
        self._export_store_metrics()
        await self.calibration.load()
        await self.fingerprints.load()
        loop = asyncio.get_running_loop()
        self._tasks.append(loop.create_task(self._purge_loop()))
        self._tasks.append(loop.create_task(self._poll_loop()))
        self._tasks.append(loop.create_task(self.calibration.run()))
        if self.redis_url:
            from fleetgate.state.redis_budgets import RedisBudgets
            from fleetgate.state.redis_link import RedisLink

            self.link = RedisLink(self.redis_url, self.redis_namespace)
            self.link.on("config", self._on_event)
            self.link.on("keys", self._on_event)
            self.link.on("resync", self._on_event)
            for shared in (self.pipeline.state, self.pipeline.affinity):
                if hasattr(shared, "attach"):
                    shared.attach(self.link)
            await self.link.start()
            if applied is not None:  # replicas running already serve the fleet before it
                self.link.announce({"type": "config", "version": applied})
            self.guard.limiter = self.link.limiter()
            self.guard.budgets = RedisBudgets(self.link, self.guard.local_budgets)
            self._export_redis_metrics(self.link)

    def _export_store_metrics(self) -> None:
        outage = self.store_outage
        self._gauge(
            "fleetgate_store_connected",
            "1 while the store (database) answers; 0 during an outage.",
            lambda: float(outage.up),
        )
        self._gauge(
            "fleetgate_store_errors",
            "Store operations that failed (rows and spend were kept and retried).",
            lambda: float(outage.failures),
        )

    def _export_redis_metrics(self, link: RedisLink) -> None:
        self._gauge(
            "fleetgate_redis_connected",
            "1 while the link to Redis is up.",
            lambda: float(link.healthy),
        )
        self._gauge(
            "fleetgate_redis_errors",
            "Redis operations that failed; the replica used its local state instead.",
            lambda: float(link.errors),
        )

    def _gauge(self, name: str, documentation: str, read: Callable[[], float]) -> None:
        from prometheus_client import Gauge

        gauge = Gauge(name, documentation, registry=self.pipeline.metrics.registry)
        gauge.set_function(read)

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        for shared in (self.pipeline.state, self.pipeline.affinity):
            close_shared = getattr(shared, "close", None)
            if close_shared is not None:
                await close_shared()
        await self.calibration.save()
        await self.fingerprints.stop()
        if self.link is not None:
            await self.link.stop()
        if isinstance(self.log_writer, LogWriterProcess):
            await self.log_writer.stop()  # the recorder has flushed: the last rows go now
            await self.log_writer.close()
        await self.db.dispose()

    # ---- the fleet ----------------------------------------------------------------------
    async def _fleet_from_file(self) -> int | None:
        """Seed an empty store from the file; then, when the file owns the fleet
        (`storage.fleet_source`), apply it if it changed since it was last applied.
        Returns the new config version when the file was applied."""
        store_url = self.db.shown_url
        if await self.config_store.seed(self.base):
            log.info("seeded the store (%s) from the config file", store_url)
            return None
        file = entities_of(self.base)
        if fleet_source(self.base, _has_entities(self.base)) == "store":
            if _has_entities(self.base) and not same(file, await self.config_store.entities()):
                log.warning(
                    "storage.fleet_source is `store`: the config file's fleet sections differ "
                    "from the store (%s) and are not applied; `fleetgate diff --config FILE` "
                    "shows how. Change the fleet through /admin, or set fleet_source: file.",
                    store_url,
                )
            return None
        result = await self.config_store.apply_file(
            file, lambda entities: compose_or_raise(self.base, entities)
        )
        if result.outcome == "applied":
            applied = changes(result.store, file)
            replaced = replaced_edits(result.store, file, result.last_file)
            log.warning(apply_summary(applied, replaced, result.version))
            return result.version
        edits = runtime_edits(result.store, result.last_file)
        if result.outcome == "unchanged" and edits:
            log.info(kept_summary(edits))
        return None

    async def reload_fleet(self, force: bool = False, by: str | None = None) -> bool:
        """Rebuild the fleet from the store when its version moved; True when swapped.
        `by`: who changed it, for the log line the swap gets (None: no line).

        Serialised with the swaps of local edits, and never swapping to an older version:
        a reload that read version N must not replace the N+1 a local edit installed while
        it was reading (that replica would then stay behind until the next change)."""
        async with self._fleet_lock:
            version = await self.config_store.version()
            if not force and version <= self.fleet.version:
                return False
            entities = await self.config_store.entities()
            config = compose_or_raise(self.base, entities)
            if not force and version <= self.fleet.version:
                return False
            old = self.pipeline.holder.swap(build_fleet(config, version))
            if by is not None:
                _log_fleet_change(old, self.fleet, by)
            return True

    async def reload_file(self, how: str) -> dict[str, Any]:
        """Re-read the fleet file (`how`: `SIGHUP`, `POST /admin/reload`) and apply it as a
        start does: its fleet sections when the file owns the fleet, its other sections
        here. The whole file is validated first; an invalid one raises `ConfigError` with
        every problem and changes nothing. The new fleet is swapped in at once, and the
        other replicas follow its version."""
        path = self.options.config_path
        if path is None:
            raise NoConfigFile(
                "This gateway was started without a fleet file, so there is none to reload."
            )
        config = load_config_file(path)  # every problem, with its line, or nothing
        source = fleet_source(config, _has_entities(config))
        applied: int | None = None
        fixed = [
            name for name in _RESTART_SECTIONS if getattr(config, name) != getattr(self.base, name)
        ]
        async with self._fleet_lock:  # no poll or event swaps in between
            if source == "file":
                result = await self.config_store.apply_file(
                    entities_of(config), lambda entities: compose_or_raise(config, entities)
                )
                applied = result.version if result.outcome == "applied" else None
            entities = await self.config_store.entities()
            composed = compose_or_raise(config, entities)  # the store's fleet must fit it
            self.base = config
            version = await self.config_store.version()
            before = self.pipeline.holder.swap(build_fleet(composed, version))
        _log_fleet_change(before, self.fleet, f"the fleet file ({how})")
        if fixed:
            log.warning(
                "reload: %s changed in the fleet file; they take effect at the next start",
                ", ".join(f"`{name}`" for name in fixed),
            )
        if applied is not None and self.link is not None:
            self.link.announce({"type": "config", "version": applied})
        return {
            "version": self.fleet.version,
            "fleet_source": source,
            "changes": [
                {"kind": c.kind, "id": c.id, "change": c.change}
                for c in changes(entities_of(before.config), entities_of(self.fleet.config))
            ],
            "restart_needed": fixed,
        }

    def _reload_on_sighup(self) -> None:
        task = asyncio.get_running_loop().create_task(self._sighup())
        self._tasks.append(task)
        task.add_done_callback(self._tasks.remove)

    async def _sighup(self) -> None:
        try:
            await self.reload_file("SIGHUP")
        except ConfigError as exc:
            log.error(
                "reload refused, the fleet is unchanged: %d problem(s): %s",
                len(exc.problems),
                "; ".join(map(str, exc.problems)),
            )
        except NoConfigFile as exc:
            log.error("reload refused: %s", exc)
        except (StoreError, OSError) as exc:
            self.store_outage.failed(exc)
            log.error("reload failed: the store cannot be reached (%s)", type(exc).__name__)

    async def change(
        self, edit: Callable[[Entities], Entities], events: list[dict[str, Any]] | None = None
    ) -> Fleet:
        """Edit the stored entities; the whole result is validated before anything is kept.
        `events` (filled by `edit`): what else it did, for the config history."""
        # under the fleet lock: a poll or an event of this process must not swap the new
        # version in first (it would be logged as another replica's)
        async with self._fleet_lock:
            version, config = await self.config_store.change(
                edit, lambda entities: compose_or_raise(self.base, entities), events
            )
            fleet = build_fleet(config, version)
            if version > self.fleet.version:
                old = self.pipeline.holder.swap(fleet)
                _log_fleet_change(old, fleet, "the admin API")
        if self.link is not None:
            self.link.announce({"type": "config", "version": version})
        return fleet

    # ---- client keys ------------------------------------------------------------------
    async def reload_keys(self) -> None:
        self._keys_version = await self.config_store.counter(KEYS_VERSION)
        self.ring.replace(await self.keys.active())

    async def keys_changed(self) -> None:
        await self.config_store.bump(KEYS_VERSION)
        await self.reload_keys()
        if self.link is not None:
            self.link.announce({"type": "keys"})

    # ---- other replicas -----------------------------------------------------------------
    async def _on_event(self, event: dict[str, Any]) -> None:
        kind = event.get("type")
        try:
            if kind == "config":
                if int(event.get("version", 0)) > self.fleet.version:
                    await self.reload_fleet(by="another replica")
            elif kind == "keys":
                await self.reload_keys()
            elif kind == "resync":  # back from a Redis outage: changes may have been missed
                await self.reload_fleet(by="another replica")
                await self.reload_keys()
        except (StoreError, OSError) as exc:  # the poll loop catches up once it is back
            self.store_outage.failed(exc)

    # ---- without (working) Redis: notice other processes' changes by polling -------------
    async def _poll_loop(self) -> None:
        """Several workers on one store without Redis (or while it is down) still converge:
        each polls the store's change counters, one cheap SELECT each per interval."""
        while True:
            await asyncio.sleep(self.options.poll_interval)
            if self.link is not None and self.link.healthy:
                continue
            try:
                await self.reload_fleet(by="another replica")
                if await self.config_store.counter(KEYS_VERSION) != self._keys_version:
                    await self.reload_keys()
            except (StoreError, OSError) as exc:
                self.store_outage.failed(exc)
                continue
            except Exception:
                log.exception("polling the store for changes failed; retrying")
                continue
            self.store_outage.ok()

    # ---- retention ----------------------------------------------------------------------
    async def purge_once(self, now: float | None = None, chunk: int = 1000) -> int:
        cutoff = retention_cutoff(self.base.storage.retention_days, now)
        return await self.request_log.purge(cutoff, chunk)

    async def _purge_loop(self) -> None:
        while True:
            try:
                gone = await self.purge_once()
                if gone:
                    log.info("purged %d request-log rows past retention", gone)
            except (StoreError, OSError) as exc:
                self.store_outage.failed(exc)
            except Exception:
                log.exception("request-log purge failed; retrying later")
            await asyncio.sleep(self.options.purge_interval)

    def status(self) -> dict[str, Any]:
        recorder = self.pipeline.recorder
        return {
            "version": __version__,
            "warnings": secret_warnings(self.fleet.config, self.admin_key),
            "config_version": self.fleet.version,
            "database": self.db.dialect,
            "records_dropped": recorder.dropped,
            "records_buffered": recorder.buffered,
            "records_written": self.log_writer.written,
            "records_unwritten": self.log_writer.dropped,
            "log_write_failures": self.log_writer.failures,
            "records_rejected": self.log_writer.rejected,
            "spend_pending": round(sum(self.spend.pending.values()), 12),
            "store": self.store_outage.status(),
            "client_keys": len(self.ring),
            "auth_enabled": self.guard.enabled,
            "fleet_source": fleet_source(self.base, _has_entities(self.base)),
            "redis": self.link.status() if self.link is not None else None,
            "time": time.time(),
        }
