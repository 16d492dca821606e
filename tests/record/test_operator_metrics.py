"""The metrics an operator graphs first: which deployments are up, tokens and spend."""

from __future__ import annotations

import httpx
from prometheus_client.parser import text_string_to_metric_families

from tests.harness import Stack, deployment, provider

# the fake engine counts a word a token (the role too): 4 prompt tokens, 8 completion tokens
BODY = {"model": "m", "messages": [{"role": "user", "content": "three private words"}]}


def _samples(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = httpx.get(url + "/metrics").text
    assert "private" not in text
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_up_tokens_and_spend(stack: Stack) -> None:
    a, b, c = stack.engine("a"), stack.engine("b"), stack.engine("c")
    stack.start_gateway(
        {
            "providers": [provider("pa", a), provider("pb", b), provider("pc", c)],
            "deployments": [
                deployment("m", "pa", price={"input": 2.0, "output": 10.0}),
                deployment("m", "pb", priority=1),  # no price: no spend line
                deployment("m", "pc", enabled=False),
            ],
        }
    )
    for _ in range(2):
        assert httpx.post(stack.url + "/v1/chat/completions", json=BODY).status_code == 200
    stack.lt.run(a.stop())
    assert httpx.post(stack.url + "/v1/chat/completions", json=BODY).status_code == 200
    samples = _samples(stack.url)
    up = {k[1][0][1]: v for k, v in samples.items() if k[0] == "fleetgate_deployment_up"}
    assert up == {"pa": 0.0, "pb": 1.0, "pc": 0.0}  # open circuit, up, disabled
    tokens = {
        dict(k[1])["deployment"] + "/" + dict(k[1])["direction"]: v
        for k, v in samples.items()
        if k[0] == "fleetgate_tokens_total"
    }
    assert tokens == {"pa/input": 8, "pa/output": 16, "pb/input": 4, "pb/output": 8}
    spend = {
        dict(k[1])["deployment"]: v for k, v in samples.items() if k[0] == "fleetgate_spend_total"
    }
    assert spend.keys() == {"pa"}
    assert abs(spend["pa"] - (8 * 2.0 + 16 * 10.0) / 1e6) < 1e-12
