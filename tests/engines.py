"""Real llama.cpp engines for tests (see fleetgate.testing.llama): started once per session.

A missing build FAILS the test that needs it (scripts/test builds it first): CI must never
pass by skipping the real engine.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from fleetgate.testing.llama import ALIAS, EngineMissing, LlamaServer

LlamaFactory = Callable[..., LlamaServer]

# The tiny random model may end an answer with its end-of-text token at any length (one
# asked for 300 tokens ended at 64). A deployment whose tests count an answer up to its own
# limit or to the window asks the engine to go on: llama.cpp's `ignore_eos`, set as an
# operator sets an engine's knob, through the deployment's `extra_body`.
TO_THE_LIMIT: dict[str, Any] = {"extra_body": {"ignore_eos": True}}


@pytest.fixture(scope="session")
def llama() -> Iterator[LlamaFactory]:
    """`llama(n_ctx=512, slots=1, extra=(), alias=ALIAS)`: a running engine, shared by every
    test that asks for the same settings (`alias`: the model name it answers with). Tests
    must not change an engine's state for others."""
    running: dict[tuple[Any, ...], LlamaServer] = {}

    def get(
        n_ctx: int = 512, slots: int = 1, extra: tuple[str, ...] = (), alias: str = ALIAS
    ) -> LlamaServer:
        key = (n_ctx, slots, extra, alias)
        if key not in running:
            try:
                server = LlamaServer(n_ctx=n_ctx, slots=slots, extra=extra, alias=alias)
                running[key] = server.start()
            except EngineMissing as exc:
                pytest.fail(str(exc))
        return running[key]

    yield get
    for server in running.values():
        server.stop()


@pytest.fixture(scope="session")
def llama_replicas() -> Iterator[Callable[..., list[LlamaServer]]]:
    """`llama_replicas(2, n_ctx=1024, threads=(1, 1))`: that many separate engines of the same
    settings (replicas of one model, as a load balancer sees them), shared like `llama`'s."""
    running: dict[tuple[Any, ...], LlamaServer] = {}

    def get(
        count: int, n_ctx: int = 1024, threads: tuple[int, ...] | None = None
    ) -> list[LlamaServer]:
        servers = []
        for i in range(count):
            t = threads[i] if threads else 1
            key = (n_ctx, t, i)
            if key not in running:
                try:
                    running[key] = LlamaServer(n_ctx=n_ctx, threads=t).start()
                except EngineMissing as exc:
                    pytest.fail(str(exc))
            servers.append(running[key])
        return servers

    yield get
    for server in running.values():
        server.stop()


def llama_provider(name: str, server: LlamaServer, **extra: Any) -> dict[str, Any]:
    return {"id": name, "kind": "llamacpp", "base_url": server.base_url, **extra}


def llama_fleet(servers: list[LlamaServer], **extra: Any) -> dict[str, Any]:
    """Model `m` on each engine, as deployments `r1`, `r2`, ... of equal rank."""
    names = [f"r{i}" for i in range(1, len(servers) + 1)]
    return {
        "providers": [llama_provider(n, s) for n, s in zip(names, servers, strict=True)],
        "deployments": [
            {"model": "m", "provider": n, "id": n, "upstream_model": ALIAS} for n in names
        ],
        **extra,
    }


def misstated_tiers(llama: LlamaFactory, **extra: Any) -> dict[str, Any]:
    """Model `tiny` on two real engines, `small` (n_ctx 512, said to hold 1024: it is never
    asked) and `big` (2048)."""
    return {
        "providers": [
            llama_provider("small", llama(n_ctx=512), discovery=False),
            llama_provider("big", llama(n_ctx=2048), discovery=False),
        ],
        "deployments": [
            {
                "id": "small",
                "model": "tiny",
                "provider": "small",
                "upstream_model": ALIAS,
                "context_window": 1024,
                "params": TO_THE_LIMIT,
            },
            {
                "id": "big",
                "model": "tiny",
                "provider": "big",
                "upstream_model": ALIAS,
                "context_window": 2048,
                "params": TO_THE_LIMIT,
            },
        ],
        **extra,
    }
