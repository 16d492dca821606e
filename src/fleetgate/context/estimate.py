"""The context a request needs, estimated the way tokenizers count.

One walk over the body tallies its text by character class (see `tally.py`); a tokenizer
family (`families.py`) turns the tally into tokens with a dot product; each image or audio
part costs a fixed reserve. The output reserve is the request's own limit
(`max_completion_tokens`, `max_tokens`, `max_output_tokens`, Ollama `options.num_predict`)
or a configured default. Pure and cheap (see benchmarks/bench_estimate.py).

An estimate is a band, not a number: per deployment, `bounds(dep)` gives the fewest and the
most tokens the request can need there, from the family's measured spread or, once answers
have reported their usage, from the deployment's calibration (`calibration.py`). An exact
count collapses the band. `floor(dep)` is the fewest tokens that is evidence (a refusal, a
silent worker left out): the low bound with runs of a repeated character costed as one
character (see `tally.py`), which the family's spread alone does not cover.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from fleetgate.config.schema import ContextConfig
from fleetgate.context.families import FAMILIES, Family
from fleetgate.context.tally import TOKEN_IDS, WORDS, Tally, tally_body

if TYPE_CHECKING:
    from fleetgate.fleet import Deployment

_OUTPUT_FIELDS = ("max_completion_tokens", "max_tokens", "max_output_tokens")
# endpoints that generate no output tokens
_NO_OUTPUT = frozenset({"embeddings", "ollama.embed", "ollama.embeddings"})

# (low, high) total tokens a request needs on one deployment
BoundsOf = Callable[["Deployment"], tuple[int, int]]
# how likely a request needs at most this many tokens on one deployment, from the measured
# spread of its estimate (a fit's residuals, a usage calibration); None: none was measured
WithinOf = Callable[["Deployment", int], float | None]


@dataclass(frozen=True, slots=True)
class ContextEstimate:
    """Tokens a request needs: its input side plus the output it may generate."""

    prompt_tokens: int  # text, token ids, tool schemas, template overhead, media reserves
    output_reserve: int
    exact: bool = False  # True when prompt_tokens came from a tokenizer
    media_parts: int = 0  # image and audio parts; an exact count skips such requests
    tally: Tally | None = field(default=None, compare=False, repr=False)
    # per deployment (low, high) totals; None: `total` is the need everywhere
    bounds_of: BoundsOf | None = field(default=None, compare=False, repr=False)
    # per deployment and number of tokens, how likely the need is at most that; None: the
    # band alone tells (see `within`)
    within_of: WithinOf | None = field(default=None, compare=False, repr=False)
    # per deployment the fewest tokens for any text (runs collapsed); None: the low bound
    floor_of: Callable[[Deployment], int] | None = field(default=None, compare=False, repr=False)
    # per deployment whether its band rests on its own evidence (a fitted tokenizer: a
    # fingerprint or enough answers), not on a family's prior; None: on none
    own_of: Callable[[Deployment], bool] | None = field(default=None, compare=False, repr=False)
    # per deployment the fewest tokens its own fitted evidence allows, with room to spare;
    # None (the function or its value): no such evidence
    fitted_floor_of: Callable[[Deployment], int | None] | None = field(
        default=None, compare=False, repr=False
    )
    # the words of the request's text counted whole, where the tally's came from a sample
    # of a long text; None: not known (`least` then counts none)
    words_of: Callable[[], int] | None = field(default=None, compare=False, repr=False)

    @property
    def total(self) -> int:
        return self.prompt_tokens + self.output_reserve

    def bounds(self, dep: Deployment) -> tuple[int, int]:
        """(fewest, most) tokens the request needs on `dep`."""
        if self.exact or self.bounds_of is None:
            return self.total, self.total
        return self.bounds_of(dep)

    def high(self, dep: Deployment) -> int:
        return self.bounds(dep)[1]

    def low(self, dep: Deployment) -> int:
        return self.bounds(dep)[0]

    def within(self, dep: Deployment, tokens: int) -> float | None:
        """How likely the request needs at most `tokens` on `dep`: the share of the measured
        spread of its estimate there (its fit's residuals for this kind of text, else its
        usage calibration) that stays within; 0 or 1 outside the band; None inside a band
        no spread was measured for (the family's prior)."""
        if self.exact or self.bounds_of is None:
            return 1.0 if self.total <= tokens else 0.0
        if self.within_of is not None:
            return self.within_of(dep, tokens)
        low, high = self.bounds_of(dep)
        return 0.0 if tokens < low else 1.0 if tokens >= high else None

    def floor(self, dep: Deployment) -> int:
        """The fewest tokens the request can need on `dep`, whatever its text: evidence."""
        if self.exact or self.floor_of is None:
            return self.low(dep)
        return min(self.floor_of(dep), self.low(dep))

    def fitted_floor(self, dep: Deployment) -> int | None:
        """The fewest tokens the request needs on `dep` by the deployment's own fitted
        tokenizer (a fingerprint or enough answers, never a family's table), with room to
        spare; None where that evidence does not cover the request (see `need.py`)."""
        if self.exact:
            return self.total
        if self.fitted_floor_of is None:
            return None
        return self.fitted_floor_of(dep)

    def own(self, dep: Deployment) -> bool:
        """Whether the band on `dep` rests on the deployment's own evidence."""
        return self.exact or (self.own_of is not None and self.own_of(dep))

    def least(self) -> int:
        """The fewest tokens the request can need on any tokenizer that splits text at
        whitespace (byte-level BPE, SentencePiece): a word is a token at least. A rule, not
        a fit: evidence whatever the tokenizer, so its words are counted, never scaled up
        from a sample (`Tally.whole_words`, else `words_of`)."""
        if self.exact or self.tally is None:
            return self.total
        counts = self.tally.counts
        if self.tally.whole_words:
            words = counts[WORDS]
        else:
            words = self.words_of() if self.words_of is not None else 0
        return words + counts[TOKEN_IDS] + self.output_reserve

    def header(self) -> str:
        """The value of X-Fleetgate-Context-Estimate, e.g. `1234; estimate`."""
        return f"{self.total}; {'exact' if self.exact else 'estimate'}"


def _positive(value: Any) -> int | None:
    if type(value) is int and value > 0:
        return value
    return None


def output_reserve(body: dict[str, Any], endpoint: str, default: int) -> int:
    """The output tokens the request may generate."""
    if endpoint in _NO_OUTPUT:
        return 0
    for name in _OUTPUT_FIELDS:
        value = _positive(body.get(name))
        if value is not None:
            return value
    options = body.get("options")
    if isinstance(options, dict):
        value = _positive(options.get("num_predict"))
        if value is not None:
            return value
    return default


def with_margin(tokens: int, known: int, settings: ContextConfig) -> int:
    """`tokens`, of which `known` are token ids (exact), with the margin on the rest."""
    if settings.margin_percent and tokens > known:
        guessed = math.ceil((tokens - known) * (1 + settings.margin_percent / 100))
        return guessed + known
    return tokens


def text_tokens(tally: Tally, family: Family, settings: ContextConfig) -> int:
    """The family's estimate of the text and template part (no media), margin included on
    what is estimated (token ids are counted as they are)."""
    return with_margin(family.tokens(tally.counts), tally.counts[TOKEN_IDS], settings)


def media_tokens(tally: Tally, settings: ContextConfig) -> int:
    return tally.images * settings.image_tokens + tally.audio * settings.audio_tokens


def estimate_context_tokens(
    body: dict[str, Any],
    endpoint: str,
    settings: ContextConfig,
    family: str = "generic",
) -> ContextEstimate:
    """The context a request needs on a deployment of `family` (its central estimate)."""
    tally = tally_body(body, endpoint)
    prompt = text_tokens(tally, FAMILIES[family], settings) + media_tokens(tally, settings)
    reserve = output_reserve(body, endpoint, settings.default_output_reserve)
    return ContextEstimate(prompt, reserve, media_parts=tally.images + tally.audio, tally=tally)
