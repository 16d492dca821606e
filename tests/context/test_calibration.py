"""Calibration from usage: bounded, decayed quantiles, learned from real answers."""

from __future__ import annotations

import random

from fleetgate.context.calibration import (
    CEILING,
    FLOOR,
    MAX_SHARED_ANSWERS,
    MIN_SAMPLES,
    CalibrationBook,
)
from fleetgate.context.refine import TEMPLATE_NOTE
from fleetgate.context.tally import LAYOUT, N_FIELDS
from fleetgate.context.template_costs import TemplateCosts, step_key
from fleetgate.execute.outcome import Attempt
from fleetgate.fleet import build_fleet
from fleetgate.record.calibration_sink import CalibrationSink
from fleetgate.record.recorder import RequestRecord
from fleetgate.routing.filters.context_fit import RAW_NOTE
from fleetgate.testing.llama import ALIAS
from tests.engines import LlamaFactory, llama_provider
from tests.harness import Stack, deployment, fleet_config, wait_until


def test_bounds_follow_the_measured_ratios_and_stay_bounded() -> None:
    book = CalibrationBook()
    prior = (0.8, 1.2)
    assert book.factors("d", prior) == prior
    rng = random.Random(1)
    for _ in range(MIN_SAMPLES - 1):
        book.observe("d", 0.9)
    assert book.factors("d", prior) == prior  # not enough samples yet
    for _ in range(300):
        book.observe("d", rng.uniform(0.88, 0.92))
    low, high = book.factors("d", prior)
    assert 0.85 <= low <= 0.9 <= high <= 0.95  # narrower than the prior, around 0.9
    for _ in range(2000):
        book.observe("e", 50.0)  # absurd answers cannot move the bounds past the ceiling
    low, high = book.factors("e", prior)
    assert high == CEILING and low >= 0.97 * CEILING
    for _ in range(2000):
        book.observe("d", 1.5)  # the traffic changed: old samples decay away
    assert book.factors("d", prior)[0] > 1.4
    assert book.factors("d", prior)[0] >= FLOOR


def test_a_busy_replica_shares_a_bounded_number_of_answers_and_learns_from_all() -> None:
    book = CalibrationBook()
    prior = (0.25,) * N_FIELDS
    for i in range(5 * MAX_SHARED_ANSWERS):
        counts = tuple((i % 7) + j for j in range(N_FIELDS))
        book.observe_answer("busy", prior, counts, 40 + i, now=1.0)
    book.observe_answer("quiet", prior, (3,) * N_FIELDS, 30, now=1.0)
    shared = book.take_answers()
    assert len(shared["busy"]) == MAX_SHARED_ANSWERS  # a publication stays small
    assert len(shared["quiet"]) == 1  # another deployment's room is its own
    fit = book.fit("busy", prior)
    assert fit.answers == 5 * MAX_SHARED_ANSWERS  # the local fit took every answer
    other = CalibrationBook()
    other.fit("busy", prior)
    taken = other.observe_shared_answers(shared, LAYOUT)
    assert taken == MAX_SHARED_ANSWERS + 1
    assert book.take_answers() == {}  # taken once


def test_the_book_round_trips_its_state() -> None:
    book = CalibrationBook()
    for _ in range(20):
        book.observe("d", 1.1, now=5.0)
    dumped = book.take_changed()
    other = CalibrationBook()
    other.put("d", dumped["d"])
    assert other.factors("d", (0, 0)) == book.factors("d", (0, 0))
    assert book.take_changed() == {}


def test_usage_from_the_real_engine_calibrates_its_deployment(
    stack: Stack, client_for, llama: LlamaFactory
) -> None:
    small, big = llama(n_ctx=512), llama(n_ctx=2048)
    gateway = stack.start_gateway(
        {
            "providers": [llama_provider("s", small), llama_provider("b", big)],
            "deployments": [
                deployment("tiny", "s", upstream_model=ALIAS, context_window=512),
                deployment("tiny", "b", upstream_model=ALIAS, context_window=2048),
            ],
        }
    )
    client = client_for(stack)
    for i in range(MIN_SAMPLES + 2):
        client.chat.completions.create(
            model="tiny",
            messages=[{"role": "user", "content": f"Count the apples, case {i}: one two."}],
            max_tokens=4,
        )
    book = gateway.pipeline.state.calibration
    wait_until(lambda: (book.get("s") or book.get("b")) is not None, 5, "samples recorded")
    cal = book.get("s")
    wait_until(lambda: cal is not None and cal.samples >= MIN_SAMPLES, 5, "enough samples")
    assert cal is not None
    low, high = cal.bounds() or (0.0, 0.0)
    # the engine's usage over the family's estimate (the model name says nothing: generic)
    assert 0.3 < low <= high < 1.5


async def test_usage_corrects_a_learned_template_framing() -> None:
    fleet = build_fleet(
        fleet_config(
            {
                "providers": [
                    {"id": "a", "kind": "llamacpp", "base_url": "http://127.0.0.1:9/v1"},
                    {"id": "b", "kind": "llamacpp", "base_url": "http://127.0.0.1:8/v1"},
                    {"id": "c", "kind": "vllm", "base_url": "http://127.0.0.1:7/v1"},
                ],
                "deployments": [
                    deployment("m", "a", upstream_model="q"),
                    deployment("m", "b", upstream_model="q"),
                    deployment("m", "c", upstream_model="q"),
                ],
            }
        )
    )
    template = TemplateCosts()
    key = step_key(fleet.deployments["a"], {"role": "user"}, [{"role": "assistant"}])
    template.learn(key, 7)  # a wrong figure
    sink = CalibrationSink(CalibrationBook(), lambda: fleet, template)

    def answered_by(dep: str, prompt_tokens: int) -> RequestRecord:
        attempt = Attempt(0, dep, dep, "q", "model", status=200, prompt_tokens=prompt_tokens)
        notes = {RAW_NOTE: {"generic": 100}, TEMPLATE_NOTE: {"key": list(key), "text": 95}}
        return RequestRecord(
            "r",
            0.0,
            "chat.completions",
            "m",
            "model",
            False,
            200,
            None,
            0.1,
            0.0,
            dep,
            dep,
            [attempt],
            notes=notes,
        )

    await sink.write([answered_by("c", 120)])  # another engine's template: teaches nothing
    assert template.get(key) == 7
    await sink.write([answered_by("b", 100)])  # the same template on another engine
    assert template.get(key) == 5
