"""A collector that is down or busy gets the batch again: after the delay it asked for, or
an exponential backoff, a bounded number of times, within the queue's bound; one that
refuses a batch for good gets it once. Real OTLP receivers on loopback."""

from __future__ import annotations

import time
from typing import Any

import grpc
import pytest

from tests.harness import Stack, wait_until
from tests.telemetry.receivers import GrpcReceiver, HttpReceiver
from tests.telemetry.test_collector_faults import _closed_port, _gauge
from tests.telemetry.test_traces import chat, fallback_fleet, telemetry

SPANS = 3  # a request's: SERVER, routing, one CLIENT attempt


def http_receiver(stack: Stack, port: int = 0) -> HttpReceiver:
    receiver = HttpReceiver(port=port)
    stack.lt.run(receiver.start())
    return receiver


def retrying(endpoint: str, wire: str, **otlp: Any) -> dict[str, Any]:
    block = telemetry(endpoint, wire)
    block["otlp"].update(otlp)
    return block


def one_request(stack: Stack) -> None:
    """One request, and the gateway to send all its spans (the exporter stops only once the
    last batch is done with)."""
    assert chat(stack).status_code == 200


@pytest.mark.parametrize("status", [429, 502, 503, 504])
def test_a_busy_http_collector_gets_the_batch_again_after_its_retry_after(
    stack: Stack, status: int
) -> None:
    receiver = http_receiver(stack)
    try:
        receiver.failures.extend([(status, "0"), (status, "0")])
        # a backoff of its own would take 60 s: only the collector's Retry-After is quick
        fallback_fleet(
            stack, retrying(receiver.endpoint, "http/protobuf", retry_backoff_seconds=60)
        )
        one_request(stack)
        wait_until(lambda: len(receiver.spans()) == SPANS, 10, "the batch, on the third send")
        assert receiver.refused == 2
        assert _gauge(stack, "fleetgate_otlp_retries") == 2
        assert _gauge(stack, "fleetgate_spans_failed") == 0
        wait_until(lambda: _gauge(stack, "fleetgate_spans_exported") == SPANS, 5, "counted")
    finally:
        stack.stop_gateway()
        stack.lt.run(receiver.stop())


def test_a_grpc_collector_that_is_unavailable_or_exhausted_gets_it_after_its_retry_info(
    stack: Stack,
) -> None:
    receiver = GrpcReceiver()
    try:
        receiver.failures.extend(
            [(grpc.StatusCode.UNAVAILABLE, 20), (grpc.StatusCode.RESOURCE_EXHAUSTED, 20)]
        )
        fallback_fleet(stack, retrying(receiver.endpoint, "grpc", retry_backoff_seconds=60))
        one_request(stack)
        wait_until(lambda: len(receiver.spans()) == SPANS, 10, "the batch, after RetryInfo")
        assert receiver.refused == 2
        assert _gauge(stack, "fleetgate_otlp_retries") == 2
        assert _gauge(stack, "fleetgate_spans_failed") == 0
    finally:
        stack.stop_gateway()
        receiver.close()


def test_a_refused_connection_is_retried_with_backoff_until_the_collector_is_up(
    stack: Stack,
) -> None:
    port = _closed_port()
    endpoint = f"http://127.0.0.1:{port}"
    fallback_fleet(stack, retrying(endpoint, "http/protobuf", retry_backoff_seconds=0.2))
    receiver: HttpReceiver | None = None
    try:
        one_request(stack)
        wait_until(lambda: _gauge(stack, "fleetgate_otlp_retries") >= 1, 10, "a retry")
        receiver = http_receiver(stack, port)  # the collector comes up
        wait_until(lambda: len(receiver.spans()) == SPANS, 20, "the batch, once it is up")
        assert _gauge(stack, "fleetgate_spans_failed") == 0
    finally:
        stack.stop_gateway()
        if receiver is not None:
            stack.lt.run(receiver.stop())


def test_retries_are_bounded_and_a_refusal_for_good_is_not_retried(stack: Stack) -> None:
    receiver = http_receiver(stack)
    try:
        receiver.failing = (503, "0")
        fallback_fleet(stack, retrying(receiver.endpoint, "http/protobuf", retries=2))
        one_request(stack)
        wait_until(lambda: _gauge(stack, "fleetgate_spans_failed") == SPANS, 10, "given up")
        assert receiver.refused == 3  # the first send and two more
        assert _gauge(stack, "fleetgate_otlp_retries") == 2
        receiver.failing = (400, None)  # a bad request stays bad: sent once
        one_request(stack)
        wait_until(lambda: _gauge(stack, "fleetgate_spans_failed") == 2 * SPANS, 10, "failed")
        assert receiver.refused == 4
        assert _gauge(stack, "fleetgate_otlp_retries") == 2
        assert _gauge(stack, "fleetgate_spans_exported") == 0
    finally:
        stack.stop_gateway()
        stack.lt.run(receiver.stop())


def test_spans_made_while_a_batch_waits_to_be_sent_again_stay_within_the_queue(
    stack: Stack,
) -> None:
    receiver = http_receiver(stack)
    try:
        receiver.failing = (503, "3")  # the first batch waits 3 s before its next send
        block = retrying(receiver.endpoint, "http/protobuf", retries=1)
        block["max_queue_spans"] = 8
        fallback_fleet(stack, block)
        one_request(stack)
        wait_until(lambda: receiver.refused == 1, 10, "the first send refused")
        began = time.monotonic()
        for _ in range(10):  # no request waits on the retry …
            one_request(stack)
        assert time.monotonic() - began < 3
        # … and what they make past the bound is dropped and counted, the waiting batch
        # counted in the bound: 11 requests' spans, 8 kept at most
        made = 11 * SPANS

        def dropped() -> float:
            return _gauge(stack, "fleetgate_spans_dropped")

        wait_until(lambda: dropped() >= made - 8, 5, "drops counted")
        receiver.failing = None
        sent = lambda: _gauge(stack, "fleetgate_spans_exported")  # noqa: E731
        wait_until(lambda: sent() + dropped() == made, 10, "every kept span sent")
        assert _gauge(stack, "fleetgate_spans_failed") == 0
        assert 0 < len(receiver.spans()) == sent() <= 8
        assert _gauge(stack, "fleetgate_otlp_retries") == 1
    finally:
        stack.stop_gateway()
        stack.lt.run(receiver.stop())
