"""The request log's writer process itself: rows from a pipe into the database, on one
thread, with no event loop.

`log_writer.py` starts it (a fresh interpreter whose first lines call `child_main`) and
feeds it. It waits on its two descriptors with `poll`: the rows pipe, and the pipe a nudge
from the serving process (`NUDGE`) wakes it through. Each transaction runs on the same
thread, through the driver alone (`driver_log.py`). asyncio, its thread pool and what they
import held about a quarter of the writer's memory, for one reader, one timer and one
signal.
"""

from __future__ import annotations

# `signal`'s own module: `signal` wraps it in enums, and `enum` held about 0.27 MB of the
# writer process; the functions and numbers are the same
import _signal
import fcntl
import os
import select
import struct
import sys
import termios
import time

from fleetgate.gc_tuning import tune_gc
from fleetgate.store.driver_log import DriverLog
from fleetgate.store.row_pipe import decode_rows
from fleetgate.store.writer_sched import is_idle, set_idle


class _StderrLog:
    """The child's log lines, on the stderr it shares with the serving process, as
    `logging` prints a record where nothing configured it (the message alone), without
    loading `logging` and `traceback` (about 1 MB of the child)."""

    def warning(self, msg: str, *args: object) -> None:
        sys.stderr.write((msg % args if args else msg) + "\n")

    error = warning


log = _StderrLog()

PIPE_BYTES = 1 << 20  # what the pipe holds before rows wait in the serving process
# the child writes at most this often: fewer, larger transactions (a transaction costs
# about as much as 15 rows on SQLite)
WRITE_INTERVAL = 0.2
# After a transaction of fewer rows than QUIET_ROWS (under ~1,000 rows/s), the child rests
# QUIET_INTERVAL with the pipe unread: rows gather there (1 MB holds ~1,500 rows of ~700
# bytes; beyond that they wait in the serving process, whose queue holds `capacity`), and it
# wakes twice a second, not for each of the recorder's flushes. At 94 requests/s a writer
# woken every 50 ms spent 90 µs of CPU a request, for 0.059 M instructions, run cold. The
# serving process nudges a resting child (`NUDGE`) when the pipe is full and when it stops.
QUIET_ROWS = 200
QUIET_INTERVAL = 0.5
# The rows the child holds decoded at most (one transaction's): a decoded row is about
# three times its frame's bytes, and a child behind by the log's whole capacity (10,000
# rows) grew by ~20 MB. Beyond these, rows wait as frames: in the pipe, then in the serving
# process, whose queue holds `capacity`, as before. A transaction of 500 rows costs its
# begin and commit (about 15 rows' worth) once in over thirty rows; behind by 10,000 rows,
# the child peaked 2.8 MB lower than with transactions of 2,000.
CHILD_ROWS = 500
# the child offers the core back after each so many rows of a transaction: a server that
# shares its core waits for one such piece (~0.1 ms on SQLite), not a whole transaction.
# Not while it is behind (more rows waiting than one flush took): each yield hands a busy
# server a whole time slice, which capped the writer near 7,000 rows/s on a core the
# server saturated, and the serving process then dropped the oldest rows.
YIELD_EVERY = 25
RETRY_INTERVAL = 1.0  # while the database is down
STOP_TIMEOUT = 10.0  # at shutdown, how long the child may keep trying to write
# ends a child's rest; blocked from the spawn on until the child handles it (its default
# action would end the child)
NUDGE = _signal.SIGUSR1
# what `report` writes to the status pipe after each transaction
_STATUS = b'{"written":%d,"dropped":%d,"failures":%d,"rejected":%d,"pending":%d}\n'


def child_main(rows_fd: int, status_fd: int) -> None:
    """The child's body: settings from the rows pipe's first frame (`row_pipe.py`'s
    format, as the rows: no JSON library to load for them), then rows until EOF."""
    code = 1
    try:
        buf = bytearray()
        got, used, broken = decode_rows(buf, 1)
        while not got:
            if broken:
                raise ValueError("request log writer: its settings cannot be read")
            data = os.read(rows_fd, 1 << 16)
            if not data:  # the server went away before it said anything
                os._exit(0)
            buf.extend(data)
            got, used, broken = decode_rows(buf, 1)
        settings = got[0]
        del buf[:used]
        os.nice(settings["nice"])
        idle = bool(settings.get("idle"))
        tune_gc()  # what it imported lives as long as it does
        if idle:
            set_idle(os.getpid(), True)
        child_write(
            settings["url"],
            min(settings["capacity"], CHILD_ROWS),
            rows_fd,
            status_fd,
            buf,
            idle,
        )
        code = 0
    except BaseException:
        import traceback  # (only when it fails)

        traceback.print_exc(file=sys.stderr)
    finally:
        os._exit(code)


def _unread(fd: int) -> int:
    """Bytes waiting in the pipe `fd` reads from."""
    return int(struct.unpack("i", fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0"))[0])


def _handled(signum: int, frame: object) -> None:
    """A nudge's handler: its work is the byte it leaves in the wake-up pipe."""


def child_write(
    url: str,
    capacity: int,
    rows_fd: int,
    status_fd: int,
    buf: bytearray,
    idle: bool = False,
) -> None:
    """Write the rows that come through `rows_fd` until EOF. `idle`: run SCHED_IDLE
    whenever nothing is waiting (the serving process raises this process when its pipe is
    full)."""
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_r, False)
    os.set_blocking(wake_w, False)
    old_wakeup = _signal.set_wakeup_fd(wake_w, warn_on_full_buffer=False)
    old_handler = _signal.signal(NUDGE, _handled)
    try:
        _signal.pthread_sigmask(_signal.SIG_UNBLOCK, {NUDGE})  # one sent meanwhile lands now
        _Writer(url, capacity, rows_fd, status_fd, buf, idle, wake_r).run()
    finally:
        _signal.signal(NUDGE, old_handler)
        _signal.set_wakeup_fd(old_wakeup)
        os.close(wake_r)
        os.close(wake_w)


class _Writer:
    """The child's loop: read frames while it has room, write them at most every
    `WRITE_INTERVAL` (at once while behind), rest `QUIET_INTERVAL` with the pipe unread
    when few came, retry every `RETRY_INTERVAL` while the database is down."""

    def __init__(
        self,
        url: str,
        capacity: int,
        rows_fd: int,
        status_fd: int,
        buf: bytearray,
        idle: bool,
        wake_fd: int,
    ) -> None:
        # bounded by reading no more: the rows wait in the pipe, then in the serving
        # process, whose queue drops (and counts) the oldest beyond its capacity
        self.log = DriverLog(url, sys.maxsize, log, yield_every=YIELD_EVERY)
        self.capacity = capacity
        self.rows_fd = rows_fd
        self.status_fd = status_fd
        self.buf = buf
        self.idle = idle
        self.wake_fd = wake_fd
        self.poller = select.poll()
        self.poller.register(wake_fd, select.POLLIN)
        self.eof = False
        self.reading = False
        self.resting = False  # quiet, between writes: rows wait in the pipe, unread
        self.arrived = False  # rows came, or a retry is due: the next write is wanted
        self.nudged = False
        self.retry_at: float | None = None

    def take(self) -> None:
        """Whole rows into the log while it holds fewer than `capacity`."""
        request_log = self.log
        rows, used, broken = decode_rows(self.buf, self.capacity - request_log.pending)
        if used:
            del self.buf[:used]
            request_log.queue(rows)
        if broken:
            log.error("request log writer: dropped %d row(s) it cannot read", broken)

    def read_while_room(self) -> None:
        """Read while the buffer is below the pipe's size, and beyond it while the log has
        room: `take` then left no whole frame in it, so its first frame (one flush's rows,
        as large as they came) has not all arrived yet, and only reading brings its end."""
        want = not (self.eof or self.resting) and (
            len(self.buf) < PIPE_BYTES or self.log.pending < self.capacity
        )
        if want and not self.reading:
            self.poller.register(self.rows_fd, select.POLLIN)
        elif self.reading and not want:
            self.poller.unregister(self.rows_fd)
        self.reading = want

    def readable(self) -> None:
        data = os.read(self.rows_fd, 1 << 16)
        if data:
            self.buf.extend(data)
        else:
            self.eof = True
        self.take()
        self.read_while_room()
        self.arrived = True

    def poll(self, timeout: float | None) -> None:
        """Wait up to `timeout` seconds (None: until something comes) for rows, a nudge or
        a due retry, and take what came."""
        if self.retry_at is not None:
            left = max(0.0, self.retry_at - time.monotonic())
            timeout = left if timeout is None else min(timeout, left)
        for fd, _ in self.poller.poll(None if timeout is None else timeout * 1000):
            if fd == self.wake_fd:
                while True:
                    try:
                        if not os.read(fd, 64):
                            break
                    except BlockingIOError:
                        break
                self.nudged = True
            elif self.reading:  # (rows, or the serving side's end of the pipe)
                self.readable()
        if self.retry_at is not None and time.monotonic() >= self.retry_at:
            self.retry_at = None
            self.arrived = True

    def wait(self, seconds: float, until_nudged: bool = False) -> None:
        """Take what comes for `seconds`, or until a nudge with `until_nudged`, or until
        the pipe's end (nothing more will come)."""
        end = time.monotonic() + seconds
        while not (self.eof or (until_nudged and self.nudged)):
            left = end - time.monotonic()
            if left <= 0:
                return
            self.poll(left)

    def report(self) -> None:
        """Its counters as one line of JSON (all of them numbers: written here, with no JSON
        library loaded)."""
        request_log = self.log
        os.write(
            self.status_fd,
            _STATUS
            % (
                request_log.written,
                request_log.dropped,
                request_log.failures,
                request_log.rejected,
                request_log.pending,
            ),
        )

    def run(self) -> None:
        request_log = self.log
        if self.buf:  # rows that came with the settings
            self.take()
            self.arrived = True
        self.read_while_room()
        deadline: float | None = None
        try:
            while True:
                while not self.arrived:
                    self.poll(None)
                self.arrived = False
                failures, written = request_log.failures, request_log.written
                request_log.flush()
                self.take()
                self.read_while_room()
                if self.reading:
                    self.poll(0)  # what came during the transaction (the pipe's end, say)
                self.report()
                # behind: rows waited beyond this flush; the next one writes without yielding
                behind = bool(request_log.pending or self.buf) or (
                    not self.eof and _unread(self.rows_fd) > 0
                )
                if self.idle and not behind and not is_idle():
                    set_idle(os.getpid(), True)
                # an idle writer needs no yields: the server preempts it whenever it wakes
                request_log.yield_every = 0 if behind or self.idle else YIELD_EVERY
                if self.eof:
                    deadline = deadline or time.monotonic() + STOP_TIMEOUT - 1
                    if not (request_log.pending or self.buf) or time.monotonic() >= deadline:
                        return
                if request_log.failures > failures:  # the database is down: retry
                    due = time.monotonic() + RETRY_INTERVAL
                    self.retry_at = min(due, self.retry_at or due)
                elif request_log.pending:
                    self.arrived = True  # more than one batch was waiting
                if request_log.written - written < QUIET_ROWS and not (self.eof or behind):
                    self.resting = True  # gather the rows that arrive meanwhile in the pipe
                    self.read_while_room()
                    self.wait(QUIET_INTERVAL, until_nudged=True)
                    self.nudged = False
                    self.resting = False
                    self.read_while_room()
                elif behind:
                    # a transaction's rows waiting already (`CHILD_ROWS`): it goes on, once
                    # what the pipe holds now is read
                    self.poll(0)
                else:
                    self.wait(WRITE_INTERVAL)  # gather the rows that arrive meanwhile
        finally:
            request_log.close()
