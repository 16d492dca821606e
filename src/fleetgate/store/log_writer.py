"""The request log's writer process: the store work of logging, out of the serving process.

In the serving process a batch of records costs only its rows' encoding and one
non-blocking pipe write. A child started at start-up decodes the rows and writes them with
the statements the serving process's `RequestLog` would use, through a connection of the
database driver alone (`driver_log.py`: no SQLAlchemy, nor anything else of the serving
process's), in transactions of its own size. Its CPU never holds the serving process's
GIL, the kernel schedules it below the server, and on a host with a free core it runs
there.

The child is a fresh interpreter (fork + exec), not a fork of the serving process: it
holds the two pipes and the standard streams, nothing else. A forked child kept every
descriptor the server had open, the listening socket among them, so the port stayed
taken (and accepted nothing) after the server was gone, and connections it had open
never closed; forking a process that runs threads copies locks other threads hold, too.
Its settings (the store's URL may carry a password) come as the first frame of the rows
pipe, never on its command line; the rows follow, each as `row_pipe.py` writes it.

Nothing is lost on the way: rows the pipe cannot take yet wait in the serving process
(up to the log's capacity, the oldest dropped and counted, as `RequestLog` does while the
database is down); at shutdown the pipe is closed, the child writes what it holds and
exits; a child that dies is replaced by writing in-process, and the rows it had not yet
written are counted as dropped.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import functools
import logging
import os
import signal
import subprocess
import sys
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import orjson

from fleetgate.record.recorder import BatchSink, RequestRecord
from fleetgate.store.driver_log import DriverLog
from fleetgate.store.log_rows import row_of
from fleetgate.store.row_pipe import decode_rows, encode_row, encode_settings
from fleetgate.store.writer_child import NUDGE, PIPE_BYTES, STOP_TIMEOUT
from fleetgate.store.writer_sched import is_idle, may_leave_idle, set_idle

log = logging.getLogger("fleetgate.record")

# Below the serving process, yet never starved by it: SCHED_IDLE while it keeps up, where
# it may leave that class again (`writer_sched.py`), else and while it is behind SCHED_BATCH
# (a writer woken by rows never preempts the server: it runs when the server waits, or at
# the scheduler's tick) at nice 5: sharing one busy core, it gets about a quarter of it,
# where a saturated gateway's log needs under a tenth (at nice 10 it would get 10 %, too
# close).
NICE = 5
# An idle child beside cores that stay busy gets no CPU until its pipe fills, which a slow
# trickle of rows may take minutes to do: rows in the pipe that the child has not dealt
# with after this long raise it too (it goes idle again itself once it has caught up). A
# child that keeps up deals with them within its rest and one write (`writer_child.py`:
# QUIET_INTERVAL + WRITE_INTERVAL, 0.7 s)
ROW_WAIT_SECONDS = 2.0
# A full pipe alone does not raise an idle child: one that keeps up beside a busy server
# empties it in bursts, in the server's idle moments, and at 3,300 requests/s on one core
# the pipe (~1,500 rows) was full about twice a second. Each raise put the child at nice 5
# beside the server for tens of milliseconds, where a waking server waits for the child's
# slice: the c1 p99 went from 0.7 to 2.2 ms. It is raised once the rows waiting in the
# serving process, behind the full pipe, pass this share of the log's capacity: three
# quarters are left for the time the raised child takes to catch up.
RAISE_AT = 0.25


def can_fork_writer(url: str) -> bool:
    """A separate process can share every store but an in-memory SQLite database."""
    return not (url.startswith("sqlite") and (":memory:" in url or url.rstrip("/") == "sqlite:"))


class LogWriterProcess(BatchSink):
    """A `RecordSink` that hands the request log's rows to a child process.

    `written`, `dropped`, `failures` and `rejected` mean what they mean on `RequestLog`,
    for the rows of this sink, whoever wrote them."""

    def __init__(self, url: str, capacity: int = 10_000, nice: int = NICE) -> None:
        self.url = url
        self.capacity = capacity
        self.nice = nice
        self.pid: int | None = None
        self._rows: deque[bytes] = deque()  # taken, for the next flush's frame
        self._frames: deque[tuple[bytes, int]] = deque()  # not yet in the pipe, with rows
        self._head_sent = 0  # bytes of the first frame already in the pipe
        self._queued = 0  # rows in `_frames`
        self._sent = 0  # rows that went into the pipe
        self._child: dict[str, int] = {}  # the child's last report
        self._lost = 0  # rows a dead child took with it
        self._dropped = 0  # rows dropped here because the child was behind
        self._fallback: DriverLog | None = None  # writes here once the child is gone
        self._fallback_thread: ThreadPoolExecutor | None = None
        self._rows_fd = self._status_fd = -1
        self._status_buf = b""
        self._loop: asyncio.AbstractEventLoop | None = None
        self._exited: asyncio.Future[None] | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._child_fds = (-1, -1)  # the child's ends of the pipes, until it is spawned
        self._idle = False  # the child runs SCHED_IDLE while it keeps up
        self.raised = 0  # times it was moved back to SCHED_BATCH (rows waiting for it)
        self._watched_to = -1  # `_sent` when rows in the pipe were last looked after

    # ---- counters --------------------------------------------------------------------
    def _count(self, name: str) -> int:
        extra = getattr(self._fallback, name, 0) if self._fallback is not None else 0
        return self._child.get(name, 0) + extra

    @property
    def written(self) -> int:
        return self._count("written")

    @property
    def dropped(self) -> int:
        return self._count("dropped") + self._dropped + self._lost

    @property
    def failures(self) -> int:
        return self._count("failures")

    @property
    def rejected(self) -> int:
        return self._count("rejected")

    # ---- life ------------------------------------------------------------------------
    def start(self) -> None:
        """Open the pipes and start the child at once."""
        self.open()
        self.spawn()

    def open(self) -> None:
        """Open the pipes: rows can be written from now on; they wait in the pipe (then
        here) until the child, started by `spawn`, reads them."""
        self._loop = asyncio.get_running_loop()
        rows_r, rows_w = os.pipe()
        status_r, status_w = os.pipe()
        with contextlib.suppress(OSError):  # Linux: a bigger pipe, fewer waits
            fcntl.fcntl(rows_w, fcntl.F_SETPIPE_SZ, PIPE_BYTES)
        self._idle = may_leave_idle(self.nice)
        settings = {
            "url": self.url,
            "capacity": self.capacity,
            "nice": self.nice,
            "idle": self._idle,
        }
        os.write(rows_w, encode_settings(settings))  # the child's first frame
        os.set_blocking(rows_w, False)
        self._rows_fd, self._status_fd = rows_w, status_r
        self._child_fds = (rows_r, status_w)

    def spawn(self) -> None:
        """Start the child. Safe from any thread, at any time: the fork only execs, and the
        child inherits no descriptor but its pipes (and 0, 1, 2). A server spawns it once
        it is ready: the child's start (mostly imports) then never delays its own."""
        if self._proc is not None:
            return
        assert self._loop is not None, "open() first"
        rows_r, status_w = self._child_fds
        try:
            self._proc = _spawn_child(rows_r, status_w, self.url.startswith("sqlite"))
        finally:
            os.close(rows_r)
            os.close(status_w)
        self.pid = self._proc.pid
        self._exited = self._loop.create_future()
        self._loop.add_reader(self._status_fd, self._on_status)

    def take(self, record: RequestRecord) -> None:
        """The record's row, encoded now (one request's share, not a batch's at once)."""
        self._rows.append(encode_row(row_of(record)))
        if len(self._rows) + self._queued > self.capacity:
            self._drop_oldest()

    async def flush(self) -> None:
        self._frame()
        if self._fallback is not None:  # the child is gone: write here
            await self._take_over()
        else:
            self._send()

    def _frame(self) -> None:
        """The rows taken since the last flush, as one frame for the pipe."""
        rows, self._rows = self._rows, deque()
        if rows:
            self._frames.append((b"".join(rows), len(rows)))
            self._queued += len(rows)

    def _drop_oldest(self) -> None:
        """One row or frame less, the oldest not yet in the pipe, counted."""
        frames = self._frames
        oldest = 1 if self._head_sent else 0  # not a frame partly in the pipe already
        if len(frames) > oldest:
            n = frames[oldest][1]
            del frames[oldest]
            self._queued -= n
        else:
            self._rows.popleft()
            n = 1
        self._dropped += n

    async def stop(self) -> None:
        """Hand over every row, let the child write them, and wait for it to exit."""
        if self._loop is None:
            return  # never opened
        self._frame()
        if self._proc is None and not (self._frames or self._sent):
            self._close_rows()  # stopped before it was ready, with nothing to write
            for fd in (self._status_fd, *self._child_fds):
                if fd >= 0:
                    os.close(fd)
            self._status_fd, self._child_fds = -1, (-1, -1)
            return
        self.spawn()  # a server that stops before it was ready may have rows already
        loop, exited = self._loop, self._exited
        assert loop is not None and exited is not None
        deadline = time.monotonic() + STOP_TIMEOUT
        while self._frames and not exited.done() and time.monotonic() < deadline:
            self._send()
            if self._frames:
                await asyncio.sleep(0.01)
        self._close_rows()
        self._nudge()
        try:
            await asyncio.wait_for(asyncio.shield(exited), max(0.1, deadline - time.monotonic()))
        except TimeoutError:
            log.error("request log writer: still writing after %.0f s; stopped", STOP_TIMEOUT)
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)
            await exited
        if self._frames:  # the child went away before taking them
            await self._take_over()

    # ---- the serving side of the pipe -------------------------------------------------
    def _send(self) -> None:
        frames = self._frames
        while frames and self._rows_fd >= 0:
            frame, rows = frames[0]
            try:
                self._head_sent += os.write(self._rows_fd, memoryview(frame)[self._head_sent :])
            except BlockingIOError:
                self._nudge()
                if self._queued > self.capacity * RAISE_AT:
                    self._hurry()
                break
            except OSError:  # the child is gone; `_on_status` takes over at its EOF
                break
            if self._head_sent < len(frame):
                break
            frames.popleft()
            self._head_sent = 0
            self._queued -= rows
            self._sent += rows
        assert self._loop is not None
        if frames and self._rows_fd >= 0:
            self._loop.add_writer(self._rows_fd, self._on_writable)
        elif self._rows_fd >= 0:
            self._loop.remove_writer(self._rows_fd)
        if self._idle and self._watched_to < 0 and self._sent > self._settled():
            self._watched_to = self._sent
            self._loop.call_later(ROW_WAIT_SECONDS, self._look_after_rows)

    def _settled(self) -> int:
        """Rows the child has taken from the pipe and dealt with, by its last report."""
        child = self._child
        return child.get("written", 0) + child.get("dropped", 0) + child.get("rejected", 0)

    def _look_after_rows(self) -> None:
        """`ROW_WAIT_SECONDS` after rows went into the pipe: if the child has not dealt with
        them all yet, it gets the CPU it waits for as an idle process (`_hurry`)."""
        sent_then, self._watched_to = self._watched_to, -1
        if self._settled() < sent_then and self._rows_fd >= 0:
            self._hurry()
        if self._sent > self._settled() and self._rows_fd >= 0 and self._loop is not None:
            self._watched_to = self._sent  # rows still wait: look again
            self._loop.call_later(ROW_WAIT_SECONDS, self._look_after_rows)

    def _on_writable(self) -> None:
        self._send()

    def _nudge(self) -> None:
        """End the child's rest: rows or the pipe's end wait for it. Never once it has been
        reaped (`_exit`): its pid may then be another process's."""
        if self.pid is not None and self._exited is not None and not self._exited.done():
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, NUDGE)

    def _hurry(self) -> None:
        """Rows wait for an idle child starved by a busy core (`RAISE_AT`,
        `ROW_WAIT_SECONDS`): back to SCHED_BATCH (it goes idle again itself once it has
        caught up)."""
        pid = self.pid
        if not self._idle or pid is None:
            return
        try:
            if not is_idle(pid):
                return
            set_idle(pid, False)
        except (FileNotFoundError, ProcessLookupError):  # it has exited: `_exit` takes over
            return
        except PermissionError:  # cannot happen after `may_leave_idle`, unless rights changed
            log.error("request log writer: cannot move it out of SCHED_IDLE; rows may wait")
            self._idle = False
            return
        self.raised += 1

    def _close_rows(self) -> None:
        if self._rows_fd >= 0:
            assert self._loop is not None
            self._loop.remove_writer(self._rows_fd)
            os.close(self._rows_fd)
            self._rows_fd = -1

    def _on_status(self) -> None:
        try:
            data = os.read(self._status_fd, 65536)
        except OSError:
            data = b""
        if data:
            *lines, self._status_buf = (self._status_buf + data).split(b"\n")
            if lines:
                self._child = orjson.loads(lines[-1])
            return
        self._exit()

    def _exit(self) -> None:
        """The child closed its status pipe: it has exited (or died)."""
        assert self._loop is not None and self._exited is not None and self.pid is not None
        self._loop.remove_reader(self._status_fd)
        os.close(self._status_fd)
        assert self._proc is not None
        code = self._proc.wait()  # its status pipe closed: it has exited, or is exiting
        child = self._child
        settled = sum(child.get(k, 0) for k in ("written", "dropped", "rejected"))
        self._lost = max(0, self._sent - settled)
        clean = self._rows_fd < 0 and code == 0
        if not clean:
            log.error(
                "request log writer exited with %s, %d row(s) unwritten; writing in-process",
                code,
                self._lost,
            )
        self._exited.set_result(None)
        if not clean:
            self._close_rows()
            self._loop.create_task(self._take_over())

    async def _take_over(self) -> None:
        """Write what is left (and what comes) in this process."""
        self._frame()
        if self._fallback is None:
            self._fallback = DriverLog(self.url, self.capacity, log)
            self._fallback.dropped = 0
            # one thread: a sqlite3 connection serves only the thread that opened it, and
            # one flush runs at a time
            self._fallback_thread = ThreadPoolExecutor(1, thread_name_prefix="fleetgate-log")
        frames = [frame for frame, _ in self._frames]
        self._frames.clear()
        self._queued = 0
        self._head_sent = 0
        await self._in_fallback_thread(functools.partial(self._write_here, frames))

    def _write_here(self, frames: list[bytes]) -> None:
        """In the fallback's thread: its rows are touched there alone."""
        assert self._fallback is not None
        for frame in frames:
            self._fallback.queue(decode_rows(frame, len(frame))[0])
        self._fallback.flush()

    async def _in_fallback_thread(self, call: Callable[[], None]) -> None:
        assert self._loop is not None and self._fallback_thread is not None
        await self._loop.run_in_executor(self._fallback_thread, call)

    async def close(self) -> None:
        if self._fallback is not None:
            await self._in_fallback_thread(self._fallback.close)
            assert self._fallback_thread is not None
            self._fallback_thread.shutdown(wait=True)


# ---- the child ---------------------------------------------------------------------------


# The child's first lines, before anything is imported: below the server at once (its
# imports are most of its start), deaf to the signals meant for the server, which were
# blocked in it from the spawn on (`_spawn_child`) so that none lands in between, and the
# collector off until its store is open (`child_main`), as in a `fleetgate` command. A
# child that writes SQLite needs no TLS, and OpenSSL's start holds about 4 MB resident: no
# import may load it there (a PostgreSQL driver may use it). Signals through `signal`'s own
# module, without the enums (`writer_child.py`).
_CHILD_CODE = """\
import _signal, gc, os, sys
gc.disable()
if sys.argv[3] == "sqlite":
    sys.modules["ssl"] = None
try:
    os.sched_setscheduler(0, os.SCHED_BATCH, os.sched_param(0))
except (AttributeError, OSError):
    pass
_signal.signal(_signal.SIGINT, _signal.SIG_IGN)
_signal.signal(_signal.SIGTERM, _signal.SIG_IGN)
_signal.pthread_sigmask(_signal.SIG_UNBLOCK, {_signal.SIGINT, _signal.SIGTERM})
from fleetgate.store.writer_child import child_main
child_main(int(sys.argv[1]), int(sys.argv[2]))
"""
_DEAF_TO = {signal.SIGINT, signal.SIGTERM}


def _spawn_child(rows_fd: int, status_fd: int, sqlite: bool) -> subprocess.Popen[bytes]:
    """A new interpreter running `child_main`, importing this same fleetgate and the same
    libraries: it searches the serving process's own import path, and skips `site` (`-S`),
    whose `.pth` files may import whatever their packages want at every start (here about
    5 MB resident, for modules the writer never uses)."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ)
    paths = [root, *(p for p in sys.path if p and os.path.isabs(p))]
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    # the child inherits this thread's signal mask through the exec; it unblocks the two
    # once it ignores them (a signal meanwhile stays pending, then is discarded), and
    # `NUDGE` once it handles it (`writer_child.child_write`)
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, _DEAF_TO | {NUDGE})
    try:
        return subprocess.Popen(
            [
                sys.executable,
                "-P",
                "-S",
                "-c",
                _CHILD_CODE,
                str(rows_fd),
                str(status_fd),
                "sqlite" if sqlite else "other",
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            close_fds=True,
            pass_fds=(rows_fd, status_fd),
            env=env,
        )
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
