"""Request records, handed to sinks off the request's path.

The hot path only appends a record to a list. In the next loop turn every sink takes each
record (its own cheap share: a row encoded, metrics tallied), and a background task
flushes the sinks every 50 ms (a transaction, a metrics update). Each sink bounds what it
holds. Records hold numbers and ids, never prompt or completion text.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import OrderedDict
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

from fleetgate.execute.outcome import Attempt
from fleetgate.trace_context import TraceContext

log = logging.getLogger("fleetgate.record")


@dataclass(slots=True)
class RequestRecord:
    request_id: str
    time: float
    endpoint: str
    requested_model: str
    resolution: str
    stream: bool
    status: int
    error_code: str | None
    latency: float
    overhead: float
    deployment_id: str | None
    provider_id: str | None
    attempts: list[Attempt] = field(default_factory=list)
    dropped: list[dict[str, str]] = field(default_factory=list)
    client_key_id: str | None = None
    notes: dict[str, Any] = field(default_factory=dict)  # numbers and ids from the stages
    # with tracing on: the request's trace id, and while its spans are not yet made, its
    # trace (ids, times, the knobs the spans show: the telemetry sink lets go of it)
    trace_id: str | None = None
    trace: TraceContext | None = None

    @property
    def virtual_model(self) -> str | None:
        """The virtual model the request named (as configured), else None."""
        resolution = self.notes.get("resolution")
        return resolution.get("virtual_model") if isinstance(resolution, dict) else None

    def public(self) -> dict[str, Any]:
        """The record as the read API shows it (attempt messages left out)."""
        data = asdict(self)
        data["virtual_model"] = self.virtual_model
        data.pop("trace")
        for attempt in data["attempts"]:
            attempt.pop("message", None)
            attempt.pop("upstream_body", None)
            attempt.pop("began", None)  # a process-local clock
            if attempt.get("span_id") is not None:  # as `traceparent` names it
                attempt["span_id"] = attempt["span_id"].hex()
        return data


class RecordSink(Protocol):
    """Takes records in two steps. `take` does one record's own share of the work (encode
    its row, tally its metrics), synchronously and cheaply, in the loop turn after the
    request ended: spread that way, no request waits behind a whole batch of it. `flush`
    then hands on what was taken since the last flush (one store transaction, one metrics
    update per label set), every `Recorder.interval`.

    A sink that keeps what it could not hand on may say so with a true `waiting`
    attribute: its `flush` is then called every `RETRY_SECONDS` to retry, even while no
    request arrives."""

    def take(self, record: RequestRecord) -> None: ...

    async def flush(self) -> None: ...


class BatchSink:
    """The `write` of a sink that has `take` and `flush`: a batch of records at once (tests,
    benchmarks, bulk loads)."""

    def take(self, record: RequestRecord) -> None:
        raise NotImplementedError

    async def flush(self) -> None:
        raise NotImplementedError

    async def write(self, records: list[RequestRecord]) -> None:
        for record in records:
            self.take(record)
        await self.flush()


RETRY_SECONDS = 1.0


class RecentRequests:
    """Keeps the last `capacity` records in memory, for `GET /v1/requests/{id}` (fewer when
    the store logs every request: see `control/plane.py`).

    Not a recorder sink: the gateway adds each record here itself, before the response's
    last byte, so a client that has its answer can read its record at once (one dict
    insert; the sinks' batches may lag behind a slow store).

    Request ids a client sends are scoped per client key: records are kept by (key id,
    request id), so one key reusing another's id never shadows or shows the other's.
    """

    def __init__(self, capacity: int = 2000) -> None:
        self.capacity = capacity
        self._records: OrderedDict[tuple[str | None, str], RequestRecord] = OrderedDict()

    def add(self, record: RequestRecord) -> None:
        records_by_id = self._records
        scoped = (record.client_key_id, record.request_id)
        if scoped in records_by_id:  # a client reused its X-Request-Id
            records_by_id.move_to_end(scoped)
        records_by_id[scoped] = record
        while len(records_by_id) > self.capacity:
            records_by_id.popitem(last=False)

    def get(self, request_id: str, key_id: str | None = None) -> RequestRecord | None:
        """The record of `request_id` made with client key `key_id` (None: no key)."""
        return self._records.get((key_id, request_id))

    def newest(self, request_id: str) -> RequestRecord | None:
        """The newest record of `request_id`, whichever key made it (the admin's view)."""
        for (_key, rid), record in reversed(self._records.items()):
            if rid == request_id:
                return record
        return None


class Recorder:
    """Hands each record to the sinks' `take` in the loop turn after it was added (one
    call a turn, for every record added in it), and calls their `flush` every `interval`.

    `buffered` counts the records added and not yet flushed by every sink; `dropped`, the
    records a sink's `take` failed on (a bug, logged)."""

    def __init__(self, sinks: list[RecordSink], interval: float = 0.05) -> None:
        self.sinks = sinks
        self.interval = interval
        self.dropped = 0
        self._fresh: list[RequestRecord] = []  # added in this loop turn, not yet taken
        self._taken = 0  # taken since the last flush began
        self._flushing = 0  # taken before the flush under way began
        self._wake = asyncio.Event()
        self._retry: asyncio.TimerHandle | None = None  # the wake a waiting sink is owed
        self._task: asyncio.Task[None] | None = None

    @property
    def buffered(self) -> int:
        return len(self._fresh) + self._taken + self._flushing

    def add(self, record: RequestRecord) -> None:
        fresh = self._fresh
        fresh.append(record)
        if len(fresh) == 1:  # the turn's first record: take them all when this turn ends
            asyncio.get_running_loop().call_soon(self._take)
        self._wake.set()

    def wake(self) -> None:
        """A sink gathered something outside a record (a span of a non-proxied endpoint):
        flush soon, as after a record."""
        self._wake.set()

    def _take(self) -> None:
        fresh, self._fresh = self._fresh, []
        for sink in self.sinks:
            take = sink.take
            for record in fresh:
                try:
                    take(record)
                except Exception:  # a failing sink must never take the gateway down
                    self.dropped += 1
                    log.exception("record sink %s failed", type(sink).__name__)
        self._taken += len(fresh)

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            if self._retry is None and any(getattr(s, "waiting", False) for s in self.sinks):
                # a sink keeps rows for later: a wake within RETRY_SECONDS even if no request
                # comes (one timer for every turn until then, not one wait with a timeout a
                # turn: a sink that is always waiting, like telemetry's, would pay one a flush)
                self._retry = loop.call_later(RETRY_SECONDS, self._retry_due)
            await self._wake.wait()
            self._wake.clear()
            await self.flush()
            await asyncio.sleep(self.interval)  # gather what arrives meanwhile

    def _retry_due(self) -> None:
        self._retry = None
        self._wake.set()

    async def flush(self) -> None:
        self._take()  # records of this very turn, if any
        taken, self._taken = self._taken, 0
        self._flushing += taken
        for sink in self.sinks:
            if not taken and not getattr(sink, "waiting", False):
                continue
            try:
                await sink.flush()
            except Exception:  # a failing sink must never take the gateway down
                log.exception("record sink %s failed", type(sink).__name__)
        self._flushing -= taken

    async def stop(self) -> None:
        if self._retry is not None:
            self._retry.cancel()
            self._retry = None
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self.flush()
