"""Defect 3: keyless requests with random model names grew /metrics without bound (20,000
of them: 393 KB to 101 MB). Label values now come from the fleet only; any other name a
client sends is counted as `_unknown`."""

from __future__ import annotations

import re
import uuid

import httpx

from tests.harness import Stack, deployment, provider, wait_until

MSG = [{"role": "user", "content": "hi"}]


def _model_labels(text: str) -> set[str]:
    return set(re.findall(r'\bmodel="([^"]*)"', text))


def test_random_model_names_do_not_grow_metrics(stack: Stack) -> None:
    engine = stack.engine("a")
    gw = stack.start_gateway(
        {
            "auth": {"enabled": False},
            "providers": [provider("pa", engine)],
            "deployments": [deployment("m", "pa")],
            "virtual_models": [{"name": "Assistant", "routes": [{"deployment": "pa"}]}],
        }
    )
    with httpx.Client(base_url=stack.url, timeout=10) as client:
        for model in ("m", "pa", "ASSISTANT"):  # a model, a deployment id, a virtual name
            assert client.post(
                "/v1/chat/completions", json={"model": model, "messages": MSG}
            ).is_success
        baseline = len(client.get("/metrics").text)
        for _ in range(500):
            resp = client.post(
                "/v1/chat/completions",
                json={"model": f"random-{uuid.uuid4().hex}", "messages": MSG},
            )
            assert resp.status_code == 404
        wait_until(lambda: gw.pipeline.recorder.buffered == 0, 5, "records flushed")
        text = client.get("/metrics").text
    assert _model_labels(text) == {"m", "pa", "Assistant", "_unknown"}
    assert 'fleetgate_requests_total{context_tier="default",endpoint="chat.completions"' in text
    assert re.search(r'model="_unknown",status="404"\} 500\.0', text)
    # one more label set per family, not 500: the scrape stays the same size
    assert len(text) < baseline + 4000, (baseline, len(text))
