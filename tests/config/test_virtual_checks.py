"""`fleetgate check` on virtual models, tiers, auto and key labels."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

from fleetgate.cli import main
from fleetgate.config import check_config_text, load_config_text
from fleetgate.fleet import build_fleet
from tests.routing.fleets import BASE


def problems(data: dict[str, Any]) -> list[tuple[str, str, str]]:
    text = yaml.safe_dump(data, sort_keys=False)
    return [(p.severity, p.path, p.message) for p in check_config_text(text)]


def errors(data: dict[str, Any]) -> list[tuple[str, str]]:
    return [(path, msg) for sev, path, msg in problems(data) if sev == "error"]


def with_virtuals(*virtuals: dict[str, Any]) -> dict[str, Any]:
    data = copy.deepcopy(BASE)
    data["virtual_models"] = list(virtuals)
    return data


def test_the_base_config_is_clean() -> None:
    assert errors(BASE) == []


def test_unknown_route_targets() -> None:
    found = errors(
        with_virtuals(
            {
                "name": "v",
                "routes": [{"deployment": "nope"}, {"model": "ghost"}, {"deployment": "small"}],
            }
        )
    )
    assert found[0][0] == "virtual_models[0].routes[0].deployment"
    assert "unknown deployment 'nope'" in found[0][1]
    assert found[1][0] == "virtual_models[0].routes[1].model"
    assert "unknown model 'ghost'" in found[1][1]
    assert len(found) == 2


def test_unknown_tier_route_target() -> None:
    data = copy.deepcopy(BASE)
    data["tiers"]["simple"]["routes"].append({"deployment": "nope"})
    assert errors(data)[0][0] == "tiers.simple.routes[1].deployment"


def test_route_names_exactly_one_target() -> None:
    found = errors(
        with_virtuals({"name": "v", "routes": [{"deployment": "small", "model": "small"}, {}]})
    )
    assert [p for p, _ in found] == ["virtual_models[0].routes[0]", "virtual_models[0].routes[1]"]
    assert all("exactly one of" in m for _, m in found)


def test_duplicate_virtual_names_case_insensitive() -> None:
    found = errors(
        with_virtuals(
            {"name": "Assistant", "routes": [{"deployment": "small"}]},
            {"name": "assistant", "routes": [{"deployment": "small"}]},
        )
    )
    assert found == [
        (
            "virtual_models[1].name",
            "duplicate virtual model name 'assistant' (names are case-insensitive; "
            "'Assistant' comes first)",
        )
    ]


def test_shadowing_a_real_model_or_deployment_needs_allow_shadowing() -> None:
    found = errors(
        with_virtuals(
            {"name": "BIG", "routes": [{"deployment": "small"}]},
            {"name": "big-a", "routes": [{"deployment": "small"}]},
        )
    )
    assert [p for p, _ in found] == ["virtual_models[0].name", "virtual_models[1].name"]
    assert "shadows the real model or deployment id 'big'" in found[0][1]
    assert (
        errors(
            with_virtuals(
                {"name": "BIG", "allow_shadowing": True, "routes": [{"deployment": "small"}]},
            )
        )
        == []
    )


def test_at_most_twelve_routes() -> None:
    routes = [{"deployment": "small", "key_label": None}] * 13
    found = errors(with_virtuals({"name": "v", "routes": [{"deployment": "small"}] * 13}))
    assert found == [("virtual_models[0].routes", "has 13 routes; at most 12 are allowed")]
    assert errors(with_virtuals({"name": "v", "routes": routes[:12]})) == []


def test_key_label_must_exist_on_the_provider() -> None:
    found = errors(
        with_virtuals(
            {
                "name": "v",
                "routes": [
                    {"deployment": "big-b", "key_label": "alt"},
                    {"deployment": "small", "key_label": "alt"},
                    {"model": "big", "key_label": "alt"},
                ],
            }
        )
    )
    assert [p for p, _ in found] == [
        "virtual_models[0].routes[1].key_label",
        "virtual_models[0].routes[2].key_label",
        "virtual_models[0].routes[2].key_label",
    ]
    assert "provider 'p1' (of deployment 'small') has no key labelled 'alt'" in found[0][1]


def test_unset_key_label_env_is_a_warning() -> None:
    found = problems(BASE)
    assert (
        "warning",
        "providers[2].keys.gone",
        "env var FG_TEST_UNSET_ALT is not set; routes using key label 'gone' are "
        "unavailable until it is",
    ) in found


def test_auto_needs_its_default_tier_and_known_keyword_tiers() -> None:
    data = copy.deepcopy(BASE)
    del data["tiers"]["default"]
    data["auto"] = {"keywords": [{"tier": "turbo", "keywords": ["x"]}]}
    found = errors(data)
    assert (
        "auto.default_tier",
        "auto needs the tier 'default' (configured tiers: reasoning, simple)",
    ) in found
    assert (
        "auto.keywords[0].tier",
        "unknown tier 'turbo' (configured tiers: reasoning, simple)",
    ) in found


def test_params_and_header_validation() -> None:
    found = errors(
        with_virtuals(
            {
                "name": "v",
                "routes": [
                    {"deployment": "small", "params": {"temperature": 3}},
                    {"deployment": "small", "params": {"extra_body": {"model": "x", "stream": 1}}},
                ],
            }
        )
    )
    assert found[0][0] == "virtual_models[0].routes[0].params.temperature"
    assert found[1] == (
        "virtual_models[0].routes[1].params",
        "extra_body may not set model, stream",
    )
    data = copy.deepcopy(BASE)
    data["auto"] = {"stickiness": {"header": "session-id"}}
    assert errors(data) == [
        ("auto.stickiness.header", "must be a header name starting with X-Fleetgate-")
    ]


def test_continue_on_default_without_a_default_tier_warns(tmp_path, capsys) -> None:
    data = copy.deepcopy(BASE)
    data["auto"] = None
    data["tiers"] = {}
    data["virtual_models"][0]["continue_on_default"] = True
    found = problems(data)
    assert (
        "warning",
        "virtual_models[0].continue_on_default",
        "there is no tier named 'default', so nothing is appended",
    ) in found
    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump(data))
    assert main(["check", "--config", str(path)]) == 0
    assert "virtual model Chat-Main (any): deployment:big-b, deployment:small + default tier" in (
        capsys.readouterr().out
    )
    bad = with_virtuals({"name": "v", "routes": [{"deployment": "nope"}]})
    path.write_text(yaml.safe_dump(bad, sort_keys=False))
    assert main(["check", "--config", str(path)]) == 1
    out = capsys.readouterr().out
    assert "virtual_models[0].routes[0].deployment: unknown deployment 'nope'" in out


def test_the_documented_worked_config_is_valid(monkeypatch) -> None:
    doc = (Path(__file__).parents[2] / "docs" / "virtual-models.md").read_text()
    text = doc.split("```yaml\n", 1)[1].split("```", 1)[0]
    monkeypatch.setenv("OPENROUTER_API_KEY", "sk-1")
    monkeypatch.setenv("OPENROUTER_KEY_TEAM_B", "sk-2")
    assert check_config_text(text) == []
    fleet = build_fleet(load_config_text(text))
    assert fleet.virtual_models["support-bot"].context_length == 262144
    assert list(fleet.tiers) == ["simple", "default", "reasoning"]
