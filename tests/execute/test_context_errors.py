"""The context-exceeded parser against the engines' real error bodies (tests/fixtures)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from fleetgate.execute.context_errors import parse_context_error
from fleetgate.execute.sse import event_data
from fleetgate.testing import context_exceeded_error
from tests.test_launch import run_python

FIXTURES = Path(__file__).parent.parent / "fixtures" / "context_errors"
EXPECTED: dict[str, Any] = orjson.loads((FIXTURES / "expected.json").read_bytes())


def _body(name: str) -> bytes:
    raw = (FIXTURES / name).read_bytes()
    if name.endswith(".sse"):  # an error event inside a 200 stream: the parser sees its data
        data = event_data(raw.strip())
        assert data is not None
        return data
    return raw.strip()


def test_every_fixture_has_an_expectation() -> None:
    on_disk = {p.name for p in FIXTURES.iterdir() if p.name != "expected.json"}
    assert on_disk == set(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_fixture(name: str) -> None:
    parsed = parse_context_error(_body(name))
    expected = EXPECTED[name]
    if expected is None:
        assert parsed is None
        return
    assert parsed is not None
    assert {
        "source": parsed.source,
        "limit": parsed.limit,
        "prompt_tokens": parsed.prompt_tokens,
        "requested_tokens": parsed.requested_tokens,
    } == expected


@pytest.mark.parametrize("style", ["vllm", "sglang", "llamacpp", "openai"])
def test_fake_engine_styles(style: str) -> None:
    body = orjson.dumps(context_exceeded_error(style, 1000, 1200, 50))  # type: ignore[arg-type]
    parsed = parse_context_error(body)
    assert parsed is not None
    assert parsed.limit == 1000
    assert parsed.prompt_tokens == 1200


def test_non_json_and_empty_bodies() -> None:
    assert parse_context_error(b"") is None
    assert parse_context_error(None) is None
    assert parse_context_error(b"upstream connect error") is None
    plain = b"prompt is too long: 300 tokens > 200 maximum"
    parsed = parse_context_error(plain)
    assert parsed is not None and parsed.limit == 200


_COMPILED_WHEN = """
from fleetgate.execute import context_errors
print(context_errors._rules.cache_info().currsize)
context_errors.parse_context_error(b'{"error": {"message": "prompt is too long"}}')
print(context_errors._rules.cache_info().currsize)
"""


def test_the_patterns_are_compiled_at_the_first_error_not_at_import(tmp_path: Path) -> None:
    """A gateway's start compiles none of them; the first error body read compiles them
    once."""
    assert run_python(_COMPILED_WHEN, tmp_path) == ["0", "1"]
