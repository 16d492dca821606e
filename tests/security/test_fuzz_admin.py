"""Keep it true: schemathesis drives every admin operation from the admin API's own
OpenAPI document, with schema-valid and schema-invalid requests, and checks each answer
against the document: never a 5xx, every status documented with its error schema, valid
data accepted (or refused for a documented reason: 404, 409, 422), invalid data refused.

Bounded: a fixed number of examples per operation and mode (about 45 s on a quiet core).
"""

from __future__ import annotations

import time
from collections import Counter

import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    negative_data_rejection,
    positive_data_acceptance,
    response_schema_conformance,
    status_code_conformance,
)

from tests.admin.helpers import ADMIN_KEY, options, two_tier_fleet
from tests.harness import Stack

EXAMPLES = 15  # per operation and generation mode
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
    negative_data_rejection,
    positive_data_acceptance,
]
# a schema-valid change the fleet cannot take (422), an id that exists or is in use (409),
# or one the fuzzer made up (404) is a documented refusal, not a rejected valid request
ACCEPTABLE = ["2xx", "404", "409", "422"]
# operations whose inputs no schema describes whole: `since` (epoch seconds or an ISO-8601
# time) and `cursor` (opaque, one this API gave out); explain's `request` (a client body of
# any protocol, judged by that protocol's parser). A schema-valid value may be refused with
# 400 there, so only the other checks apply to them
AUTH = {"Authorization": f"Bearer {ADMIN_KEY}"}
OPAQUE = {"GET /admin/requests", "POST /admin/explain"}


def _fuzz(
    operation: schemathesis.APIOperation,
    mode: GenerationMode,
    url: str,
    checks: list,
    statuses: Counter[int],
) -> None:
    """Up to EXAMPLES requests for one operation in one mode; raises on a failed check."""

    @given(case=operation.as_strategy(generation_mode=mode, headers=AUTH))
    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        database=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    def run(case: schemathesis.Case) -> None:
        response = case.call_and_validate(base_url=url, checks=checks)
        statuses[response.status_code] += 1

    try:
        run()
    except Unsatisfiable:  # nothing to make invalid (an operation without inputs)
        assert mode is GenerationMode.NEGATIVE


def test_admin_api_keeps_to_its_openapi_document(
    stack: Stack, sqlite_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    gw = stack.start_gateway(two_tier_fleet(stack), options(sqlite_url))
    stack.lt.run(gw.pipeline.discovery.stop())  # nothing probes the base URLs the fuzzer invents
    config = schemathesis.Config.from_dict(
        {"checks": {"positive_data_acceptance": {"expected-statuses": ACCEPTABLE}}}
    )
    schema = schemathesis.openapi.from_url(stack.url + "/admin/openapi.json", config=config)
    statuses: Counter[int] = Counter()
    operations = 0
    started = time.monotonic()
    for result in schema.get_all_operations():
        operation = result.ok()
        operations += 1
        checks = CHECKS
        if operation.label in OPAQUE:
            checks = [c for c in CHECKS if c is not positive_data_acceptance]
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            _fuzz(operation, mode, stack.url, checks, statuses)
    elapsed = time.monotonic() - started
    with capsys.disabled():
        print(
            f"\nschemathesis: {operations} operations, {sum(statuses.values())} requests "
            f"in {elapsed:.1f}s, statuses {dict(sorted(statuses.items()))}"
        )
    assert operations >= 40
    assert not [s for s in statuses if s >= 500]
    assert statuses[400] and statuses[422] and sum(n for s, n in statuses.items() if s < 300)
