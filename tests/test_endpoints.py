"""Health, readiness and the per-request record."""

from __future__ import annotations

import httpx
from prometheus_client.parser import text_string_to_metric_families

from fleetgate.testing import Fault
from tests.harness import Stack, deployment, provider, wait_until


def test_health_and_readiness(stack: Stack):
    a = stack.engine("a")
    stack.start_gateway({"providers": [provider("pa", a)], "deployments": [deployment("m", "pa")]})
    assert httpx.get(stack.url + "/healthz").json() == {"status": "ok"}
    ready = httpx.get(stack.url + "/readyz")
    assert ready.status_code == 200
    assert ready.json() == {"status": "ready", "models": 1, "deployments": 1}


def test_request_record_lists_every_attempt_without_text(stack: Stack):
    a = stack.engine("a")
    b = stack.engine("b")
    stack.start_gateway(
        {
            "providers": [provider("pa", a), provider("pb", b)],
            "deployments": [
                deployment("m", "pa", upstream_model="up-a"),
                deployment("m", "pb", priority=1, upstream_model="up-b"),
            ],
        }
    )
    a.fail_next(Fault("status", status=503))
    resp = httpx.post(
        stack.url + "/v1/chat/completions",
        json={"model": "m", "messages": [{"role": "user", "content": "secret prompt words"}]},
    )
    rid = resp.headers["x-request-id"]

    def fetch() -> httpx.Response:
        return httpx.get(f"{stack.url}/v1/requests/{rid}")

    wait_until(lambda: fetch().status_code == 200, 5, "record flushed")
    record = fetch().json()
    assert record["deployment_id"] == "pb"
    assert [(t["deployment_id"], t["status"], t["error_class"]) for t in record["attempts"]] == [
        ("pa", 503, "server_error"),
        ("pb", 200, None),
    ]
    assert record["attempts"][1]["upstream_model"] == "up-b"
    assert record["attempts"][1]["prompt_tokens"] == 4
    assert "secret" not in fetch().text
    assert httpx.get(stack.url + "/v1/requests/unknown").status_code == 404


def test_metrics_count_requests_attempts_and_fallbacks(stack: Stack):
    a = stack.engine("a")
    b = stack.engine("b")
    stack.start_gateway(
        {
            "providers": [provider("pa", a), provider("pb", b)],
            "deployments": [deployment("m", "pa"), deployment("m", "pb", priority=1)],
        }
    )
    a.fail_next(Fault("status", status=503))
    body = {"model": "m", "messages": [{"role": "user", "content": "private words"}]}
    for _ in range(2):
        assert httpx.post(stack.url + "/v1/chat/completions", json=body).status_code == 200
    text = httpx.get(stack.url + "/metrics").text
    assert (
        'fleetgate_requests_total{context_tier="default",endpoint="chat.completions",'
        'error_code="",model="m",status="200"} 2.0'
    ) in text
    assert 'fleetgate_fallbacks_total{model="m"} 1.0' in text
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }
    latency = {k: v for k, v in samples.items() if k[0].startswith("fleetgate_request_seconds")}
    assert latency[("fleetgate_request_seconds_count", (("model", "m"),))] == 2
    assert latency[("fleetgate_request_seconds_bucket", (("le", "+Inf"), ("model", "m")))] == 2
    assert latency[("fleetgate_request_seconds_sum", (("model", "m"),))] > 0
    assert samples[("fleetgate_overhead_seconds_count", ())] == 2
    ttft = [v for k, v in samples.items() if k[0] == "fleetgate_attempt_ttft_seconds_count"]
    assert sum(ttft) == 2  # the two successful attempts; the 503 has no first byte
    assert (
        'fleetgate_attempts_total{deployment="pa",error_class="server_error",'
        'provider="pa",provider_ctx="unbounded",status="503"} 1.0'
    ) in text
    assert "private" not in text


def test_requests_refused_before_any_upstream_call_are_recorded(stack: Stack):
    a = stack.engine("a")
    stack.start_gateway({"providers": [provider("pa", a)], "deployments": [deployment("m", "pa")]})
    resp = httpx.post(
        stack.url + "/v1/chat/completions",
        json={"model": "no-such-model", "messages": [{"role": "user", "content": "x"}]},
    )
    assert resp.status_code == 404
    rid = resp.headers["x-request-id"]
    wait_until(lambda: httpx.get(f"{stack.url}/v1/requests/{rid}").status_code == 200, 5)
    record = httpx.get(f"{stack.url}/v1/requests/{rid}").json()
    assert (record["status"], record["error_code"]) == (404, "model_not_found")
    assert record["resolution"] == "rejected" and record["attempts"] == []
    assert a.requests == []


def test_streamed_usage_reaches_the_record(stack: Stack, client_for):
    a = stack.engine("a", reply_words=6)
    stack.start_gateway({"providers": [provider("pa", a)], "deployments": [deployment("m", "pa")]})
    raw = client_for(stack).chat.completions.with_raw_response.create(
        model="m",
        messages=[{"role": "user", "content": "three words here"}],
        stream=True,
        stream_options={"include_usage": True},
    )
    list(raw.parse())
    rid = raw.headers["x-request-id"]
    wait_until(lambda: httpx.get(f"{stack.url}/v1/requests/{rid}").status_code == 200, 5)
    attempt = httpx.get(f"{stack.url}/v1/requests/{rid}").json()["attempts"][0]
    assert (attempt["prompt_tokens"], attempt["completion_tokens"]) == (4, 6)
