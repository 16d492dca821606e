"""Online calibration of the context estimate from what answers report.

Every successful answer says how many prompt tokens it really took (`usage.prompt_tokens`,
`prompt_eval_count`, `input_tokens`); every exact count says it too. Per deployment, the
ratio `true / estimate` goes into a decayed histogram of log-ratios (each new sample weighs
as much as the last ~`HALF_LIFE` together, so the calibration follows a changing mix of
traffic). Once `MIN_SAMPLES` are in, its quantiles bound the true count: the estimate is
corrected by the upper one (conservative), and the refine band is the spread between the
lower and the upper one instead of a fixed [0.7, 1.3]. Both are bounded to
[`FLOOR`, `CEILING`], so no run of odd answers can move them further.

Pure and synchronous; the recorder feeds it off the hot path (`record/calibration_sink.py`),
the state layer shares it between replicas, the store keeps it across restarts.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any

MIN_SAMPLES = 8
HALF_LIFE = 200.0  # samples
LOW_Q, HIGH_Q = 0.03, 0.97
FLOOR, CEILING = 0.5, 2.0
_BINS = 140
_LOG_FLOOR, _LOG_CEILING = math.log(FLOOR), math.log(CEILING)
_STEP = (_LOG_CEILING - _LOG_FLOOR) / _BINS  # about 1 % of ratio a bin
_DECAY = 0.5 ** (1 / HALF_LIFE)
MAX_UNSHARED = 10_000  # local samples kept for sharing while none is taken


def _bin(ratio: float) -> int:
    if ratio <= FLOOR:
        return 0
    return min(int((math.log(ratio) - _LOG_FLOOR) / _STEP), _BINS - 1)


def _edge(index: int) -> float:
    return math.exp(_LOG_FLOOR + index * _STEP)


@dataclass(slots=True)
class Calibration:
    """One deployment's decayed histogram of true / estimate ratios."""

    weights: list[float] = field(default_factory=lambda: [0.0] * _BINS)
    samples: int = 0
    updated_at: float = 0.0
    _bounds: tuple[float, float] | None = None

    def add(self, ratio: float, now: float) -> None:
        if not math.isfinite(ratio) or ratio <= 0:
            return
        weights = self.weights
        for i in range(_BINS):
            weights[i] *= _DECAY
        weights[_bin(ratio)] += 1.0
        self.samples += 1
        self.updated_at = now
        self._bounds = None

    def _quantile(self, q: float, upper: bool) -> float:
        total = sum(self.weights)
        target = q * total
        running = 0.0
        for i, w in enumerate(self.weights):
            running += w
            if running >= target:
                return _edge(i + 1 if upper else i)
        return CEILING

    def bounds(self) -> tuple[float, float] | None:
        """(low, high) factors on the estimate; None until there are enough samples."""
        if self.samples < MIN_SAMPLES:
            return None
        if self._bounds is None:
            low = max(FLOOR, self._quantile(LOW_Q, upper=False))
            high = min(CEILING, self._quantile(HIGH_Q, upper=True))
            self._bounds = (low, max(high, low))
        return self._bounds

    def public(self) -> dict[str, Any]:
        bounds = self.bounds()
        return {
            "samples": self.samples,
            "low": round(bounds[0], 4) if bounds else None,
            "high": round(bounds[1], 4) if bounds else None,
            "median": round(self._quantile(0.5, upper=False), 4) if self.samples else None,
            "updated_at": self.updated_at or None,
        }

    def dump(self) -> dict[str, Any]:
        """The whole state, as JSON (persisted and shared)."""
        return {
            "weights": [round(w, 6) for w in self.weights],
            "samples": self.samples,
            "updated_at": self.updated_at,
        }

    @classmethod
    def load(cls, data: dict[str, Any]) -> Calibration:
        weights = [float(w) for w in data.get("weights", ())]
        if len(weights) != _BINS:
            weights = [0.0] * _BINS  # another version's layout: start over
        return cls(weights, int(data.get("samples", 0)), float(data.get("updated_at", 0.0)))


class CalibrationBook:
    """Every deployment's calibration, read synchronously by routing.

    Samples observed here are also kept for the state layer to share (`take_samples`):
    other replicas add them to their own books, so every replica learns from all traffic.
    """

    def __init__(self) -> None:
        self._by_deployment: dict[str, Calibration] = {}
        self.changed: set[str] = set()  # deployments changed since the last `take_changed`
        self.version = 0  # goes up with every sample (the store saves a changed book)
        self._outbox: dict[str, list[list[float]]] = {}  # local samples not yet shared
        self._outbox_size = 0

    def factors(self, deployment_id: str, prior: tuple[float, float]) -> tuple[float, float]:
        """(low, high) factors on a deployment's estimate: learned, else the family's."""
        cal = self._by_deployment.get(deployment_id)
        bounds = cal.bounds() if cal is not None else None
        return bounds if bounds is not None else prior

    def observe(
        self, deployment_id: str, ratio: float, now: float | None = None, shared: bool = False
    ) -> None:
        """One sample (`shared`: another replica's, not to be shared again)."""
        if not math.isfinite(ratio) or ratio <= 0:
            return
        when = time.time() if now is None else now
        cal = self._by_deployment.get(deployment_id)
        if cal is None:
            cal = self._by_deployment[deployment_id] = Calibration()
        cal.add(ratio, when)
        self.changed.add(deployment_id)
        self.version += 1
        if not shared and self._outbox_size < MAX_UNSHARED:
            self._outbox.setdefault(deployment_id, []).append([round(ratio, 5), when])
            self._outbox_size += 1

    def take_samples(self) -> dict[str, list[list[float]]]:
        """The samples observed here since the last call: deployment -> [[ratio, time]]."""
        out, self._outbox, self._outbox_size = self._outbox, {}, 0
        return out

    def dumps(self) -> dict[str, dict[str, Any]]:
        """Every deployment's whole state (what the store keeps)."""
        return {d: cal.dump() for d, cal in self._by_deployment.items()}

    def get(self, deployment_id: str) -> Calibration | None:
        return self._by_deployment.get(deployment_id)

    def put(self, deployment_id: str, data: dict[str, Any]) -> None:
        """Adopt a stored or shared state when it is newer than ours."""
        incoming = Calibration.load(data)
        current = self._by_deployment.get(deployment_id)
        if current is None or incoming.updated_at > current.updated_at:
            self._by_deployment[deployment_id] = incoming

    def take_changed(self) -> dict[str, dict[str, Any]]:
        """The dumps of the deployments changed since the last call."""
        out = {d: self._by_deployment[d].dump() for d in self.changed}
        self.changed = set()
        return out

    def public(self, deployment_id: str) -> dict[str, Any] | None:
        cal = self._by_deployment.get(deployment_id)
        return cal.public() if cal is not None else None
