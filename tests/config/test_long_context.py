"""Context tiers as data: the `long_context` block, direct tiers, `name@window` references."""

from __future__ import annotations

from typing import Any

from fleetgate.config import check_config_text, validate_config
from fleetgate.config.tiers import expand_tiers, split_window_suffix
from fleetgate.fleet import build_fleet

PROVIDERS = [{"id": "base", "kind": "vllm", "base_url": "http://10.0.0.1:8000/v1"}]


def _config(long_context: dict[str, Any] | None, **deployment: Any) -> dict[str, Any]:
    model: dict[str, Any] = {"id": "m"}
    if long_context is not None:
        model["long_context"] = long_context
    return {
        "providers": PROVIDERS,
        "deployments": [{"model": "m", "provider": "base", "upstream_model": "up", **deployment}],
        "models": [model],
    }


def _errors(data: dict[str, Any]) -> list[str]:
    config, problems = validate_config(data)
    assert config is None
    return [str(p) for p in problems if p.severity == "error"]


def test_block_expands_into_a_long_deployment() -> None:
    block = {
        "inference_url": "http://10.0.0.9:8000/v1",
        "max_context_tokens": 1048576,
        "base_max_context_tokens": 262144,
    }
    config, problems = validate_config(_config(block))
    assert config is not None, problems
    fleet = build_fleet(config)
    model = fleet.models["m"]
    assert [(d.id, d.tier, d.context_window) for d in model.deployments] == [
        ("base/up", "default", 262144),
        ("m@long", "long", 1048576),
    ]
    long = fleet.deployments["m@long"]
    assert long.provider.base_url == "http://10.0.0.9:8000/v1"
    assert long.provider.kind == "vllm"  # inherited from the base deployment's provider
    assert long.upstream_model == "up"
    assert model.context_length == 1048576


def test_block_with_an_existing_provider_matches_direct_tiers() -> None:
    providers = [*PROVIDERS, {"id": "big", "kind": "vllm", "base_url": "http://10.0.0.9/v1"}]
    block = {"provider": "big", "max_context_tokens": 10000, "base_max_context_tokens": 1000}
    via_block = _config(block)
    via_block["providers"] = providers
    direct = {
        "providers": providers,
        "deployments": [
            {"model": "m", "provider": "base", "upstream_model": "up", "context_window": 1000},
            {
                "id": "m@long",
                "model": "m",
                "provider": "big",
                "upstream_model": "up",
                "context_window": 10000,
                "tier": "long",
            },
        ],
        "models": [{"id": "m"}],
    }

    def shape(data: dict[str, Any]) -> list[tuple[Any, ...]]:
        config, problems = validate_config(data)
        assert config is not None, problems
        deps = build_fleet(config).models["m"].deployments
        return [(d.id, d.provider.id, d.tier, d.context_window) for d in deps]

    assert shape(via_block) == shape(direct)


def test_no_block_is_identity() -> None:
    config, _ = validate_config(_config(None, context_window=4096))
    assert config is not None
    assert expand_tiers(config) is config


def test_invalid_blocks_are_rejected_with_the_reason() -> None:
    missing = _errors(_config({"inference_url": "http://h/v1", "max_context_tokens": 10}))
    assert any("base_max_context_tokens: is required" in e for e in missing)

    not_larger = _errors(
        _config(
            {
                "inference_url": "http://h/v1",
                "max_context_tokens": 1000,
                "base_max_context_tokens": 1000,
            }
        )
    )
    assert any(
        "max_context_tokens: must be larger than base_max_context_tokens" in e for e in not_larger
    )

    bad_url = _errors(
        _config({"inference_url": "h:8000", "max_context_tokens": 10, "base_max_context_tokens": 5})
    )
    assert any("inference_url: must be an http:// or https:// URL" in e for e in bad_url)

    neither = _errors(_config({"max_context_tokens": 10, "base_max_context_tokens": 5}))
    assert any("exactly one of `inference_url` or `provider`" in e for e in neither)

    unknown = _errors(
        _config({"provider": "nope", "max_context_tokens": 10, "base_max_context_tokens": 5})
    )
    assert any("unknown provider 'nope'" in e for e in unknown)

    base_too_big = _errors(
        _config(
            {"provider": "base", "max_context_tokens": 10, "base_max_context_tokens": 5},
            context_window=10,
        )
    )
    assert any("deployments[0].context_window" in e for e in base_too_big)


def test_invalid_block_is_reported_with_its_line() -> None:
    text = """
providers:
  - {id: base, kind: vllm, base_url: "http://10.0.0.1/v1"}
deployments:
  - {model: m, provider: base}
models:
  - id: m
    long_context:
      inference_url: "http://10.0.0.9/v1"
      max_context_tokens: 100
      base_max_context_tokens: 200
"""
    problems = check_config_text(text)
    assert [p.line for p in problems if "max_context_tokens" in p.path] == [10]


def test_window_suffix_on_a_model_reference() -> None:
    assert split_window_suffix("vendor/model-x@1048576") == ("vendor/model-x", 1048576)
    assert split_window_suffix("vendor/model-x") == ("vendor/model-x", None)
    config, _ = validate_config(_config(None, upstream_model="vendor/model-x@1048576"))
    assert config is not None
    dep = build_fleet(config).models["m"].deployments[0]
    assert (dep.upstream_model, dep.context_window) == ("vendor/model-x", 1048576)
    assert dep.id == "base/vendor/model-x@1048576"  # the id keeps the configured text
    # without the suffix the window is unknown
    config, _ = validate_config(_config(None, upstream_model="vendor/model-x"))
    assert config is not None
    assert build_fleet(config).models["m"].deployments[0].context_window is None
    # an explicit window keeps a name that happens to end in @digits verbatim
    config, _ = validate_config(_config(None, upstream_model="claude@20240620", context_window=9))
    assert config is not None
    dep = build_fleet(config).models["m"].deployments[0]
    assert (dep.upstream_model, dep.context_window) == ("claude@20240620", 9)


def test_context_guard_settings() -> None:
    data = _config(None, context_window=100)
    data["models"][0]["context_guard"] = "reject"
    data["routing"] = {"context": {"guard": "allow", "margin_percent": 10}}
    config, problems = validate_config(data)
    assert config is not None, problems
    fleet = build_fleet(config)
    assert fleet.models["m"].context_guard == "reject"
    assert fleet.config.routing.context.margin_percent == 10
    data["models"][0]["context_guard"] = "maybe"
    assert any("context_guard" in e for e in _errors(data))
