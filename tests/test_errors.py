"""Bad input gets a clear 4xx naming the field; every error code is documented."""

from __future__ import annotations

import re
from pathlib import Path

import httpx
import pytest

from fleetgate.errors import ERROR_KINDS
from tests.harness import Stack, deployment, provider

DOC = Path(__file__).resolve().parents[1] / "docs" / "errors.md"


@pytest.fixture
def gw(stack: Stack) -> Stack:
    a = stack.engine("a")
    stack.start_gateway({"providers": [provider("pa", a)], "deployments": [deployment("m", "pa")]})
    return stack


def post(stack: Stack, path: str, content: bytes | str) -> httpx.Response:
    return httpx.post(
        stack.url + path, content=content, timeout=5, headers={"content-type": "application/json"}
    )


@pytest.mark.parametrize(
    ("body", "code", "param"),
    [
        ("{not json", "invalid_json", None),
        ("", "invalid_json", None),
        ("[1, 2]", "invalid_json", None),
        ('{"messages": [{"role": "user", "content": "x"}]}', "invalid_request", "model"),
        ('{"model": 5, "messages": []}', "invalid_request", "model"),
        ('{"model": "m"}', "invalid_request", "messages"),
        ('{"model": "m", "messages": "hi"}', "invalid_request", "messages"),
        ('{"model": "m", "messages": [{"content": "x"}]}', "invalid_request", "messages[0]"),
        (
            '{"model": "m", "messages": [{"role": "user"}], "stream": "yes"}',
            "invalid_request",
            "stream",
        ),
        (
            '{"model": "m", "messages": [{"role": "user"}], "max_tokens": -1}',
            "invalid_request",
            "max_tokens",
        ),
        (
            '{"model": "m", "messages": [{"role": "user"}], "max_tokens": 1.5}',
            "invalid_request",
            "max_tokens",
        ),
    ],
)
def test_bad_input_is_a_400_naming_the_field(gw: Stack, body: str, code: str, param):
    resp = post(gw, "/v1/chat/completions", body)
    assert resp.status_code == 400
    err = resp.json()["error"]
    assert err["code"] == code
    assert err["param"] == param
    assert err["message"]
    assert resp.headers["x-request-id"]
    assert gw.engines["a"].requests == []


def test_unknown_model_is_404_with_a_hint(gw: Stack):
    resp = post(gw, "/v1/chat/completions", '{"model": "nope", "messages": [{"role": "user"}]}')
    assert resp.status_code == 404
    err = resp.json()["error"]
    assert err["code"] == "model_not_found" and "GET /v1/models" in err["message"]


def test_embeddings_need_input_and_cannot_stream(gw: Stack):
    assert post(gw, "/v1/embeddings", '{"model": "m"}').json()["error"]["param"] == "input"
    resp = post(gw, "/v1/embeddings", '{"model": "m", "input": "x", "stream": true}')
    assert resp.json()["error"]["param"] == "stream"


def test_unknown_path_and_wrong_method(gw: Stack):
    assert httpx.get(gw.url + "/v1/nothing").json()["error"]["code"] == "not_found"
    resp = httpx.get(gw.url + "/v1/chat/completions")
    assert resp.status_code == 405
    assert resp.json()["error"]["code"] == "method_not_allowed"


def test_body_limit(stack: Stack):
    a = stack.engine("a")
    stack.start_gateway(
        {
            "server": {"max_body_bytes": 1000},
            "providers": [provider("pa", a)],
            "deployments": [deployment("m", "pa")],
        }
    )
    big = '{"model": "m", "messages": [{"role": "user", "content": "' + "x" * 2000 + '"}]}'
    resp = post(stack, "/v1/chat/completions", big)
    assert resp.status_code == 413
    assert resp.json()["error"]["code"] == "payload_too_large"


def test_every_error_code_is_documented_and_every_documented_code_exists():
    documented = dict(re.findall(r"^\| `([a-z_]+)` \| ([^|]+) \|", DOC.read_text(), re.M))
    assert set(documented) == set(ERROR_KINDS)
    for code, kind in ERROR_KINDS.items():
        status = documented[code].strip()
        assert status.startswith(str(kind.status)) or not status[0].isdigit(), code
