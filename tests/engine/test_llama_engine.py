"""The real llama.cpp engine behind the gateway: what the rest of the suite builds on."""

from __future__ import annotations

import openai
import pytest

from fleetgate.testing.llama import ALIAS
from tests.engines import LlamaFactory, llama_provider
from tests.harness import Stack, deployment


def test_chat_through_the_gateway_reports_the_engines_usage(
    stack: Stack, client_for, llama: LlamaFactory
) -> None:
    engine = llama(n_ctx=512)
    stack.start_gateway(
        {
            "providers": [llama_provider("cpp", engine)],
            "deployments": [deployment("tiny", "cpp", upstream_model=ALIAS, context_window=512)],
        }
    )
    client = client_for(stack)
    resp = client.chat.completions.with_raw_response.create(
        model="tiny", messages=[{"role": "user", "content": "Hello world"}], max_tokens=4
    )
    body = resp.parse()
    assert body.model == "tiny"
    assert resp.headers["x-fleetgate-route"] == "cpp"
    assert body.usage is not None
    # the Qwen2.5 template's default system turn + the user turn: more than the two words
    assert body.usage.prompt_tokens > 20
    assert body.usage.completion_tokens == 4


def test_a_prompt_over_the_window_is_the_engines_context_400(
    stack: Stack, client_for, llama: LlamaFactory
) -> None:
    engine = llama(n_ctx=512)
    stack.start_gateway(
        {
            "providers": [llama_provider("cpp", engine)],
            "deployments": [deployment("tiny", "cpp", upstream_model=ALIAS)],  # window unknown
        }
    )
    with pytest.raises(openai.BadRequestError) as info:
        client_for(stack).chat.completions.create(
            model="tiny", messages=[{"role": "user", "content": "1 2 3 4 " * 300}], max_tokens=4
        )
    assert "exceeds the available context size" in str(info.value)
