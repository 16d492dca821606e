"""What a request needs on each deployment: its estimate as a (low, high) band.

Once a deployment has its own evidence about its tokenizer (a fitted `TokenizerFit`: a
fingerprint of its engine, or enough answers; see `fit.py`), its fitted weights cost the
request's tally and the fit's residual spread for this kind of text bounds the true count,
but for text those residuals say nothing of (a phrase said again and again, text mostly
emoji: `unmeasured`), whose band is wide and has no spread measured inside it.
Until then the family of the deployment (`tokenizer_family`, or inferred from the model
name) is the prior: its weights cost the tally, and the deployment's usage calibration (or,
until it has one, the family's measured spread clamped to `refine.band_low` / `band_high`)
bounds it. Evidence wins: a calibrated band is used as learned (within the calibration's
[0.5, 2]), never clamped into the prior's, and never empty. Margin and band apply to what is
estimated: token ids are exact, media parts fixed reserves. One tally, one dot product per
family or fit, a cache per deployment.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from fleetgate.config.schema import ContextConfig
from fleetgate.context.calibration import CalibrationBook
from fleetgate.context.estimate import (
    BoundsOf,
    ContextEstimate,
    WithinOf,
    media_tokens,
    output_reserve,
    text_tokens,
    with_margin,
)
from fleetgate.context.families import FAMILIES
from fleetgate.context.fit import TEMPLATE_FIELDS, TokenizerFit
from fleetgate.context.tally import (
    FOUR_BYTE,
    MESSAGES,
    PLAIN_ROLES,
    TOKEN_IDS,
    WORDS,
    Tally,
    says_again,
    tally_body,
    variety,
)
from fleetgate.fleet import Deployment

FITTED = "@"  # a key of the central estimates: a deployment's own fit, not a family
# a text whose compressed size is under this share of its size says the same thing again
# and again (`tally.variety`): no fit refuses it uncounted. Prose, code and data compress
# to 0.3-0.6; one phrase said again and again to under 0.1
VARIED = 0.25
# text a fit's residuals say nothing of (see `unmeasured`): its band on a deployment's own
# fit, with no spread measured inside it, so that a window in it asks for a count (as on a
# family's prior). A phrase said again and again cost 0.82 of its fitted estimate on Phi-3,
# a text of emoji 0.56 on Qwen2, each outside the fit's band for its kind of text
UNMEASURED_LOW, UNMEASURED_HIGH = 0.5, 1.4
# emoji whose estimated cost is this share of the estimate at least: an emoji costs one token
# to eight (sequences joined by U+200D, skin tones, flags), so their average tells little
EMOJI_SHARE = 0.4


def family_tokens(tally: Tally, family: str, settings: ContextConfig) -> int:
    """The family's central estimate of the text and template tokens (no media)."""
    fam = FAMILIES[family]
    tokens = text_tokens(tally, fam, settings)
    if settings.message_overhead is not None:  # the operator's per-message cost instead
        tokens += round(
            tally.counts[MESSAGES] * (settings.message_overhead - fam.weights[MESSAGES])
        )
    return max(tokens, 0)


def bounds_function(
    tally: Tally, reserve: int, settings: ContextConfig, book: CalibrationBook | None
) -> tuple[BoundsOf, dict[str, int], WithinOf]:
    """(bounds per deployment, the central estimate per family asked so far, and per
    deployment whose own fit estimated, under `FITTED` + its id; how likely the request
    needs at most a number of tokens on a deployment)."""
    raw: dict[str, int] = {}
    cache: dict[str, tuple[int, int]] = {}
    # per deployment: the estimated part, and what measured its spread (a fit, a calibration)
    basis: dict[str, tuple[int, TokenizerFit | bool]] = {}
    known = tally.counts[TOKEN_IDS] + media_tokens(tally, settings) + reserve
    ids = tally.counts[TOKEN_IDS]
    band_low, band_high = settings.refine.band_low, settings.refine.band_high
    repeated: list[bool] = []  # `says_again`, asked once (a band that was measured needs it)

    def bounds(dep: Deployment) -> tuple[int, int]:
        found = cache.get(dep.id)
        if found is not None:
            return found
        family = dep.tokenizer_family
        tokens = raw.get(family)
        if tokens is None:  # the prior's estimate (what the usage calibration learns from)
            tokens = raw[family] = family_tokens(tally, family, settings)
        fit = book.own_fit(dep.id) if book is not None else None
        if fit is not None:  # the deployment's own evidence
            assert fit.weights is not None
            guessed = with_margin(fit.tokens(tally.counts), 0, settings)
            raw[FITTED + dep.id] = guessed + ids
            low, high = fit.factors(tally.counts)
            if unmeasured(tally, fit.weights, guessed, repeated):
                low, high = min(low, UNMEASURED_LOW), max(high, UNMEASURED_HIGH)
                basis[dep.id] = (guessed, False)
            else:
                basis[dep.id] = (guessed, fit)
        else:  # the family's prior, calibrated by usage when it has been
            guessed = tokens - ids
            calibrated = book.calibrated(dep.id) if book is not None else None
            if calibrated is None:
                prior_low, prior_high = FAMILIES[family].spread
                low, high = max(prior_low, band_low), min(prior_high, band_high)
                high = max(high, low)
            else:
                low, high = calibrated
            basis[dep.id] = (guessed, calibrated is not None)
        found = (math.floor(guessed * low) + known, math.ceil(guessed * high) + known)
        cache[dep.id] = found
        return found

    def within(dep: Deployment, tokens: int) -> float | None:
        low, high = bounds(dep)
        guessed, measured = basis[dep.id]
        if guessed <= 0:  # nothing estimated: the need is known
            return 1.0 if tokens >= low else 0.0
        factor = (tokens - known) / guessed
        if isinstance(measured, TokenizerFit):
            return measured.share_within(tally.counts, factor)
        if measured and book is not None:
            return book.share_within(dep.id, factor)
        # the prior's band: no distribution was measured inside it
        return 0.0 if tokens < low else 1.0 if tokens >= high else None

    return bounds, raw, within


def unmeasured(
    tally: Tally, weights: tuple[float, ...], guessed: int, repeated: list[bool] | None = None
) -> bool:
    """Whether a fit's residuals, measured on varied text, say nothing of this text: it says
    one thing again and again (`says_again`: it costs what its few pieces cost), or its
    emoji make `EMOJI_SHARE` of the estimate `guessed` at least (by the fit's `weights`).
    `repeated` keeps the first answer of `says_again`, which costs a compression of the
    text's sample when the sample repeats its own end."""
    emoji = tally.counts[FOUR_BYTE]
    if emoji and weights[FOUR_BYTE] * emoji >= EMOJI_SHARE * max(guessed, 1):
        return True
    if repeated is None:
        return says_again(tally.sample)
    if not repeated:
        repeated.append(says_again(tally.sample))
    return repeated[0]


def _own_function(book: CalibrationBook | None) -> Callable[[Deployment], bool] | None:
    if book is None:
        return None
    return lambda dep: book.own_fit(dep.id) is not None


def estimate_need(
    body: dict[str, Any],
    endpoint: str,
    settings: ContextConfig,
    deployments: list[Deployment],
    book: CalibrationBook | None,
) -> tuple[ContextEstimate, dict[str, int]]:
    """The request's estimate for these deployments: the header shows the largest upper
    bound among them; `bounds(dep)` gives each one's band."""
    tally = tally_body(body, endpoint)
    reserve = output_reserve(body, endpoint, settings.default_output_reserve)
    bounds, raw, within = bounds_function(tally, reserve, settings, book)
    high = max((bounds(d)[1] for d in deployments), default=reserve)
    collapsed = _Collapsed(body, endpoint, reserve, settings, book)
    estimate = ContextEstimate(
        high - reserve,
        reserve,
        media_parts=tally.images + tally.audio,
        tally=tally,
        bounds_of=bounds,
        within_of=within,
        floor_of=collapsed.floor,
        own_of=_own_function(book),
        fitted_floor_of=collapsed.fitted_floor,
        words_of=collapsed.words,
    )
    return estimate, raw


class _Collapsed:
    """The body tallied with its runs collapsed, walked on first use only (a refusal or a
    silent worker's exclusion is in question, not every request): the low bound of its
    band, and the fewest tokens a deployment's own fit allows."""

    __slots__ = (
        "_body",
        "_book",
        "_bounded",
        "_bounded_done",
        "_bounds",
        "_endpoint",
        "_reserve",
        "_settings",
        "_tally",
        "_variety",
    )

    def __init__(
        self,
        body: dict[str, Any],
        endpoint: str,
        reserve: int,
        settings: ContextConfig,
        book: CalibrationBook | None,
    ) -> None:
        self._body, self._endpoint, self._reserve = body, endpoint, reserve
        self._settings, self._book = settings, book
        self._tally: Tally | None = None
        self._bounds: BoundsOf | None = None
        # what the fitted floor bounds, and its collapsed tally (`_bounded_text`)
        self._bounded: tuple[dict[str, Any], Tally] | None = None
        self._bounded_done = False
        self._variety: float | None = None  # of what the fitted floor bounds

    def tally(self) -> Tally:
        if self._tally is None:
            self._tally = tally_body(self._body, self._endpoint, collapsed=True)
        return self._tally

    def words(self) -> int:
        """The words of the text, counted whole (the collapsed tally's: collapsing runs of
        one character that is no letter leaves every word)."""
        return self.tally().counts[WORDS]

    def floor(self, dep: Deployment) -> int:
        if self._bounds is None:
            bounds, _raw, _within = bounds_function(
                self.tally(), self._reserve, self._settings, self._book
            )
            self._bounds = bounds
        return self._bounds(dep)[0]

    def fitted_floor(self, dep: Deployment) -> int | None:
        """The fit's estimate of the collapsed tally, its emoji left out, times its lowest
        residual for this kind of text, with room to spare (`TokenizerFit.lowest`), plus
        what is known (token ids, media reserves, the output reserve). Of a request that
        is no plain chat or prompt (`_plain`: tools, tool calls and results, media, other
        fields), only its user turns' text is bounded (`_user_turns`): every template
        renders that as it is. None without a fit of the deployment's own, where its
        residuals do not cover the text, for a request without a user turn of text, or for
        a text that says the same thing again and again (`variety` under `VARIED`): its
        cost is what its few pieces cost, which no average measured on varied text bounds.
        An emoji costs one token to eight (sequences joined by U+200D, skin tones, flags),
        so none is costed at all."""
        fit = self._book.own_fit(dep.id) if self._book is not None else None
        if fit is None:
            return None
        bounded = self._bounded_text()
        if bounded is None:
            return None
        text, tally = bounded
        factor = fit.lowest(tally.counts)
        if factor is None:
            return None
        if self._variety is None:
            self._variety = variety(text, self._endpoint)
        if self._variety < VARIED:
            return None
        counts = tally.counts
        if counts[FOUR_BYTE]:
            counts = (*counts[:FOUR_BYTE], 0, *counts[FOUR_BYTE + 1 :])
        known = counts[TOKEN_IDS] + media_tokens(tally, self._settings) + self._reserve
        return math.floor(fit.tokens(counts) * factor) + known

    def _bounded_text(self) -> tuple[dict[str, Any], Tally] | None:
        """What the fitted floor bounds, and its collapsed tally: the whole body when it is
        plain, else its user turns' text (None: it has none)."""
        if not self._bounded_done:
            self._bounded_done = True
            if _plain(self._body):
                self._bounded = (self._body, self.tally())
            elif (turns := _user_turns(self._body)) is not None:
                self._bounded = (turns, _text_alone(tally_body(turns, self._endpoint, True)))
        return self._bounded


def _text_alone(tally: Tally) -> Tally:
    """`tally` without the template's fields: the user turns taken from a request are not
    the chat a template renders (that one had a system turn, or tools in place of the
    default system prompt Qwen2.5's or SmolLM3's writes into a chat without one, 217
    tokens on the latter), so only their text bounds it."""
    counts = tuple(0 if i in TEMPLATE_FIELDS else n for i, n in enumerate(tally.counts))
    return replace(tally, counts=counts)


def _user_turns(body: dict[str, Any]) -> dict[str, Any] | None:
    """A chat of the text of `body`'s user turns alone (None: it has none). Whatever else a
    template renders of a request (tool schemas, calls and results, media, reasoning) or
    drops, it renders each user turn's text as it is: a lower bound of the prompt."""
    messages = body.get("messages")
    if not isinstance(messages, list):
        return None
    turns = []
    for message in messages:
        if not isinstance(message, dict) or message.get("role") != "user":
            continue
        content = message.get("content")
        if isinstance(content, list):  # its text parts, as they are (media left out)
            content = [
                {"type": "text", "text": p["text"]}
                for p in content
                if isinstance(p, dict)
                and p.get("type") == "text"
                and isinstance(p.get("text"), str)
            ]
        if content and isinstance(content, (str, list)):
            turns.append({"role": "user", "content": content})
    return {"messages": turns} if turns else None


def _plain(body: dict[str, Any]) -> bool:
    """A chat of text turns only, or a prompt of text: what every template renders as it
    is. Tool schemas, tool calls and their results, reasoning and other fields of a
    message are what a template renders its own way or drops (one drops tool schemas,
    Qwen3's drops earlier turns' reasoning), so a fit's residuals over other requests do
    not bound them from below."""
    if body.get("tools") or body.get("functions"):
        return False
    messages = body.get("messages")
    if messages is None:
        return isinstance(body.get("prompt") or body.get("input"), str)
    if not isinstance(messages, list):
        return False
    for message in messages:
        if not isinstance(message, dict) or message.get("role") not in PLAIN_ROLES:
            return False
        if any(value for key, value in message.items() if key not in ("role", "content")):
            return False
        content = message.get("content")
        if isinstance(content, list):
            if not all(isinstance(p, dict) and p.get("type") == "text" for p in content):
                return False
        elif not isinstance(content, str):
            return False
    return True
