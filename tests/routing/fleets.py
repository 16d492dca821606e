"""A small fleet with virtual models and tiers, for planning tests that send nothing."""

from __future__ import annotations

import copy
from typing import Any

import orjson

from fleetgate.fleet import Fleet, build_fleet
from fleetgate.ingress.openai import parse_openai
from fleetgate.ingress.profile import RequestProfile
from tests.harness import fleet_config

BASE: dict[str, Any] = {
    "providers": [
        {"id": "p1", "base_url": "http://127.0.0.1:9/v1"},
        {"id": "nocred", "base_url": "http://127.0.0.1:9/v1", "api_key": "${FG_TEST_UNSET_KEY}"},
        {
            "id": "p3",
            "base_url": "http://127.0.0.1:9/v1",
            "api_key": "sk-main",
            "keys": {"alt": "sk-alt", "gone": "${FG_TEST_UNSET_ALT}"},
        },
    ],
    "deployments": [
        {"id": "small", "model": "small", "provider": "p1", "context_window": 8192},
        {"id": "big-a", "model": "big", "provider": "p1", "context_window": 32768},
        {"id": "big-b", "model": "big", "provider": "p3", "context_window": 131072},
        {"id": "big-x", "model": "big", "provider": "nocred", "context_window": 65536},
        {"id": "think", "model": "think", "provider": "p3", "context_window": 65536},
    ],
    "tiers": {
        "simple": {"routes": [{"deployment": "small"}]},
        "default": {"routes": [{"deployment": "big-a"}, {"deployment": "big-b"}]},
        "reasoning": {"routes": [{"deployment": "think"}, {"deployment": "big-b"}]},
    },
    "virtual_models": [
        {
            "name": "Chat-Main",
            "routes": [{"deployment": "big-b"}, {"deployment": "small"}],
        }
    ],
    "auto": {},
}


def config(**changes: Any) -> dict[str, Any]:
    data = copy.deepcopy(BASE)
    for key, value in changes.items():
        if value is None:
            data.pop(key, None)
        else:
            data[key] = value
    return data


def fleet(data: dict[str, Any] | None = None) -> Fleet:
    return build_fleet(fleet_config(data or config()))


def profile(
    model: str,
    text: str = "hello there friend",
    headers: dict[str, str] | None = None,
    **body: Any,
) -> RequestProfile:
    payload = {"model": model, "messages": [{"role": "user", "content": text}], **body}
    p = parse_openai("chat.completions", orjson.dumps(payload))
    p.headers = headers or {}
    return p
