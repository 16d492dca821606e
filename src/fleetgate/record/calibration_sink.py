"""Feeds the context estimate's calibration from request records, off the hot path.

For each request whose plan estimated its context (the central estimate per tokenizer
family is in the record's notes), the answering attempt's reported prompt tokens over the
estimate of its deployment's family is one sample for that deployment; the request's tally
(numbers only) and the reported prompt tokens are one sample of the tokenizer fit of every
deployment with the same tokenizer and template (engine kind, upstream model, local
tokenizer: `template_of`), refitted at each flush when due (`context/fit.py`). A request counted
in part (a conversation's new turn, a text-only count) teaches the template's framing: the
reported prompt tokens minus the counted text (`context/template_costs.py`), when a
deployment of the same template answered. Requests with media (estimated with fixed
reserves), and answers suspected of truncation or cut short, teach nothing.
"""

from __future__ import annotations

from collections.abc import Callable

from fleetgate.context.calibration import CalibrationBook
from fleetgate.context.families import FAMILIES
from fleetgate.context.refine import TEMPLATE_NOTE
from fleetgate.context.template_costs import TemplateCosts, template_of
from fleetgate.context.truncation import CUT_SHORT_NOTE, TRUNCATION_NOTE
from fleetgate.fleet import Deployment, Fleet
from fleetgate.record.recorder import BatchSink, RequestRecord
from fleetgate.routing.filters.context_fit import RAW_NOTE, TALLY_NOTE

_UNTRUSTED = (TRUNCATION_NOTE, CUT_SHORT_NOTE)


class CalibrationSink(BatchSink):
    def __init__(
        self,
        book: CalibrationBook,
        fleet: Callable[[], Fleet],
        template: TemplateCosts | None = None,
    ) -> None:
        self.book = book
        self.fleet = fleet
        self.template = template

    def take(self, record: RequestRecord) -> None:
        raw = record.notes.get(RAW_NOTE)
        if not raw or record.error_code is not None or not record.attempts:
            return
        if any(name in record.notes for name in _UNTRUSTED):
            return
        attempt = record.attempts[-1]
        dep = self.fleet().deployments.get(attempt.deployment_id)
        if dep is None or not attempt.ok or not attempt.prompt_tokens:
            return
        estimate = raw.get(dep.tokenizer_family)
        if estimate:
            self.book.observe(dep.id, attempt.prompt_tokens / estimate, record.time)
        counts = record.notes.get(TALLY_NOTE)
        if counts:
            for same in _same_tokenizer(self.fleet(), dep):
                prior = FAMILIES[same.tokenizer_family].weights
                self.book.observe_answer(
                    same.id, prior, tuple(counts), attempt.prompt_tokens, record.time
                )
        basis = record.notes.get(TEMPLATE_NOTE)
        if basis and self.template is not None:
            key = tuple(basis["key"])
            if key[1:4] == template_of(dep):  # the same template answered
                self.template.learn(key, attempt.prompt_tokens - int(basis["text"]))

    async def flush(self) -> None:
        """`take` taught the book and the template costs; the fits that are due refit."""
        self.book.refit()


def _same_tokenizer(fleet: Fleet, dep: Deployment) -> list[Deployment]:
    """`dep` and the deployments of its model with its tokenizer and template."""
    model = fleet.models.get(dep.model)
    if model is None:
        return [dep]
    same = template_of(dep)
    return [d for d in model.deployments if d is dep or template_of(d) == same]
