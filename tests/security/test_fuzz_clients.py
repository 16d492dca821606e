"""Keep it true: hypothesis-made bodies for every client endpoint, over real HTTP.

Each answer is either a normal one (2xx) or a clean 4xx in that protocol's own error
shape; never a 5xx of the gateway's own making. Bodies are of three kinds: any JSON value,
a valid request with fields replaced by arbitrary values or names a client may send, and
bytes that are not JSON at all. Bounded: EXAMPLES bodies per endpoint (about 25 s).
"""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

import httpx
import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from fleetgate.ingress.routes import INGRESS_ROUTES
from fleetgate.testing import OllamaModel
from tests.harness import Stack, deployment, ollama_provider, provider
from tests.security.shapes import clean_error, fuzzing, json_values

EXAMPLES = 300  # bodies per endpoint
MSG = [{"role": "user", "content": "hi"}]
VALID: dict[str, dict[str, Any]] = {
    "/v1/chat/completions": {"model": "m", "messages": MSG, "max_tokens": 5},
    "/v1/completions": {"model": "m", "prompt": "hi", "max_tokens": 5},
    "/v1/embeddings": {"model": "m", "input": "hi"},
    "/v1/messages": {"model": "m", "max_tokens": 5, "messages": MSG},
    "/v1/responses": {"model": "m", "input": "hi", "max_output_tokens": 5},
    "/api/chat": {"model": "o", "messages": MSG, "stream": False},
    "/api/generate": {"model": "o", "prompt": "hi", "stream": False},
    "/api/embed": {"model": "o", "input": "hi"},
    "/api/embeddings": {"model": "o", "prompt": "hi"},
    "/api/show": {"model": "o"},
    "/v1/routing/explain": {"model": "m", "messages": MSG},
    "/v1/messages/count_tokens": {"model": "m", "messages": MSG},
}
# every POST endpoint a client may call (the admin API has its own fuzz test)
CLIENT_POSTS = {"/v1/routing/explain", "/v1/messages/count_tokens"}
# fields worth mutating: those the gateway reads, and some it passes on
FIELDS = [
    "model", "messages", "prompt", "input", "stream", "max_tokens", "max_completion_tokens",
    "max_output_tokens", "provider", "user", "metadata", "options", "system", "instructions",
    "tools", "tool_choice", "response_format", "logprobs", "stream_options", "temperature",
    "name", "endpoint", "previous_response_id", "n", "stop",
]  # fmt: skip
# 5xx a healthy fleet can still answer for a well-formed request: none of them is a bug
UPSTREAM_CODES = {"upstream_error", "upstream_rejected", "stream_interrupted"}

names = st.sampled_from(["m", "o", "M", "pa", "", "auto", "x" * 300, "a\x00b", "../etc"])
field_values = json_values | names | st.just(MSG) | st.just({"only": ["pa"]})


def _bodies(path: str) -> st.SearchStrategy[bytes]:
    valid = VALID[path]
    mutated = st.builds(
        lambda changes, drop: {
            **{k: v for k, v in valid.items() if k not in drop},
            **changes,
        },
        st.dictionaries(st.sampled_from(FIELDS), field_values, max_size=3),
        st.sets(st.sampled_from(sorted(valid)), max_size=2),
    )
    as_json = (mutated | json_values).map(orjson.dumps)
    garbage = st.binary(max_size=64) | st.just(b"") | st.just(b'{"model": "m", "messages": [')
    return st.one_of(as_json, as_json, garbage)


def _fuzz(client: httpx.Client, path: str, statuses: Counter[tuple[str, int]]) -> None:
    """EXAMPLES bodies to one endpoint; fails on the first answer that is not clean."""

    @given(raw=_bodies(path))
    @fuzzing(EXAMPLES)
    def one(raw: bytes) -> None:
        resp = client.post(path, content=raw, headers={"Content-Type": "application/json"})
        statuses[(path, resp.status_code)] += 1
        if resp.status_code < 400:
            return
        body = orjson.loads(resp.content) if resp.content else None
        assert clean_error(path, body), (resp.status_code, resp.content)
        if resp.status_code >= 500:  # only an upstream's failure, relayed, may be a 5xx
            err = body.get("error")
            code = err.get("code") if isinstance(err, dict) else None
            assert code in UPSTREAM_CODES, (raw, resp.content)

    one()


@pytest.fixture
def fleet(stack: Stack) -> Stack:
    engine = stack.engine("a", reply_words=3)
    worker = stack.ollama("w", OllamaModel("o"))
    stack.start_gateway(
        {
            "providers": [provider("pa", engine), ollama_provider("pw", worker)],
            "deployments": [deployment("m", "pa"), deployment("o", "pw")],
        }
    )
    return stack


def test_every_client_endpoint_answers_arbitrary_bodies_cleanly(
    fleet: Stack, capsys: pytest.CaptureFixture[str]
) -> None:
    paths = sorted(VALID)
    # a new endpoint gets fuzzed too
    assert set(INGRESS_ROUTES) | CLIENT_POSTS == set(paths)
    gw = fleet.gateway
    assert gw is not None
    posts = {p for m, p in gw.routes if m == "POST"} - {"/v1/fleet/windows/refresh"}
    assert posts == CLIENT_POSTS
    statuses: Counter[tuple[str, int]] = Counter()
    started = time.monotonic()
    with httpx.Client(base_url=fleet.url, timeout=15) as client:
        for path in paths:
            _fuzz(client, path, statuses)
    elapsed = time.monotonic() - started
    total = sum(statuses.values())
    fives = {k: n for k, n in statuses.items() if k[1] >= 500}
    by_status = Counter()
    for (_, status), n in statuses.items():
        by_status[status] += n
    with capsys.disabled():
        print(
            f"\nclient fuzz: {total} bodies over {len(paths)} endpoints in {elapsed:.1f}s, "
            f"statuses {dict(sorted(by_status.items()))}, 5xx {fives or 0}"
        )
    assert total >= EXAMPLES * len(paths)
    assert not fives
    assert all(statuses[(p, 200)] for p in paths)  # each endpoint also answered normally
