"""Defect 6: a 502's message carried the upstream's echo of the provider key. Every
configured secret value is scrubbed from upstream text relayed to a client or logged."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import anthropic
import httpx
import pytest

from tests.harness import Stack, wait_until
from tests.security.servers import Echo

KEY = "sk-prov-key-0123456789abcdef"
LABELLED = "sk-labelled-key-fedcba9876"
HEADER = "hdr-token-5555-aaaa"
SECRETS = (KEY, LABELLED, HEADER)
MSG = [{"role": "user", "content": "hi"}]


@pytest.fixture
def echoes(stack: Stack) -> Iterator[tuple[Echo, Echo]]:
    # the 500's message is cut at 500 characters ten characters into the key it quotes
    rejecting, failing = Echo(401), Echo(500, pad=500 - len("rejected, you sent: Bearer ") - 10)
    for e in (rejecting, failing):
        stack.lt.run(e.start())
    yield rejecting, failing
    for e in (rejecting, failing):
        stack.lt.run(e.stop())


def _provider(pid: str, echo: Echo, kind: str = "vllm", **extra: object) -> dict:
    return {
        "id": pid,
        "kind": kind,
        "base_url": echo.url + "/v1",
        "api_key": KEY,
        "keys": {"team": LABELLED},
        "headers": {"X-Upstream-Token": HEADER},
        **extra,
    }


def test_echoed_credentials_never_reach_clients_or_logs(
    stack: Stack, echoes: tuple[Echo, Echo], caplog: pytest.LogCaptureFixture
) -> None:
    rejecting, failing = echoes
    with caplog.at_level(logging.INFO, logger="fleetgate"):
        gw = stack.start_gateway(
            {
                "providers": [
                    _provider("rej", rejecting, discovery=True),
                    _provider("fail", failing),
                    _provider("claude", failing, kind="anthropic"),
                ],
                "deployments": [
                    {"id": "rej", "model": "r", "provider": "rej"},
                    {"id": "fail", "model": "f", "provider": "fail"},
                    {"id": "claude", "model": "c", "provider": "claude"},
                ],
                "virtual_models": [
                    {"name": "team", "routes": [{"deployment": "fail", "key_label": "team"}]}
                ],
            }
        )
        wait_until(lambda: gw.pipeline.discovery.refreshes >= 1, 10, "a discovery round")
        texts = []
        with httpx.Client(base_url=stack.url, timeout=10) as client:
            # a 401 relayed as the upstream's own body (upstream_rejected)
            rejected = client.post("/v1/chat/completions", json={"model": "r", "messages": MSG})
            assert rejected.status_code == 401
            # a 500 summarised in a 502 message (upstream_error), default and labelled key
            for model in ("f", "team"):
                failed = client.post("/v1/chat/completions", json={"model": model, "messages": MSG})
                assert failed.status_code == 502
                texts.append(failed.text)
            texts += [rejected.text, client.get("/v1/fleet/windows").text]
        with pytest.raises(anthropic.APIStatusError) as raised:
            anthropic.Anthropic(base_url=stack.url, api_key="x", max_retries=0).messages.create(
                model="c", max_tokens=5, messages=MSG
            )
        texts.append(raised.value.response.text)
    texts.append(caplog.text)
    for text in texts:
        assert "rejected, you sent" in text or "HTTP 401" in text, text  # it was relayed
        assert "***" in text
        for secret in SECRETS:
            assert secret[:10] not in text, text  # not even the start of a cut-off one
