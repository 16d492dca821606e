"""`fleetgate check` reports every problem of every stage in one run, with its line."""

from __future__ import annotations

from pathlib import Path

from tests.test_config import run_cli

THREE_MISTAKES = """\
providers:
  - {id: local, base_url: "http://127.0.0.1:1/v1"}
deployments:
  - {id: short, model: qwen, provider: local, context_window: 1024}
  - {id: long, model: qwen, provider: local, context_window: 512, tier: long,
     contex_window: 4096}
virtual_models:
  - name: assistant
    routes:
      - model: Qwen
"""


def test_a_typo_a_wrong_id_and_an_inverted_tier_in_one_run(tmp_path: Path) -> None:
    path = tmp_path / "fleet.yaml"
    path.write_text(THREE_MISTAKES)
    result = run_cli("check", "--config", str(path))
    assert result.returncode == 1
    lines = result.stdout.splitlines()
    assert (
        f"{path}:6: error: deployments[1].contex_window: unknown field; did you mean "
        "'context_window'? (see docs/config.md)" in lines
    )
    assert (
        f"{path}:10: error: virtual_models[0].routes[0].model: unknown model 'Qwen': no "
        "deployment serves it; did you mean 'qwen'? (known: qwen)" in lines
    )
    inverted = [line for line in lines if "deployments[1].context_window" in line]
    assert len(inverted) == 1 and inverted[0].startswith(f"{path}:5: error:")
    assert "long tier's window (512) is not larger than the base tier's (1024" in inverted[0]
    assert f"{path}: 3 error(s)" in result.stderr


def test_an_entry_in_error_is_left_out_without_false_reports(tmp_path: Path) -> None:
    """A provider that fails the schema is left out of the later stages: the deployment on
    it is not also called a reference to an unknown provider, and the rest is checked."""
    path = tmp_path / "fleet.yaml"
    path.write_text(
        "providers:\n"
        "  - {id: p1, base_url: 'http://h/v1'}\n"
        "  - {id: p2, base_url: 'ftp://h'}\n"
        "deployments:\n"
        "  - {model: m, provider: p2}\n"
        "  - {model: m, provider: p1}\n"
        "  - {model: n, provider: pl}\n"
        "  - {provider: p1}\n"
        "  - {model: k, provider: p1, context_window: 8, tier: long}\n"
        "  - {model: k, provider: p1, upstream_model: k2, context_window: 16}\n"
    )
    result = run_cli("check", "--config", str(path))
    assert result.returncode == 1
    errors = [line.split(": error: ", 1)[1] for line in result.stdout.splitlines()]
    assert errors[:2] == [
        "providers[1].base_url: must be an http:// or https:// URL",
        "deployments[3].model: is required",
    ]
    assert "deployments[2].provider: unknown provider 'pl'; did you mean 'p1'? (known: p1)" in (
        errors
    )
    # the index is the file's, although an entry before it was left out
    assert any(e.startswith("deployments[4].context_window: the long tier's") for e in errors)
    assert not any("'p2'" in e for e in errors)
    assert len(errors) == 4


def test_check_lists_each_models_tier_labels(tmp_path: Path) -> None:
    path = tmp_path / "fleet.yaml"
    path.write_text(
        THREE_MISTAKES.replace("512", "8192")
        .replace("Qwen", "qwen")
        .replace(",\n     contex_window: 4096}", "}")
    )
    result = run_cli("check", "--config", str(path))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "  model qwen (context 8192; tiers default 1024, long 8192)" in result.stdout


def test_a_yaml_error_keeps_the_parsers_problem_column_and_a_quoting_hint(
    tmp_path: Path,
) -> None:
    path = tmp_path / "fleet.yaml"
    path.write_text("server: {port: 8080}\nproviders: []\nadmin: {key: ${FG_ADMIN_KEY}}\n")
    result = run_cli("check", "--config", str(path))
    assert result.returncode == 1
    (line,) = result.stdout.splitlines()
    assert line.startswith(f"{path}:3: error: (yaml): did not find expected ',' or '}}' ")
    assert "(column 15)" in line
    assert "while parsing a flow mapping that starts at line 3, column 8" in line
    assert "must be quoted" in line
    path.write_text("providers: [{id: p, base_url: 'http://h/v1'}\ndeployments: []\n")
    result = run_cli("check", "--config", str(path))
    (line,) = result.stdout.splitlines()
    assert "did not find expected ',' or ']'" in line and "quoted" not in line
