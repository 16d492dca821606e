"""Text a deployment's measured spread says nothing of: a phrase said again and again, or
text that is mostly emoji by its estimated cost. Its band is wide (`UNMEASURED_LOW` to
`UNMEASURED_HIGH` of the estimate) with no spread measured inside it, so a window inside
asks for an exact count instead of placing the request by the estimate."""

from __future__ import annotations

import math
import random
from typing import Any

from fleetgate.context.estimate import ContextEstimate
from fleetgate.context.need import (
    FITTED,
    UNMEASURED_HIGH,
    UNMEASURED_LOW,
    estimate_need,
    unmeasured,
)
from fleetgate.context.placement import change_probability
from fleetgate.context.tally import REPEATED, says_again, tally_body
from fleetgate.fleet import Deployment
from fleetgate.routing.plan import Candidate
from fleetgate.testing.corpus import text_of
from tests.context.test_fitted_refusal import SETTINGS, _book, _chat, _deployments

EMOJI = "🙂🚀🎉👍🔥"


def _need(body: dict[str, Any], dep: Deployment) -> tuple[ContextEstimate, int]:
    """The estimate on `dep`'s own fit, and its central estimate of the text."""
    deps = _deployments()
    estimate, raw = estimate_need(body, "chat.completions", SETTINGS, deps, _book(deps))
    return estimate, raw[FITTED + dep.id]


def _band(body: dict[str, Any]) -> tuple[int, int, int, float | None]:
    """(low, high, central) of the text on the large deployment's fit, and how likely the
    need is at most the central estimate (None: no spread measured there)."""
    dep = _deployments()[1]
    estimate, central = _need(body, dep)
    low, high = estimate.bounds(dep)
    reserve = estimate.output_reserve
    return low - reserve, high - reserve, central, estimate.within(dep, central + reserve)


def test_a_phrase_said_again_and_again_gets_the_wide_band_without_a_spread() -> None:
    body = _chat("Please check the order status. " * 120)
    low, high, central, share = _band(body)
    assert (low, high) == (
        math.floor(central * UNMEASURED_LOW),
        math.ceil(central * UNMEASURED_HIGH),
    )
    assert share is None  # inside the band: a window there is counted
    # the same length of varied prose keeps the fit's own band, and its spread
    varied = _chat(text_of("prose", random.Random(9), len(body["messages"][0]["content"])))
    low, high, central, share = _band(varied)
    assert central * UNMEASURED_LOW < low and high < central * UNMEASURED_HIGH
    assert share is not None


def test_text_mostly_emoji_by_its_cost_gets_the_wide_band_without_a_spread() -> None:
    rng = random.Random(3)
    emoji = " ".join("".join(rng.choices(EMOJI, k=3)) for _ in range(300))
    low, high, central, share = _band(_chat(emoji))
    assert (low, high) == (
        math.floor(central * UNMEASURED_LOW),
        math.ceil(central * UNMEASURED_HIGH),
    )
    assert share is None
    # prose with an emoji here and there keeps the fit's band
    prose = text_of("prose", random.Random(9), 3000) + " 🙂🚀"
    low, high, central, share = _band(_chat(prose))
    assert central * UNMEASURED_LOW < low and share is not None


def test_a_window_inside_the_wide_band_asks_for_a_count() -> None:
    """Two windows, 1000 and 4000: a phrase said again and again estimated just over the
    small window, whose fit's band alone would place it on the large one uncounted."""
    deps = _deployments()
    text = "Please check the order status. " * 190
    estimate, raw = estimate_need(_chat(text), "chat.completions", SETTINGS, deps, _book(deps))
    central = raw[FITTED + deps[0].id] + estimate.output_reserve
    assert 1000 < central < 1000 / UNMEASURED_LOW  # the small window lies in the wide band
    candidates = [Candidate(d) for d in deps]
    assert change_probability(candidates, estimate, lambda d: d.context_window) is None


def test_says_again_tells_a_repeated_phrase_from_varied_text() -> None:
    rng = random.Random(1)
    for kind in ("prose", "code", "json", "csv", "cjk", "logs", "records", "markdown"):
        text = text_of(kind, rng, 6000).encode()
        assert not says_again(text), kind
    for unit in ("Please check the order status. ", "ok\n", "step done!\t", "ha "):
        assert says_again((unit * 500).encode()), unit
    # a system prompt of varied prose, then a phrase said over four times its length
    prompt = text_of("prose", rng, 300)
    chat = _chat("of a dataclass instance\n" * 50)
    chat["messages"].insert(0, {"role": "system", "content": prompt})
    assert says_again(tally_body(chat, "chat.completions").sample)
    # a separator and a counter, line after line (a build log)
    log = "".join(f"step {i}: ok\n" + "=" * 80 + "\n" for i in range(120)).encode()
    assert says_again(log)
    assert REPEATED <= 0.2  # JSON records and markdown tables compress to 0.2 and more


def test_the_answer_is_asked_once_per_request() -> None:
    tally = tally_body(_chat("ok " * 400), "chat.completions")
    weights = (1.0,) * len(tally.counts)
    asked: list[bool] = []
    assert unmeasured(tally, weights, 400, asked) and asked == [True]
    assert unmeasured(tally, weights, 400, asked) and asked == [True]
