"""Online calibration of the context estimate from what answers report.

Every successful answer says how many prompt tokens it really took (`usage.prompt_tokens`,
`prompt_eval_count`, `input_tokens`); every exact count says it too. Per deployment, the
ratio `true / estimate` goes into a decayed histogram of log-ratios (each new sample weighs
as much as the last ~`HALF_LIFE` together, so the calibration follows a changing mix of
traffic). Once `MIN_SAMPLES` are in, its quantiles bound the true count: the estimate is
corrected by the upper one (conservative), and the refine band is the spread between the
lower and the upper one instead of a fixed [0.7, 1.3]. Both are bounded to
[`FLOOR`, `CEILING`], so no run of odd answers can move them further.

The book also holds each deployment's own tokenizer fit (`fit.py`): the weights of the
tally's fields learned from the answers (and a fingerprint of the engine's tokenizer), which
replaces the family and this ratio once it is the deployment's own evidence.

Pure and synchronous; the recorder feeds it off the hot path (`record/calibration_sink.py`),
the state layer shares it between replicas, the store keeps it across restarts.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any

from fleetgate.context.fit import TokenizerFit
from fleetgate.context.tally import LAYOUT, N_FIELDS

MIN_SAMPLES = 8
HALF_LIFE = 200.0  # samples
LOW_Q, HIGH_Q = 0.03, 0.97
FLOOR, CEILING = 0.5, 2.0
_BINS = 140
_LOG_FLOOR, _LOG_CEILING = math.log(FLOOR), math.log(CEILING)
_STEP = (_LOG_CEILING - _LOG_FLOOR) / _BINS  # about 1 % of ratio a bin
_DECAY = 0.5 ** (1 / HALF_LIFE)
MAX_UNSHARED = 10_000  # local samples kept for sharing while none is taken
# answers shared per deployment and publication: a fit learns enough from these, and a
# publication stays a few kilobytes per deployment however busy the replica is
MAX_SHARED_ANSWERS = 32


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

    def share_within(self, factor: float) -> float | None:
        """The (decayed) share of samples at most `factor`, the bin it falls in taken in
        proportion; None until there are enough samples."""
        if self.samples < MIN_SAMPLES:
            return None
        total = sum(self.weights)
        if total <= 0 or factor < FLOOR:
            return 0.0
        if factor >= CEILING:
            return 1.0
        at = (math.log(factor) - _LOG_FLOOR) / _STEP
        index = min(int(at), _BINS - 1)
        below = sum(self.weights[:index]) + self.weights[index] * (at - index)
        return min(below / total, 1.0)

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
        self._fits: dict[str, TokenizerFit] = {}
        self._stored_fits: dict[str, dict[str, Any]] = {}  # loaded, not yet asked for
        self._answers: dict[str, list[list[Any]]] = {}  # local answers not yet shared
        self._answers_size = 0
        # other replicas' answers for a deployment that has no fit here yet
        self._waiting: dict[str, list[tuple[tuple[int, ...], int, float]]] = {}

    def factors(self, deployment_id: str, prior: tuple[float, float]) -> tuple[float, float]:
        """(low, high) factors on a deployment's estimate: learned, else the family's."""
        cal = self._by_deployment.get(deployment_id)
        bounds = cal.bounds() if cal is not None else None
        return bounds if bounds is not None else prior

    def share_within(self, deployment_id: str, factor: float) -> float | None:
        """How likely a true count is at most `factor` x the family's estimate, from usage;
        None until there are enough samples."""
        cal = self._by_deployment.get(deployment_id)
        return cal.share_within(factor) if cal is not None else None

    def calibrated(self, deployment_id: str) -> tuple[float, float] | None:
        """(low, high) factors learned from usage; None until there are enough samples."""
        cal = self._by_deployment.get(deployment_id)
        return cal.bounds() if cal is not None else None

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

    def fit(self, deployment_id: str, prior: tuple[float, ...]) -> TokenizerFit:
        """The deployment's tokenizer fit (made on first use, from a stored state if any)."""
        fit = self._fits.get(deployment_id)
        if fit is None:
            fit = self._fits[deployment_id] = TokenizerFit(prior)
            stored = self._stored_fits.pop(deployment_id, None)
            if stored is not None:
                fit.load(stored)
            for counts, tokens, when in self._waiting.pop(deployment_id, ()):
                fit.add(counts, tokens, when)
        return fit

    def own_fit(self, deployment_id: str) -> TokenizerFit | None:
        """The deployment's fit when it is its own evidence (hot path: a lookup)."""
        fit = self._fits.get(deployment_id)
        return fit if fit is not None and fit.own else None

    def observe_answer(
        self,
        deployment_id: str,
        prior: tuple[float, ...],
        counts: tuple[int, ...],
        tokens: int,
        now: float | None = None,
        shared: bool = False,
    ) -> None:
        """An answer's tally and reported prompt tokens (`shared`: another replica's)."""
        when = time.time() if now is None else now
        self.fit(deployment_id, prior).add(counts, tokens, when)
        self.changed.add(deployment_id)
        self.version += 1
        if shared or self._answers_size >= MAX_UNSHARED:
            return
        rows = self._answers.setdefault(deployment_id, [])
        if len(rows) < MAX_SHARED_ANSWERS:
            rows.append([[[i, v] for i, v in enumerate(counts) if v], tokens, when])
            self._answers_size += 1

    def observe_shared_answers(self, answers: dict[str, Any], layout: str | None) -> int:
        """Another replica's answers (`take_answers`, tallies of `layout`); returns how many
        were taken. A deployment without a fit here keeps them until its fit is made (the
        prior is known then), up to `MAX_UNSHARED`."""
        if layout != LAYOUT or not isinstance(answers, dict):
            return 0  # tallies of another version's fields
        taken = 0
        for dep_id, rows in answers.items():
            fit = self._fits.get(str(dep_id))
            waiting = self._waiting.setdefault(str(dep_id), []) if fit is None else None
            for row in rows if isinstance(rows, list) else ():
                try:
                    sparse, tokens, when = row
                    counts = [0] * N_FIELDS
                    for i, v in sparse:
                        counts[int(i)] = int(v)
                    sample = (tuple(counts), int(tokens), float(when))
                except (TypeError, ValueError, IndexError):
                    continue
                if fit is not None:
                    fit.add(*sample)
                elif waiting is not None and len(waiting) < MAX_UNSHARED:
                    waiting.append(sample)
                taken += 1
            if fit is not None:
                self.changed.add(str(dep_id))
        if taken:
            self.version += 1
        return taken

    def refit(self, now: float | None = None) -> int:
        """Refit the fits that are due (off the hot path); returns how many were."""
        when = time.monotonic() if now is None else now
        done = 0
        for fit in self._fits.values():
            if fit.due(when):
                fit.refit(when)
                done += 1
        return done

    def take_answers(self) -> dict[str, list[list[Any]]]:
        """The answers observed here since the last call: deployment -> [[tally, tokens,
        time]] (the tally sparse: [[field, count]])."""
        out, self._answers, self._answers_size = self._answers, {}, 0
        return out

    def take_samples(self) -> dict[str, list[list[float]]]:
        """The samples observed here since the last call: deployment -> [[ratio, time]]."""
        out, self._outbox, self._outbox_size = self._outbox, {}, 0
        return out

    def dumps(self) -> dict[str, dict[str, Any]]:
        """Every deployment's whole state (what the store keeps)."""
        out = {d: cal.dump() for d, cal in self._by_deployment.items()}
        for d, fit in self._fits.items():
            out.setdefault(d, {})["fit"] = fit.dump()
        return out

    def get(self, deployment_id: str) -> Calibration | None:
        return self._by_deployment.get(deployment_id)

    def put(self, deployment_id: str, data: dict[str, Any]) -> None:
        """Adopt a stored or shared state when it is newer than ours."""
        fit_data = data.get("fit")
        if isinstance(fit_data, dict):
            fit = self._fits.get(deployment_id)
            if fit is None:
                self._stored_fits[deployment_id] = fit_data
            elif float(fit_data.get("updated_at", 0.0)) > fit.updated_at:
                fit.load(fit_data)
        if "weights" not in data:
            return
        incoming = Calibration.load(data)
        current = self._by_deployment.get(deployment_id)
        if current is None or incoming.updated_at > current.updated_at:
            self._by_deployment[deployment_id] = incoming

    def take_changed(self) -> dict[str, dict[str, Any]]:
        """The dumps of the deployments changed since the last call."""
        out: dict[str, dict[str, Any]] = {}
        for d in self.changed:
            cal = self._by_deployment.get(d)
            out[d] = cal.dump() if cal is not None else {}
            fit = self._fits.get(d)
            if fit is not None:
                out[d]["fit"] = fit.dump()
        self.changed = set()
        return out

    def public(self, deployment_id: str) -> dict[str, Any] | None:
        cal = self._by_deployment.get(deployment_id)
        return cal.public() if cal is not None else None

    def public_fit(self, deployment_id: str) -> dict[str, Any] | None:
        fit = self._fits.get(deployment_id)
        return fit.public() if fit is not None else None
