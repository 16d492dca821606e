"""Rows waiting for the request log's next transaction, and what a flush does with them,
whoever runs the transaction: the serving process's event loop (`log_rows.RowBatches`) or
the writer process, which runs no event loop at all (`driver_log.py`, `writer_child.py`).

A flush is written once, as the batches it writes (`RowQueue.batches`): the caller writes
each batch it is handed and throws a failure back in, so the same steps run awaited or
plain.
"""

from __future__ import annotations

from collections import deque

from fleetgate.outage import Outage

# `typing` is for the type checker alone: the writer process holds none (`outage.py`)
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Generator
    from typing import TypeAlias

    from fleetgate.outage import Log
    from fleetgate.store.log_statements import Row

    # a flush: each batch it yields is written by the caller (a failure thrown back in there)
    Batches: TypeAlias = Generator[list[Row], None, None]


def next_batch(step: Callable[..., list[Row]], *arg: BaseException | None) -> list[Row] | None:
    """The flush's next batch after `step` (its `send` or `throw`), None once it is done."""
    try:
        return step(*arg)
    except StopIteration:
        return None


class RowQueue:
    """Rows queued, then written in one transaction per flush. When the database is
    unreachable (`UNREACHABLE`), rows wait (up to `capacity`, the oldest dropped and
    counted) and go with the next batch. A row the database rejects (a value it cannot
    hold: `REJECTED`) is set apart, counted and dropped: it never holds back the rows
    after it."""

    REJECTED: tuple[type[BaseException], ...] = ()
    UNREACHABLE: tuple[type[BaseException], ...] = (OSError,)

    def __init__(self, capacity: int, outage: Outage | None, yield_every: int, log: Log) -> None:
        """`yield_every`: within a transaction, give the CPU to any runnable process after
        each so many rows (the log writer process, which shares a core with the server;
        it may change it between flushes). `log`: where a refused row and an outage are
        told (the serving process's `fleetgate.record` logger)."""
        self.capacity = capacity
        self.log = log
        self.outage = outage or Outage("the store", log)
        self.written = 0
        self.dropped = 0  # rows lost because the database stayed unreachable
        self.failures = 0  # batches that could not be written (and were kept)
        self.rejected = 0  # rows the database refused to hold (dropped)
        self._pending: deque[Row] = deque()
        self.yield_every = yield_every

    @property
    def pending(self) -> int:
        return len(self._pending)

    @property
    def waiting(self) -> bool:
        """Rows kept for the next batch (the store was unreachable)."""
        return bool(self._pending)

    def queue(self, rows: list[Row]) -> None:
        """Rows (`Row`s: as `row_of` makes them, or lists from the writer's pipe) to go with
        the next flush."""
        pending = self._pending
        for row in rows:
            if len(pending) >= self.capacity:
                pending.popleft()
                self.dropped += 1
            pending.append(row)

    def write_pending(self, write: Callable[[list[Row]], None]) -> None:
        """Every pending row in one transaction, `write` (kept pending when that fails)."""
        batches = self.batches()
        batch = next_batch(batches.send, None)
        while batch is not None:
            try:
                write(batch)
            except BaseException as exc:
                batch = next_batch(batches.throw, exc)
            else:
                batch = next_batch(batches.send, None)

    def batches(self) -> Batches:
        """A flush of the pending rows: the batches to write, one transaction each."""
        pending = self._pending
        if not pending:
            return
        batch = list(pending)
        try:
            yield batch
            done = len(batch)
            self.written += done
            self.outage.ok()
        except self.REJECTED:
            done = yield from self._isolate(batch)
        except self.UNREACHABLE as exc:
            self._keep(exc)
            return
        for _ in range(done):
            pending.popleft()

    def _isolate(self, batch: list[Row]) -> Generator[list[Row], None, int]:
        """Write a batch the database refused, halving it until each refused row stands
        alone (that one is dropped and counted). Returns how many leading rows of the
        batch are settled; the rest stay pending when the database goes away meanwhile."""
        done = 0
        todo = [(len(batch) // 2, len(batch)), (0, len(batch) // 2)]  # popped left first
        while todo:
            lo, hi = todo.pop()
            if lo == hi:
                continue
            try:
                yield batch[lo:hi]
                self.written += hi - lo
            except self.REJECTED as exc:
                if hi - lo > 1:
                    mid = (lo + hi) // 2
                    todo += [(mid, hi), (lo, mid)]
                    continue
                self.rejected += 1
                self.log.warning(
                    "request log: the database refused request %.128r (%s); row dropped",
                    batch[lo][0],
                    type(exc.__cause__ or exc).__name__,  # the driver's own error
                )
            except self.UNREACHABLE as exc:
                self._keep(exc)
                return done
            done = hi
        return done

    def _keep(self, exc: BaseException) -> None:
        self.failures += 1
        self.outage.failed(exc, "request-log rows and spend wait in memory")
