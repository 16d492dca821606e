"""How a dependency's outage (the store, Redis) reaches the log: one warning when it
starts, one when it ends, and counters in between, whatever the number of failed
operations (a 10 s outage is thousands of them under load)."""

from __future__ import annotations

import time

# `typing` is for the type checker alone here: the request log's writer process imports
# this module and holds no `typing` (with `re`, which it imports, about 0.7 MB)
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Protocol

    class Log(Protocol):
        """Where an outage's lines go: a `logging.Logger`, or what stands for one where
        `logging` is not loaded (the request log's writer process)."""

        def warning(self, msg: str, *args: Any) -> None: ...


class Outage:
    def __init__(self, what: str, log: Log, where: str = "") -> None:
        self.what = what  # "the store", "Redis"
        self.where = where  # a password-free address, for the log line
        self.log = log
        self.down_since: float | None = None
        self.failures = 0  # operations that failed, all outages together
        self.outages = 0
        self._during = 0  # operations that failed in the current outage

    @property
    def up(self) -> bool:
        return self.down_since is None

    def failed(self, exc: BaseException, consequence: str = "") -> None:
        """Count a failed operation; the first one of an outage logs a warning."""
        self.failures += 1
        self._during += 1
        if self.down_since is not None:
            return
        self.down_since = time.time()
        self.outages += 1
        at = f" at {self.where}" if self.where else ""
        then = f"; {consequence}" if consequence else ""
        self.log.warning("%s%s is unreachable (%s)%s", self.what, at, type(exc).__name__, then)

    def ok(self) -> None:
        """An operation worked: when the dependency was down, say it is back."""
        if self.down_since is None:
            return
        lasted = time.time() - self.down_since
        self.log.warning(
            "%s is reachable again after %.1fs (%d operation(s) failed meanwhile)",
            self.what[:1].upper() + self.what[1:],
            lasted,
            self._during,
        )
        self.down_since = None
        self._during = 0

    def status(self) -> dict[str, Any]:
        return {
            "connected": self.up,
            "failures": self.failures,
            "outages": self.outages,
            "down_since": self.down_since,
        }
