"""Request records, buffered in memory and handed to sinks by a background task.

The hot path only appends to a bounded deque; when it is full the oldest unflushed record
is dropped and counted. Records hold numbers and ids, never prompt or completion text.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import OrderedDict, deque
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

from fleetgate.execute.outcome import Attempt

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

    @property
    def virtual_model(self) -> str | None:
        """The virtual model the request named (as configured), else None."""
        resolution = self.notes.get("resolution")
        return resolution.get("virtual_model") if isinstance(resolution, dict) else None

    def public(self) -> dict[str, Any]:
        """The record as the read API shows it (attempt messages left out)."""
        data = asdict(self)
        data["virtual_model"] = self.virtual_model
        for attempt in data["attempts"]:
            attempt.pop("message", None)
            attempt.pop("upstream_body", None)
        return data


class RecordSink(Protocol):
    """Takes batches of records. A sink that keeps what it could not write may say so with
    a true `waiting` attribute: it is then given empty batches to retry with, every
    `RETRY_SECONDS`, until it is done, even while no request arrives."""

    async def write(self, records: list[RequestRecord]) -> None: ...


RETRY_SECONDS = 1.0


class RecentRequests:
    """Keeps the last `capacity` records in memory, for `GET /v1/requests/{id}` (fewer when
    the store logs every request: see `server/control.py`).

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
    def __init__(
        self, sinks: list[RecordSink], capacity: int = 10_000, interval: float = 0.05
    ) -> None:
        self.sinks = sinks
        self.capacity = capacity
        self.interval = interval
        self.dropped = 0
        self._buffer: deque[RequestRecord] = deque()
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    @property
    def buffered(self) -> int:
        return len(self._buffer)

    def add(self, record: RequestRecord) -> None:
        if len(self._buffer) >= self.capacity:
            self._buffer.popleft()
            self.dropped += 1
        self._buffer.append(record)
        self._wake.set()

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        while True:
            if self._buffer or not any(getattr(s, "waiting", False) for s in self.sinks):
                await self._wake.wait()
            else:  # a sink keeps rows for later: retry even if no request comes
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), RETRY_SECONDS)
            self._wake.clear()
            await self.flush()
            await asyncio.sleep(self.interval)  # batch what arrives meanwhile

    async def flush(self) -> None:
        batch = list(self._buffer)
        self._buffer.clear()
        for sink in self.sinks:
            if not batch and not getattr(sink, "waiting", False):
                continue
            try:
                await sink.write(batch)
            except Exception:  # a failing sink must never take the gateway down
                log.exception("record sink %s failed", type(sink).__name__)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self.flush()
