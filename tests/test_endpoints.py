"""Health, readiness and the per-request record."""

from __future__ import annotations

from typing import Any

import httpx
import psycopg
from prometheus_client.parser import text_string_to_metric_families

from fleetgate.testing import Fault
from tests.admin.helpers import admin, options
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


def _streamed_usage_in_the_record(stack: Stack, client_for, engine) -> tuple[Any, Any]:
    """A streamed chat with usage through the gateway to `engine`: the usage of the last
    chunk the client read, and the prompt and completion tokens its record's attempt holds."""
    stack.start_gateway(
        {"providers": [provider("pa", engine)], "deployments": [deployment("m", "pa")]}
    )
    raw = client_for(stack).chat.completions.with_raw_response.create(
        model="m",
        messages=[{"role": "user", "content": "three words here"}],
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(raw.parse())
    rid = raw.headers["x-request-id"]
    wait_until(lambda: httpx.get(f"{stack.url}/v1/requests/{rid}").status_code == 200, 10)
    attempt = httpx.get(f"{stack.url}/v1/requests/{rid}").json()["attempts"][0]
    return chunks[-1].usage, (attempt["prompt_tokens"], attempt["completion_tokens"])


def test_streamed_usage_reaches_the_record(stack: Stack, client_for):
    a = stack.engine("a", reply_words=6)
    _, recorded = _streamed_usage_in_the_record(stack, client_for, a)
    assert recorded == (4, 6)


def test_streamed_usage_counts_when_the_client_leaves_at_done(stack: Stack, client_for):
    # the SDK closes its connection once it reads [DONE]; an engine that ends its body a
    # moment later must not take the answer's usage with it
    a = stack.engine("a", reply_words=6, tokens_per_second=200)
    a.linger = 30.0
    sent, recorded = _streamed_usage_in_the_record(stack, client_for, a)
    assert sent is not None and sent.prompt_tokens == 4  # the client had its usage
    assert recorded == (4, 6)


def test_a_caller_that_has_its_answer_can_read_its_record(stack: Stack, client_for, pg_url):
    a = stack.engine("a")
    stack.start_gateway(
        {
            "providers": [provider("pa", a)],
            "deployments": [deployment("m", "pa", upstream_model="up-a")],
            "virtual_models": [{"name": "Helper", "routes": [{"deployment": "pa"}]}],
        },
        options(pg_url),
    )
    client = client_for(stack)
    msg = [{"role": "user", "content": "three words here"}]

    def read_at_once(request_id: str, model: str, stream: bool) -> None:
        resp = httpx.get(f"{stack.url}/v1/requests/{request_id}")
        assert resp.status_code == 200, resp.text  # no waiting for a background batch
        record = resp.json()
        (attempt,) = record["attempts"]
        assert (attempt["deployment_id"], attempt["status"]) == ("pa", 200)
        assert attempt["completion_tokens"] is not None  # the attempt is complete
        assert record["stream"] is stream
        assert record["virtual_model"] == ("Helper" if model == "helper" else None)

    ids = []
    # a slow store (here: the request log's table locked) holds up the log's batches;
    # a caller that has its answer still reads its record the moment it has it
    with psycopg.connect(pg_url) as lock:
        lock.execute("LOCK TABLE requests IN ACCESS EXCLUSIVE MODE")
        with httpx.Client(base_url=stack.url) as http:
            for i in range(8):
                model, stream = ("helper" if i % 2 else "m"), i % 4 >= 2
                body = {"model": model, "messages": msg, "stream": stream}
                if stream:
                    body["stream_options"] = {"include_usage": True}
                resp = http.post("/v1/chat/completions", json=body)
                assert resp.status_code == 200
                ids.append(resp.headers["x-request-id"])
                read_at_once(ids[-1], model, stream)
        for model in ("m", "helper"):
            raw = client.chat.completions.with_raw_response.create(
                model=model, messages=msg, stream=True, stream_options={"include_usage": True}
            )
            assert list(raw.parse())
            ids.append(raw.headers["x-request-id"])
            read_at_once(ids[-1], model, True)
        lock.rollback()
    # the store catches up once it can
    api = admin(stack)
    wait_until(lambda: api.get(f"/admin/requests/{ids[-1]}").status_code == 200, 10, "logged")
    assert api.get(f"/admin/requests/{ids[-1]}").json()["virtual_model"] == "Helper"
