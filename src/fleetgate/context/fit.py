"""A deployment's own tokenizer: the tally's weights fitted to what its engine counted.

A family (`families.py`) is a prior: weights fitted offline to one tokenizer. The evidence
is the deployment's own: each answer's `usage.prompt_tokens` next to the request's tally,
and, where the engine has a tokenize endpoint, the counts of a fixed probe set taken at
discovery (`discovery/fingerprint.py`). Per deployment, `TokenizerFit` keeps the decayed
normal equations of a least-squares fit of those counts on the tally's fields:

* relative: each sample weighs as its error in percent, so a 50-token chat counts as much
  as a 5,000-token document;
* robust: a sample far off the current fit (more than `HUBER` of its count) weighs less,
  in proportion (Huber), so an odd answer cannot pull the weights;
* decayed: each new sample weighs as much as the last `HALF_LIFE` together, so the fit
  follows a changed engine or a changed mix of traffic;
* pulled to the prior: a ridge towards the family's weights that weighs as `PRIOR_SAMPLES`
  samples (the template's fields `TEMPLATE_PULL` of that: templates differ more than
  tokenizers), so a field the evidence never showed (an unseen script) keeps its prior weight,
  collinear fields (characters and words of prose) stay sensible while the samples are
  few, and the pull fades as they come; no weight goes below zero.

Memory is bounded (the N x N equations and the last `KEEP` samples), and the CPU too: a
sample costs its non-zero fields squared (off the hot path, in the recorder's sink), a
refit a small Cholesky solve, at most every `REFIT_SECONDS` or when the samples since the
last one are an eighth of all.

The band: after each refit, the residuals `true / estimate` of the kept samples under the
new weights give, per kind of text (`kind_of`: prose, code, digits, CJK, other scripts,
mixed), the 3 % and 97 % quantiles the true count lies between. A kind with too few samples
takes the spread of all of them, widened. Placement scales the estimate by them; the exact
count decides when a window lies between.

Pure and synchronous; the book (`calibration.py`) holds one fit per deployment, shares the
samples between replicas and keeps them in the store.
"""

from __future__ import annotations

import bisect
import math
import operator
import time
from collections import deque
from typing import Any

from fleetgate.context.tally import FIELDS, LAYOUT, N_FIELDS, TOKEN_IDS

# template fields whose cost may be negative: a template can write less when a request has
# tools, or a system turn of its own, than its default preamble, or render tool calls in
# fewer tokens than their JSON costs as text (or drop them), or drop tool results
_SIGNED = (
    "tool_blocks",
    "tool_text",
    "call_chars",
    "default_system",
    # text fields that say where a tokenizer costs less than the characters' own weights:
    # a punctuation character a word takes along, a pair of one punctuation character
    "punct_words",
    "punct_pairs",
)
SIGNED = frozenset(FIELDS.index(f) for f in _SIGNED)

# the template's fields: a family's template says little of an unknown model's (one writes
# a default preamble of 500 tokens, one drops tool schemas), so its prior pulls them less
_TEMPLATE = (
    "messages",
    "replies",
    "tool_turns",
    "tool_text",
    "call_chars",
    "tools",
    "tool_blocks",
    "schema_chars",
    "schema_words",
    "schema_punct",
    "schema_punct_runs",
    "default_system",
    "requests",
)
TEMPLATE_FIELDS = frozenset(FIELDS.index(f) for f in _TEMPLATE)
TEMPLATE_PULL = 0.05  # the prior's pull on a template field, to a text field's
_PULL = tuple(TEMPLATE_PULL if f in _TEMPLATE else 1.0 for f in FIELDS)

HALF_LIFE = 200.0  # samples
MIN_ANSWERS = 24  # answers before a fit without a fingerprint is the deployment's evidence
MIN_KIND = 8  # residuals of one kind before its own spread is used
HUBER = 0.1  # relative error beyond which a sample weighs less
PRIOR_SAMPLES = 8.0  # the prior weighs as this many samples (its pull fades as they come)
# a fingerprint's probes weigh as this many answers together (each alike, at most as one
# answer): they tell each class of text apart, the answers what this traffic is; so once
# answers come, theirs is the larger say (a probe set of hundreds weighed as hundreds
# of answers held the fit to its own texts long after the traffic had spoken)
PROBE_ANSWERS = 32.0
KEEP = 384  # recent samples kept for the residual spread (and across restarts)
REFIT_SECONDS = 2.0
LOW_Q, HIGH_Q = 0.03, 0.97
WIDEN = 0.04  # a kind without its own residuals: the spread of all, this much wider
# a refusal on the fit alone (`lowest`): the room to spare under the lowest residual, and
# the share of an estimate that may come from fields no evidence showed (their prior's)
SPARE = 0.8
UNSEEN_SHARE = 0.02
FLOOR, CEILING = 0.5, 2.0
_DECAY = 0.5 ** (1 / HALF_LIFE)
_RESCALE = 1e6  # the growing sample weight is folded back into the equations past this

# kinds of text, by which group of fields costs the most tokens on the prior
_GROUPS: dict[str, tuple[str, ...]] = {
    "prose": ("chars", "upper", "words", "long_runs", "latin_ext", "newlines"),
    "code": (
        "punct",
        "punct_runs",
        "tabs",
        "tab_runs",
        "space_runs",
        "space_pairs",
        "case_changes",
    ),
    "digits": ("digits", "space_digits", "digit_runs", "digit_triples"),
    "cjk": ("kana", "han", "hangul", "fullwidth"),
    "script": (
        "greek",
        "cyrillic",
        "hebrew",
        "arabic",
        "indic",
        "thai",
        "other3",
        "symbols",
        "four_byte",
    ),
}
KINDS = (*_GROUPS, "mixed")
_GROUP_FIELDS = tuple(tuple(FIELDS.index(f) for f in fields) for fields in _GROUPS.values())
_MIXED = 0.6  # no group costs this share of the text's tokens: mixed


def kind_of(counts: tuple[int, ...], weights: tuple[float, ...]) -> str:
    """The kind of text of a tally: the group of fields that costs the most of it."""
    best, best_cost, total = "mixed", 0.0, 0.0
    for name, fields in zip(_GROUPS, _GROUP_FIELDS, strict=True):
        cost = 0.0
        for i in fields:
            n = counts[i]
            if n:
                cost += n * weights[i]
        total += cost
        if cost > best_cost:
            best, best_cost = name, cost
    if total <= 0 or best_cost < _MIXED * total:
        return "mixed"
    return best


def estimated_part(counts: tuple[int, ...]) -> tuple[int, ...]:
    """The fields an estimate is made of: token ids are known, not estimated."""
    if counts[TOKEN_IDS]:
        counts = (*counts[:TOKEN_IDS], 0, *counts[TOKEN_IDS + 1 :])
    return counts


def dot(weights: tuple[float, ...], counts: tuple[int, ...]) -> float:
    return sum(map(operator.mul, weights, counts))


Sample = tuple[tuple[int, ...], int, float]  # (counts, true tokens, weight)


class TokenizerFit:
    """One deployment's fit (see the module doc)."""

    def __init__(self, prior: tuple[float, ...]) -> None:
        self.prior = prior
        n = N_FIELDS
        self._a = [[0.0] * n for _ in range(n)]
        self._b = [0.0] * n
        self._gain = 1.0  # the weight of the next sample (decay without touching the past)
        self.answers = 0  # answers taken, in all
        self.fingerprint: str | None = None  # the identity the probes were counted on
        self._probes: list[tuple[tuple[int, ...], int]] = []
        self._recent: deque[tuple[tuple[int, ...], int]] = deque(maxlen=KEEP)
        self._pending = 0  # samples since the last refit
        self._refit_at = 0.0
        self.weights: tuple[float, ...] | None = None  # None: no evidence yet
        self.spread: dict[str, tuple[float, float]] = {}
        # the residuals true / estimate of the last refit, sorted, per kind of text ("*": all)
        self.residuals: dict[str, list[float]] = {}
        # the fingerprint's probes' residuals per kind, once the answers make `residuals`
        # alone: the engine's own evidence for the kinds the answers have too few of
        self.probe_residuals: dict[str, list[float]] = {}
        # the fields some probe or answer showed (the others keep their prior's weight)
        self.seen: frozenset[int] = frozenset()
        self.updated_at = 0.0

    @property
    def own(self) -> bool:
        """Whether the fit is the deployment's own evidence (a fingerprint or enough
        answers), as opposed to the family's prior."""
        return self.weights is not None and (
            self.fingerprint is not None or self.answers >= MIN_ANSWERS
        )

    @property
    def source(self) -> str:
        if not self.own:
            return "prior"
        return (
            "fingerprint"
            if self.fingerprint is not None and self.answers < MIN_ANSWERS
            else ("answers")
        )

    # -- evidence ------------------------------------------------------------------------
    def add(self, counts: tuple[int, ...], tokens: int, now: float | None = None) -> None:
        """One answer: the request's tally and the prompt tokens its engine reported."""
        known = counts[TOKEN_IDS]
        x, y = estimated_part(counts), tokens - known
        if y <= 0:
            return
        self._accumulate(x, y, 1.0)
        self._recent.append((x, y))
        self.answers += 1
        self._pending += 1
        self.updated_at = time.time() if now is None else now

    def set_fingerprint(self, identity: str, probes: list[tuple[tuple[int, ...], int]]) -> None:
        """The probe set's counts on the engine (replacing an earlier fingerprint's)."""
        if identity == self.fingerprint:
            return
        self.fingerprint = identity
        self._probes = [(estimated_part(c), t) for c, t in probes if t > 0]
        self._rebuild()

    def _accumulate(self, x: tuple[int, ...], y: int, weight: float) -> None:
        current = self.weights or self.prior
        guess = dot(current, x)
        error = abs(y - guess) / y
        robust = 1.0 if error <= HUBER or self.weights is None else HUBER / error
        w = weight * robust * self._gain / (y * y)
        nz = [i for i, v in enumerate(x) if v]
        a, b = self._a, self._b
        for i in nz:
            wi = w * x[i]
            row = a[i]
            for j in nz:
                row[j] += wi * x[j]
            b[i] += wi * y
        self._gain /= _DECAY
        if self._gain > _RESCALE:  # fold the gain back: the past weighs less, as decayed
            scale = 1.0 / self._gain
            for row in a:
                for j in range(len(row)):
                    row[j] *= scale
            for i in range(len(b)):
                b[i] *= scale
            self._gain = 1.0

    def _rebuild(self) -> None:
        """The equations from the probes and the kept answers (a fingerprint, a load),
        twice when there was no fit to weigh them by: then each sample weighed as much as
        the next, so a second pass weighs them by the first pass's fit (`HUBER`)."""
        for _ in range(1 if self.weights is not None else 2):
            n = N_FIELDS
            self._a = [[0.0] * n for _ in range(n)]
            self._b = [0.0] * n
            self._gain = 1.0
            weight = min(1.0, PROBE_ANSWERS / max(len(self._probes), 1))
            for x, y in self._probes:
                self._accumulate(x, y, weight)
            for x, y in self._recent:
                self._accumulate(x, y, 1.0)
            self._pending = 1
            self._refit_at = 0.0
            self.refit()

    # -- the fit -------------------------------------------------------------------------
    def due(self, now: float) -> bool:
        if not self._pending:
            return False
        if self.weights is None or self._pending * 8 >= self.answers + len(self._probes):
            return True
        return now - self._refit_at >= REFIT_SECONDS

    def refit(self, now: float | None = None) -> None:
        """Solve the equations (ridge to the prior, no weight below zero) and take the
        residual spread per kind of text."""
        now = time.monotonic() if now is None else now
        self._pending = 0
        self._refit_at = now
        if not self._probes and not self.answers:
            return
        ridge = PRIOR_SAMPLES / max(self.answers + len(self._probes), 1)
        self.weights = _solve(self._a, self._b, self.prior, ridge)
        self.seen = frozenset(i for i in range(N_FIELDS) if self._a[i][i] > 0)
        self.residuals = self._residuals(self.weights)
        self.spread = band_per_kind(self.residuals)
        self.probe_residuals = (
            _by_kind(self._probes, self.weights)[0] if len(self._recent) >= MIN_ANSWERS else {}
        )

    def _residuals(self, weights: tuple[float, ...]) -> dict[str, list[float]]:
        """The samples' true / estimate under `weights`, sorted, per kind of text with
        `MIN_KIND` of them at least, and of all of them under "*". The kept answers once
        there are `MIN_ANSWERS` of them; until then the fingerprint's probes beside them (the
        first answers alone made a spread of one or two samples: a band one token wide)."""
        samples = list(self._recent)
        if len(samples) < MIN_ANSWERS:
            samples.extend(self._probes)
        out, every = _by_kind(samples, weights)
        if every:
            out["*"] = every
        return out

    # -- the hot path ----------------------------------------------------------------------
    def tokens(self, counts: tuple[int, ...]) -> int:
        """The fitted estimate of the estimated part of a tally (token ids left out)."""
        assert self.weights is not None
        return max(math.ceil(dot(self.weights, estimated_part(counts))), 0)

    def factors(self, counts: tuple[int, ...]) -> tuple[float, float]:
        """(low, high) factors on `tokens(counts)` for a text of this kind."""
        assert self.weights is not None
        spread = self.spread
        found = spread.get(kind_of(counts, self.weights)) or spread.get("*")
        return found if found is not None else (1 - 2 * WIDEN, 1 + 2 * WIDEN)

    def share_within(self, counts: tuple[int, ...], factor: float) -> float:
        """How likely the true count is `factor` x `tokens(counts)` or fewer: the share of
        the fit's residuals for a text of this kind that are at most `factor`, pulled
        towards the share of all of them, spread `WIDEN` wider each way, as `MIN_KIND` of
        them would (a kind's few residuals are the samples it was fitted on: alone, they
        said no CJK request could be 4 % under the fit, and one was). A kind without its
        own residuals takes all of them, widened (as its band does)."""
        assert self.weights is not None
        residuals = self.residuals
        every = residuals.get("*")
        if not every:  # no residuals at all: the band's fixed width, as `factors` gives it
            low, high = 1 - 2 * WIDEN, 1 + 2 * WIDEN
            return 0.0 if factor < low else 1.0 if factor >= high else 0.5
        # beyond every residual, widened, the share is 0 or 1 whatever the kind (a kind's
        # residuals are among them): the kind is not looked for (placement asks of each
        # window, most of them far from the request)
        if factor < every[0] * (1 - WIDEN):
            return 0.0
        if factor >= every[-1] * (1 + WIDEN):
            return 1.0
        return _share(every, residuals.get(kind_of(counts, self.weights)), factor)

    def lowest(self, counts: tuple[int, ...]) -> float | None:
        """The factor on `tokens(counts)` below which the fit's evidence says the true
        count does not lie, with room to spare: the lowest residual of this kind of text
        (or the 3 % quantile of all of them, widened, when that is lower) times `SPARE`.
        A kind the answers have too few of takes the fingerprint's probes of that kind,
        whose counts are the engine's own. None when the evidence does not cover the text:
        a kind without residuals of its own in either, or fields no probe or answer showed
        costing more than `UNSEEN_SHARE` of the estimate (they keep the prior's weight, a
        guess)."""
        assert self.weights is not None
        weights = self.weights
        counts = estimated_part(counts)
        kind = kind_of(counts, weights)
        own = self.residuals.get(kind) or self.probe_residuals.get(kind)
        spread = self.spread.get("*")
        if own is None or spread is None:
            return None
        total = dot(weights, counts)
        seen = self.seen
        unseen = sum(weights[i] * n for i, n in enumerate(counts) if n and i not in seen)
        if total <= 0 or unseen > UNSEEN_SHARE * total:
            return None
        return min(own[0], spread[0]) * SPARE

    # -- sharing and keeping ---------------------------------------------------------------
    def dump(self) -> dict[str, Any]:
        return {
            "answers": self.answers,
            "layout": LAYOUT,
            "recent": [[_sparse(x), y] for x, y in self._recent],
            "updated_at": self.updated_at,
        }

    def load(self, data: dict[str, Any]) -> None:
        """A stored or shared state (the answers; a fingerprint comes from its own store)."""
        recent = data.get("recent")
        if not isinstance(recent, list) or data.get("layout") != LAYOUT:
            return  # none, or tallies of another layout of fields
        self._recent.clear()
        for item in recent:
            try:
                sparse, y = item
                self._recent.append((_dense(sparse), int(y)))
            except (TypeError, ValueError, IndexError):
                continue
        self.answers = max(int(data.get("answers", 0)), len(self._recent))
        self.updated_at = float(data.get("updated_at", 0.0))
        self._rebuild()

    def public(self) -> dict[str, Any]:
        weights = self.weights or self.prior
        return {
            "source": self.source,
            "answers": self.answers,
            "probes": len(self._probes),
            "fingerprint": self.fingerprint,
            "weights": {f: round(w, 4) for f, w in zip(FIELDS, weights, strict=True) if w},
            "spread": {k: [round(lo, 3), round(hi, 3)] for k, (lo, hi) in self.spread.items()},
            "updated_at": self.updated_at or None,
        }


def _by_kind(
    samples: list[tuple[tuple[int, ...], int]], weights: tuple[float, ...]
) -> tuple[dict[str, list[float]], list[float]]:
    """The samples' true / estimate under `weights`, sorted: per kind of text with
    `MIN_KIND` of them at least, and all of them."""
    by_kind: dict[str, list[float]] = {}
    every: list[float] = []
    for x, y in samples:
        guess = dot(weights, x)
        if guess <= 0:
            continue
        ratio = min(max(y / guess, FLOOR), CEILING)
        by_kind.setdefault(kind_of(x, weights), []).append(ratio)
        every.append(ratio)
    out = {kind: sorted(r) for kind, r in by_kind.items() if len(r) >= MIN_KIND}
    return out, sorted(every)


def _share(every: list[float], own: list[float] | None, factor: float) -> float:
    """The share of the residuals at most `factor`: of all of them (`every`, sorted) read
    `WIDEN` wider each way (a ratio below 1 that much lower, one above 1 that much higher),
    and, for a kind with residuals of its own (`own`, sorted), of those pulled towards all
    of them as `MIN_KIND` samples would."""
    under = bisect.bisect_left(every, 1.0)
    if factor < 1:
        found = min(bisect.bisect_right(every, factor / (1 - WIDEN)), under)
    else:
        found = max(bisect.bisect_right(every, factor / (1 + WIDEN)), under)
    share = found / len(every)
    if own is None:
        return share
    return (bisect.bisect_right(own, factor) + MIN_KIND * share) / (len(own) + MIN_KIND)


def _first_past(
    points: list[float], every: list[float], own: list[float], q: float, strict: bool = False
) -> float:
    """The first of `points` (sorted) where the share of `_share` reaches `q` (or passes
    it, `strict`): the share only grows along them, so a bisection finds it."""

    def past(f: float) -> bool:
        share = _share(every, own, f)
        return share > q if strict else share >= q

    return points[min(bisect.bisect_left(points, True, key=past), len(points) - 1)]


def band_per_kind(residuals: dict[str, list[float]]) -> dict[str, tuple[float, float]]:
    """The band per kind: the 3 % and 97 % quantiles of the share `share_within` reads (its
    own residuals pulled towards all of them, widened), so that the band and the chance of
    a count agree; of all ("*"), their quantiles widened. A kind's band of its own
    residuals alone was as narrow as the few samples the fit had just been made from:
    replayed on six vocabularies with 50 answers, 10 % of held-out requests came out above
    it and 6.5 % below, 7.3 % and 4.5 % with the pull (see `share_within`)."""
    every = residuals.get("*")
    if not every:
        return {}
    low, high = _quantiles(every)
    out = {"*": (max(FLOOR, low * (1 - WIDEN)), min(CEILING, high * (1 + WIDEN)))}
    points = sorted(
        {1.0, *(r * (1 - WIDEN) for r in every if r < 1), *(r * (1 + WIDEN) for r in every)}
    )
    for kind, ratios in residuals.items():
        if kind != "*":
            at = sorted({*points, *ratios})
            low = _first_past(at, every, ratios, LOW_Q, strict=True)
            out[kind] = (low, max(_first_past(at, every, ratios, HIGH_Q), low))
    return out


def _sparse(x: tuple[int, ...]) -> list[list[int]]:
    return [[i, v] for i, v in enumerate(x) if v]


def _dense(sparse: list[list[int]]) -> tuple[int, ...]:
    x = [0] * N_FIELDS
    for i, v in sparse:
        x[int(i)] = int(v)
    return tuple(x)


def _quantiles(ratios: list[float]) -> tuple[float, float]:
    ratios = sorted(ratios)
    n = len(ratios)
    low = ratios[min(int(LOW_Q * n), n - 1)]
    high = ratios[min(math.ceil(HIGH_Q * n) - 1, n - 1)]
    return low, max(high, low)


def _solve(
    a: list[list[float]], b: list[float], prior: tuple[float, ...], ridge: float
) -> tuple[float, ...]:
    """argmin |Xw - y|^2 + sum_j ridge * A_jj (w_j - prior_j)^2, with w >= 0: fields
    without evidence keep their prior; the most negative weight is fixed at zero and the
    rest solved again, until none is; then a field held at zero whose gradient says the
    fit is better with it above zero is let go again (the first field fixed is not always
    the one that should be: of `digits` and `digit_triples`, both costing the digits of a
    long number, the one dropped first may be the one the rest of the text needs)."""
    n = len(b)
    weights = list(prior)
    free = [i for i in range(n) if a[i][i] > 0]
    held: list[int] = []
    for _ in range(2 * n):
        if not free:
            break
        solved = _ridge(a, b, prior, free, weights, ridge)
        bound = [p for p, i in enumerate(free) if i not in SIGNED]
        worst = min(bound, key=solved.__getitem__) if bound else 0
        if bound and solved[worst] < 0:
            weights[free[worst]] = 0.0
            held.append(free.pop(worst))
            continue
        for i, w in zip(free, solved, strict=True):
            weights[i] = w
        grown = _growing(a, b, prior, ridge, weights, held)
        if grown is None:
            break
        held.remove(grown)
        free.append(grown)
    return tuple(weights)


def _growing(
    a: list[list[float]],
    b: list[float],
    prior: tuple[float, ...],
    ridge: float,
    weights: list[float],
    held: list[int],
) -> int | None:
    """The field held at zero whose half gradient of the objective is the most negative,
    relative to its own evidence (`b`); None when none is."""
    best, steepest = None, 0.0
    for i in held:
        row = a[i]
        grad = sum(row[j] * w for j, w in enumerate(weights) if w) - b[i]
        grad -= ridge * _PULL[i] * row[i] * prior[i]
        relative = grad / max(abs(b[i]), 1e-12)
        if relative < min(steepest, -1e-6):
            best, steepest = i, relative
    return best


def _ridge(
    a: list[list[float]],
    b: list[float],
    prior: tuple[float, ...],
    free: list[int],
    fixed: list[float],
    ridge: float,
) -> list[float]:
    """The ridge solution over the `free` fields, the others held at `fixed`; solved in
    coordinates scaled by each field's own evidence (Jacobi), so fields whose counts differ
    by orders of magnitude (characters, requests) condition alike."""
    held = [i for i in range(len(b)) if i not in set(free)]
    scale = [math.sqrt(a[i][i]) for i in free]
    m = len(free)
    mat = [[0.0] * m for _ in range(m)]
    rhs = [0.0] * m
    for p, i in enumerate(free):
        row = a[i]
        rest = b[i] - sum(row[k] * fixed[k] for k in held if row[k])
        for q, j in enumerate(free):
            mat[p][q] = row[j] / (scale[p] * scale[q])
        pull = ridge * _PULL[i]
        mat[p][p] += pull
        rhs[p] = rest / scale[p] + pull * prior[i] * scale[p]
    z = _cholesky_solve(mat, rhs)
    return [z[p] / scale[p] for p in range(m)]


def _cholesky_solve(mat: list[list[float]], rhs: list[float]) -> list[float]:
    n = len(rhs)
    low = [[0.0] * n for _ in range(n)]
    for i in range(n):
        row_i = low[i]
        for j in range(i + 1):
            row_j = low[j]
            s = mat[i][j] - sum(row_i[k] * row_j[k] for k in range(j))
            if i == j:
                row_i[i] = math.sqrt(max(s, 1e-12))
            else:
                row_i[j] = s / row_j[j]
    y = [0.0] * n
    for i in range(n):
        y[i] = (rhs[i] - sum(low[i][k] * y[k] for k in range(i))) / low[i][i]
    x = [0.0] * n
    for i in reversed(range(n)):
        x[i] = (y[i] - sum(low[k][i] * x[k] for k in range(i + 1, n))) / low[i][i]
    return x
