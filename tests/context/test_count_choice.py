"""Which requests are counted: those whose count is likely to put another deployment first.

The decision (`placement.change_probability`) reads the measured spread of the estimate
(a fit's residuals, a usage calibration): pure tests of it, of the spreads' shares, and
through the gateway on fake engines whose usage makes the calibration's spread known.
"""

from __future__ import annotations

import random
from typing import Any

import httpx

from fleetgate.config.schema import ContextConfig
from fleetgate.context.calibration import MIN_SAMPLES, CalibrationBook
from fleetgate.context.estimate import ContextEstimate
from fleetgate.context.fit import KEEP, MIN_KIND, TokenizerFit, band_per_kind
from fleetgate.context.placement import change_probability
from fleetgate.context.refine import ContextRefiner
from fleetgate.context.tally import FIELDS, N_FIELDS
from fleetgate.execute.upstream import UpstreamPool
from fleetgate.fleet import Deployment, build_fleet
from fleetgate.ingress.profile import RequestProfile
from fleetgate.routing.plan import Candidate, RoutePlan
from tests.context.test_refine import _create
from tests.harness import Stack, fleet_config, wait_until
from tests.tiers import chat_calls, tiered_stack, words

SMALL, LARGE = 1000, 10000


def _deployments() -> list[Deployment]:
    providers = [
        {"id": p, "kind": "vllm", "base_url": f"http://127.0.0.1:9/{p}/v1"}
        for p in ("small", "large")
    ]
    deployments = [
        {"id": "small", "model": "m", "provider": "small", "context_window": SMALL},
        {"id": "large", "model": "m", "provider": "large", "context_window": LARGE},
    ]
    fleet = build_fleet(fleet_config({"providers": providers, "deployments": deployments}))
    return list(fleet.models["m"].deployments)


def _estimate(guessed: int, ratios: list[float]) -> ContextEstimate:
    """A request whose estimated part is `guessed` tokens (nothing else), the true count
    `guessed` x one of `ratios` (each as likely): its band their extremes."""
    ratios = sorted(ratios)

    def bounds(_dep: Deployment) -> tuple[int, int]:
        return int(guessed * ratios[0]), int(guessed * ratios[-1]) + 1

    def within(_dep: Deployment, tokens: int) -> float:
        return sum(guessed * r <= tokens for r in ratios) / len(ratios)

    return ContextEstimate(bounds(None)[1], 0, bounds_of=bounds, within_of=within)  # type: ignore[arg-type]


def _change(estimate: ContextEstimate) -> float | None:
    deps = _deployments()
    return change_probability([Candidate(d) for d in deps], estimate, lambda d: d.context_window)


def test_the_chance_a_count_moves_the_request_is_the_spread_below_the_small_window() -> None:
    # 900 tokens estimated; true 0.9x (810) in 19 cases of 20, 1.2x (1080) in one: the
    # band straddles the small window, the upper bound puts it on the large one, and a
    # count would move it to the small one 19 times in 20
    assert _change(_estimate(900, [0.9] * 19 + [1.2])) == 0.95
    # the same band, 1.2x in 19 cases of 20: a count would move it once in 20
    assert _change(_estimate(900, [0.9] + [1.2] * 19)) == 0.05


def test_a_window_whose_sides_place_alike_does_not_count() -> None:
    # a band around the largest window: with or without a count the large deployment is
    # first (it holds the request, or it is the biggest of those too small)
    assert _change(_estimate(9000, [0.9, 1.0, 1.2])) == 0.0
    prior = ContextEstimate(10800, 0, bounds_of=lambda _d: (8100, 10800))
    assert _change(prior) == 0.0


def test_a_band_without_a_measured_spread_leaves_the_decision_to_the_band() -> None:
    prior = ContextEstimate(1100, 0, bounds_of=lambda _d: (800, 1100))
    assert _change(prior) is None
    far = ContextEstimate(700, 0, bounds_of=lambda _d: (500, 700))
    assert _change(far) == 0.0


def _wants(estimate: ContextEstimate, min_change: float) -> bool:
    """Whether the refine stage asks for a count of a chat of `estimate` on the two tiers."""
    deps = _deployments()
    plan = RoutePlan("m", "explicit", [Candidate(d) for d in deps])
    plan.window_of = lambda d: d.context_window
    profile = RequestProfile("openai", "chat.completions", "m", False, {}, context=estimate)
    settings = ContextConfig.model_validate({"refine": {"min_change": min_change}})
    return ContextRefiner(UpstreamPool()).wants(plan, profile, settings)


def test_a_window_outside_the_band_is_counted_when_its_chance_is_measured_as_likely() -> None:
    # 1,100 tokens estimated; the measured spread puts the true count at 0.85x (935: fits
    # the small window) once in 40 and at 1.0-1.2x otherwise. The band is the spread's 3 %
    # to 97 %, 1,100 and up: the small window lies under it, yet the request fits there
    # 2.5 % of the time, over the 2 % a count is asked for, and the band must not rule it
    # out before its chance is read
    ratios = [0.85] + [1.0 + 0.2 * i / 38 for i in range(39)]

    def band(_dep: Deployment) -> tuple[int, int]:
        return 1100, 1321

    def within(_dep: Deployment, tokens: int) -> float:
        return sum(1100 * r <= tokens for r in ratios) / len(ratios)

    estimate = ContextEstimate(1321, 0, bounds_of=band, within_of=within)
    assert within(_deployments()[0], SMALL) == 0.025
    assert _wants(estimate, 0.02)
    assert not _wants(estimate, 0.05)  # less likely than the operator's threshold
    # a spread that never reaches the small window: nothing to count
    far = ContextEstimate(1321, 0, bounds_of=band, within_of=lambda _d, t: float(t >= 1100))
    assert not _wants(far, 0.02)


def test_a_fits_residuals_give_the_share_within_per_kind_of_text() -> None:
    fit = TokenizerFit(tuple(1.0 if f == "chars" else 0.0 for f in FIELDS))
    chars = FIELDS.index("chars")
    rng = random.Random(3)
    for _ in range(KEEP):
        x = [0] * N_FIELDS
        x[chars] = rng.randint(200, 2000)
        fit.add(tuple(x), round(x[chars] * rng.choice((0.8, 1.0, 1.2))))
    fit.refit()
    counts = tuple(1000 if i == chars else 0 for i in range(N_FIELDS))
    assert len(fit.residuals["prose"]) >= MIN_KIND
    factor = 1000 / fit.tokens(counts)  # the fitted weight is near 1.0: ratios ~0.8..1.2
    assert 0.25 < fit.share_within(counts, 0.9 * factor) < 0.45
    assert fit.share_within(counts, 0.5) == 0.0 and fit.share_within(counts, 1.5) == 1.0
    shares = [fit.share_within(counts, f / 100) for f in range(50, 150)]
    assert shares == sorted(shares)


def test_a_kind_without_its_own_residuals_takes_all_of_them_widened_and_in_order() -> None:
    fit = TokenizerFit(tuple(1.0 if f == "chars" else 0.0 for f in FIELDS))
    chars, digits = FIELDS.index("chars"), FIELDS.index("digits")
    for n in range(MIN_KIND * 4):
        x = [0] * N_FIELDS
        x[chars] = 500 + n
        fit.add(tuple(x), 500 + n + (n % 5) * 10)
    fit.refit()
    counts = tuple(900 if i == digits else 0 for i in range(N_FIELDS))
    assert "digits" not in fit.residuals
    shares = [fit.share_within(counts, f / 1000) for f in range(800, 1200)]
    assert shares == sorted(shares) and shares[0] == 0.0 and shares[-1] == 1.0


def test_the_first_answers_add_to_the_fingerprints_spread_rather_than_replace_it() -> None:
    # probes the fit costs 0.8 to 1.2 times their count; then one answer it costs right:
    # the spread was that one answer's (a band of one token), it stays the probes' and its
    fit = TokenizerFit(tuple(1.0 if f == "chars" else 0.0 for f in FIELDS))
    chars = FIELDS.index("chars")

    def text(n: int) -> tuple[int, ...]:
        return tuple(n if i == chars else 0 for i in range(N_FIELDS))

    rng = random.Random(5)
    probes = [(text(n), round(n * rng.uniform(0.8, 1.2))) for n in range(100, 3300, 100)]
    fit.set_fingerprint("engine", probes)
    wide = fit.spread["*"]
    fit.add(text(1000), fit.tokens(text(1000)))
    fit.refit()
    low, high = fit.spread["*"]
    assert low < 0.9 and high > 1.1 and (low, high) != (1.0, 1.0)
    assert abs(low - wide[0]) < 0.05 and abs(high - wide[1]) < 0.05


def test_a_kinds_few_residuals_are_pulled_towards_all_of_them() -> None:
    # ten prose samples the fit costs 5 % under; all samples spread from 0.8 to 1.2: a
    # prose request the fit costs right is still possible (the residuals are the samples
    # the fit was made from), though less likely than for a text of no kind of its own
    fit = TokenizerFit(tuple(1.0 if f == "chars" else 0.0 for f in FIELDS))
    fit.weights = fit.prior
    every = sorted([1.05] * 10 + [0.8 + 0.01 * i for i in range(41)])
    fit.residuals = {"prose": [1.05] * 10, "*": every}
    prose = tuple(1000 if f == "chars" else 0 for f in FIELDS)
    at_one = fit.share_within(prose, 1.0)
    assert 0.1 < at_one < 0.5
    assert at_one < fit.share_within(prose, 1.06) < fit.share_within(prose, 1.3) == 1.0
    assert fit.share_within(prose, 0.7) == 0.0


def test_a_kinds_band_is_what_its_chance_of_fitting_reads() -> None:
    # twelve prose samples the fit costs right, and digits it costs 0.8 to 1.25 times their
    # count: the prose band was the twelve alone (one token wide); pulled towards all the
    # residuals as the chance of fitting is, it is wider, and its ends are the chance's
    # 3 % and 97 % (a window just inside it is weighed, not taken as certain)
    fit = TokenizerFit(tuple(1.0 if f in ("chars", "digits") else 0.0 for f in FIELDS))
    fit.weights = fit.prior
    every = sorted([1.0] * 12 + [0.8 + 0.01 * i for i in range(46)])
    fit.residuals = {"prose": [1.0] * 12, "*": every}
    fit.spread = band_per_kind(fit.residuals)
    prose = tuple(1000 if f == "chars" else 0 for f in FIELDS)
    low, high = fit.factors(prose)
    assert low < 0.9 and high > 1.1
    assert fit.share_within(prose, high) >= 0.97 > fit.share_within(prose, high - 0.005)
    assert fit.share_within(prose, low) > 0.03 >= fit.share_within(prose, low - 0.005)
    # a kind of many samples keeps nearly its own band
    fit.residuals = {"prose": [0.99, 1.01] * 200, "*": every}
    fit.spread = band_per_kind(fit.residuals)
    low, high = fit.factors(prose)
    assert 0.95 < low <= 0.99 and 1.01 <= high < 1.05


def test_a_calibrations_share_within_follows_its_samples() -> None:
    book = CalibrationBook()
    assert book.share_within("d", 1.0) is None
    for i in range(MIN_SAMPLES * 5):
        book.observe("d", 0.8 if i % 4 == 0 else 1.1, now=float(i))
    assert book.share_within("d", 0.7) == 0.0
    assert 0.2 < (book.share_within("d", 0.9) or 0.0) < 0.3
    assert book.share_within("d", 1.5) == 1.0


# Through the gateway. The fake engine counts words; the generic estimate costs a word of
# eight digits about 10 times its count (the calibration takes no ratio below 0.5), and "中"
# set apart by spaces about once: two kinds of answers give the base deployment's
# calibration two ratios. A request of 120 such numbers is then estimated at 1,291 tokens
# (a band from about 650 to 1,300) and needs 121 + 10: the spread says how likely it fits
# the base window of 1,000, and only a count shows that it does.
NUMBERS = [{"role": "user", "content": words(120, "12345678")}]


def _calibrate(stack: Stack, client: Any, low_ones: int, high_ones: int) -> None:
    for i in range(low_ones + high_ones):  # each estimated within the base window
        text = words(60, "12345678") if i < low_ones else words(300, "中")
        client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": text}], max_tokens=10
        )
    book = stack.gateway.pipeline.state.calibration
    wait_until(lambda: book.calibrated("base") is not None, 5, "base calibrated")


def _ask(client: Any) -> Any:
    return _create(client, NUMBERS)


def _assert_counted_on_base(resp: Any, base: Any) -> None:
    """The request was counted (121 + 10 tokens) and placed on the base window."""
    assert resp.headers["x-fleetgate-context-estimate"] == "131; exact"
    assert resp.headers["x-fleetgate-route"] == "base"
    assert base.tokenize_calls == 1


def test_a_request_unlikely_to_move_is_not_counted_and_goes_where_the_estimate_says(
    stack: Stack, client_for
) -> None:
    # one answer in 23 was far under its estimate, so the band reaches below the base
    # window, yet a request fits there once in 23: under a threshold of 0.05, no count, the
    # large window takes it (23 answers: one more and the deployment's own fit of its
    # tokenizer would decide)
    base, _long = tiered_stack(stack, {"refine": {"min_change": 0.05}})
    client = client_for(stack)
    _calibrate(stack, client, 1, 22)
    base.reset_counters()
    resp = _ask(client)
    assert resp.headers["x-fleetgate-context-estimate"].endswith("; estimate")
    assert resp.headers["x-fleetgate-route"] == "m@long"
    assert base.tokenize_calls == 0 and chat_calls(base) == 0


def test_min_change_zero_counts_whenever_a_window_lies_in_the_band(
    stack: Stack, client_for
) -> None:
    base, _long = tiered_stack(stack, {"refine": {"min_change": 0}})
    client = client_for(stack)
    _calibrate(stack, client, 1, 22)
    base.reset_counters()
    resp = _ask(client)
    _assert_counted_on_base(resp, base)


def test_a_request_that_moves_once_in_23_is_counted(stack: Stack, client_for) -> None:
    # one answer in 23 far under its estimate: the request fits the base window once in
    # 23, which the default threshold (0.02) counts (0.05 did not: a JSON request needing
    # exactly the small window, at 0.049, went to the large one)
    base, _long = tiered_stack(stack)
    client = client_for(stack)
    _calibrate(stack, client, 1, 22)
    base.reset_counters()
    resp = _ask(client)
    _assert_counted_on_base(resp, base)
    record = httpx.get(f"{stack.url}/v1/requests/{resp.headers['x-request-id']}").json()
    assert 0.02 <= record["notes"]["context_change_probability"] < 0.05


def test_a_request_likely_to_move_is_counted(stack: Stack, client_for) -> None:
    base, _long = tiered_stack(stack)
    client = client_for(stack)
    _calibrate(stack, client, 10, 10)  # the two ratios as likely: fits half the time
    base.reset_counters()
    resp = _ask(client)
    _assert_counted_on_base(resp, base)


# A refusal pending: the long deployment's calibration says numbers cost half their
# estimate (22 answers of numbers; the calibration takes no ratio below 0.5) and "中" set
# apart by spaces 1.16 times (one answer, the oldest). 1,150 numbers are estimated at 11,832
# tokens, a band of 5,900 to 13,800 around the long window of 10,000: the upper bound fits
# nowhere, yet the request fits the long window 22 times in 23 (it needs 1,151 + 10).
LONG_NUMBERS = [{"role": "user", "content": words(1150, "12345678")}]


def _calibrate_long(stack: Stack, client: Any, texts: list[str] | None = None) -> None:
    """Answers of the long deployment: `texts`, by default "中" then numbers (above)."""
    if texts is None:
        texts = [words(1200, "中")] + [words(300, "12345678")] * 22
    for text in texts:  # each estimated over the base window: answered by the long one
        client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": text}], max_tokens=10
        )
    book = stack.gateway.pipeline.state.calibration
    wait_until(lambda: book.calibrated("m@long") is not None, 5, "long calibrated")


def test_a_refusal_unlikely_to_be_due_is_not_counted_and_the_engine_decides(
    stack: Stack, client_for
) -> None:
    # due once in 23, under a threshold of 0.05
    base, long = tiered_stack(stack, {"refine": {"min_change": 0.05}}, context_guard="reject")
    client = client_for(stack)
    _calibrate_long(stack, client)
    base.reset_counters()
    long.reset_counters()
    resp = client.chat.completions.with_raw_response.create(
        model="m", messages=LONG_NUMBERS, max_tokens=10
    )
    assert resp.headers["x-fleetgate-context-estimate"].endswith("; estimate")
    assert resp.headers["x-fleetgate-route"] == "m@long"
    assert base.tokenize_calls == 0 and long.tokenize_calls == 0
    record = httpx.get(f"{stack.url}/v1/requests/{resp.headers['x-request-id']}").json()
    assert record["notes"]["context_guard"] == "not_counted"
    assert record["notes"]["context_change_probability"] < 0.05


def test_a_refusal_likely_to_be_due_waits_for_the_count(stack: Stack, client_for) -> None:
    base, _long = tiered_stack(stack, context_guard="reject")
    client = client_for(stack)
    _calibrate_long(stack, client)
    base.reset_counters()
    # 2,000 numbers: estimated 20,600, so even the calibration's least ratio (0.5) puts
    # them beyond the long window: a count would refuse them, so it is made (and shows
    # 2,001 + 10: routed, not refused)
    resp = client.chat.completions.with_raw_response.create(
        model="m", messages=[{"role": "user", "content": words(2000, "12345678")}], max_tokens=10
    )
    assert resp.headers["x-fleetgate-context-estimate"] == "2011; exact"
    assert resp.headers["x-fleetgate-route"] == "m@long"
    assert base.tokenize_calls == 1  # the base tier counts


# Near the top of the largest window: the long deployment's calibration has seen requests
# of 1,200 "中" set apart by spaces (12 answers, each 1.15 times its estimate, the template's
# fixed cost included), so it bounds such a request at 1.16 times its estimate. One of 10,250
# is estimated at about 8,370 tokens and bounded at about 9,720, under the long window of
# 10,000 (within 3 % of it), yet needs 10,251 + 10: the fixed cost the estimate spreads over
# the text is a smaller part of it. Uncounted, it went to the long engine, which refused it
# (a real engine whose window holds the prompt alone cuts the answer short instead).
HAN_ONLY = [words(1200, "中")] * 12


def test_a_request_bounded_just_under_the_largest_window_is_counted_and_refused(
    stack: Stack, client_for
) -> None:
    base, long = tiered_stack(stack, context_guard="reject")
    _calibrate_long(stack, client_for(stack), HAN_ONLY)
    base.reset_counters()
    long.reset_counters()
    resp = httpx.post(
        f"{stack.url}/v1/chat/completions",
        json={
            "model": "m",
            "messages": [{"role": "user", "content": words(10250, "中")}],
            "max_tokens": 10,
        },
        timeout=30,
    )
    assert resp.status_code == 400, resp.text
    assert resp.json()["error"]["code"] == "context_too_large"
    assert base.tokenize_calls == 1  # the base tier counted
    assert chat_calls(long) == 0 and chat_calls(base) == 0


def test_a_request_bounded_well_under_the_largest_window_is_not_counted(
    stack: Stack, client_for
) -> None:
    base, _long = tiered_stack(stack, context_guard="reject")
    client = client_for(stack)
    _calibrate_long(stack, client, HAN_ONLY)
    base.reset_counters()
    resp = client.chat.completions.with_raw_response.create(
        model="m", messages=[{"role": "user", "content": words(8000, "中")}], max_tokens=10
    )
    assert resp.headers["x-fleetgate-context-estimate"].endswith("; estimate")
    assert resp.headers["x-fleetgate-route"] == "m@long"
    assert base.tokenize_calls == 0
