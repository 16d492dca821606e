"""The CPU scheduling class of the request log's writer process, for all of its threads.

A writer that keeps up runs SCHED_IDLE: it gets the CPU only when nothing else wants it,
and the server preempts it the moment it wakes, so log writes stay out of requests'
latency (a SCHED_BATCH writer at nice 5 on a shared core still held it for milliseconds at
a time, the c1 tail's known cause). An idle writer starves beside a server that saturates
the core, so the serving process moves it back to SCHED_BATCH once rows pile up behind its
full pipe (`log_writer.RAISE_AT`), and the writer lowers itself again once it has caught
up. Leaving SCHED_IDLE needs
CAP_SYS_NICE or an RLIMIT_NICE that admits the writer's nice value; where neither is
there, the writer stays SCHED_BATCH throughout.
"""

from __future__ import annotations

import os

_IDLE = getattr(os, "SCHED_IDLE", None)
_BATCH = getattr(os, "SCHED_BATCH", None)


def may_leave_idle(nice: int) -> bool:
    """Whether a thread of this process at `nice` that went SCHED_IDLE may come back to
    SCHED_BATCH: tried on a short-lived thread of its own (on Linux the class and the nice
    value are per thread; the try is the only sure test, and a failed one would leave the
    thread that tried it idle for good)."""
    if _IDLE is None or _BATCH is None:
        return False
    import threading  # (the serving process's side, once: the writer holds no threading)

    came_back: list[bool] = []

    def attempt() -> None:
        try:
            os.nice(nice)  # this thread's own, as the writer's will be
            os.sched_setscheduler(0, _IDLE, os.sched_param(0))
            os.sched_setscheduler(0, _BATCH, os.sched_param(0))
            came_back.append(True)
        except OSError:
            came_back.append(False)

    probe = threading.Thread(target=attempt, name="fleetgate-sched-probe")
    probe.start()
    probe.join()
    return came_back == [True]


def set_idle(pid: int, idle: bool) -> None:
    """Put every thread of process `pid` in SCHED_IDLE, or back in SCHED_BATCH (each keeps
    its nice value). A thread that ends meanwhile is skipped; a refusal (`PermissionError`)
    and a process that is gone (`FileNotFoundError`) are the caller's."""
    policy = _IDLE if idle else _BATCH
    if policy is None:
        return
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:  # (no contextlib in the writer process)
            os.sched_setscheduler(int(tid), policy, os.sched_param(0))
        except ProcessLookupError:  # that thread has ended
            continue


def is_idle(pid: int = 0) -> bool:
    """Whether the (main) thread of `pid` (0: the calling thread) runs SCHED_IDLE."""
    return _IDLE is not None and os.sched_getscheduler(pid) == _IDLE
