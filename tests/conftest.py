from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import openai
import pytest

from tests.backends import (  # noqa: F401  (fixtures)
    db_url,
    pg_databases,
    pg_url,
    redis_namespace,
    redis_url,
    sqlite_url,
)
from tests.engines import llama, llama_replicas  # noqa: F401  (fixtures)
from tests.harness import LoopThread, Stack


@pytest.fixture(scope="session")
def loop_thread() -> Iterator[LoopThread]:
    lt = LoopThread()
    yield lt
    lt.close()


@pytest.fixture
def stack(loop_thread: LoopThread) -> Iterator[Stack]:
    s = Stack(loop_thread)
    yield s
    s.close()


@pytest.fixture
def client_for() -> Callable[..., openai.OpenAI]:
    def make(stack: Stack, **kwargs: Any) -> openai.OpenAI:
        return openai.OpenAI(
            base_url=stack.url + "/v1",
            api_key="sk-test",
            max_retries=0,
            timeout=kwargs.pop("timeout", 10),
            **kwargs,
        )

    return make
