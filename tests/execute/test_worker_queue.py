"""Per-worker concurrency limits with a bounded queue: full queue → 429 gateway_queue_full."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import httpx

from tests.harness import Stack, ollama_provider, wait_until


def chat(stack: Stack) -> httpx.Response:
    return httpx.post(
        stack.url + "/api/chat",
        timeout=20,
        json={"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": False},
    )


def test_full_queue_answers_429_at_once_and_queued_requests_finish(stack: Stack) -> None:
    worker = stack.ollama("w", "llama3.2")
    stack.start_gateway(
        {
            "providers": [
                {
                    **ollama_provider("w", worker),
                    "concurrency_limit": 1,
                    "queue_size": 1,
                    "discovery": False,
                }
            ],
            "deployments": [
                {"id": "w", "model": "m", "provider": "w", "upstream_model": "llama3.2"}
            ],
        }
    )
    slots = stack.gateway.pipeline.executor.slots.for_provider(
        stack.gateway.pipeline.holder.fleet.providers["w"]
    )
    worker.hold()
    with ThreadPoolExecutor(2) as pool:
        first = pool.submit(chat, stack)
        wait_until(lambda: worker.active == 1, 10, "first request at the worker")
        second = pool.submit(chat, stack)
        wait_until(lambda: slots.waiting == 1, 10, "second request queued")
        third = chat(stack)
        assert third.status_code == 429
        assert third.headers["retry-after"] == "1"
        assert "concurrency limit" in third.json()["error"]
        assert worker.active == 1  # the third never reached the worker
        worker.release()
        assert first.result(20).status_code == 200
        assert second.result(20).status_code == 200
    assert slots.inflight == 0 and slots.waiting == 0
    assert len(worker.inference_requests()) == 2


def test_a_full_worker_is_skipped_for_a_free_one(stack: Stack, client_for) -> None:
    busy = stack.ollama("busy", "llama3.2")
    free = stack.ollama("free", "llama3.2")
    stack.start_gateway(
        {
            "providers": [
                {**ollama_provider("busy", busy), "concurrency_limit": 1, "queue_size": 0},
                ollama_provider("free", free),
            ],
            "deployments": [
                {"id": "busy", "model": "m", "provider": "busy", "upstream_model": "llama3.2"},
                {
                    "id": "free",
                    "model": "m",
                    "provider": "free",
                    "upstream_model": "llama3.2",
                    "priority": 1,
                },
            ],
        }
    )
    busy.hold()
    with ThreadPoolExecutor(1) as pool:
        first = pool.submit(chat, stack)
        wait_until(lambda: busy.active == 1, 10, "first request at the busy worker")
        resp = chat(stack)
        assert resp.status_code == 200 and resp.headers["x-fleetgate-route"] == "free"
        busy.release()
        assert first.result(20).headers["x-fleetgate-route"] == "busy"
