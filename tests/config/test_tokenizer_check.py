"""`fleetgate check` on a deployment's local `tokenizer:` file."""

from __future__ import annotations

from pathlib import Path

import yaml

from fleetgate.config import check_config_text


def _problems(tokenizer: str) -> list[tuple[str, str, str]]:
    data = {
        "providers": [{"id": "p", "kind": "llamacpp", "base_url": "http://127.0.0.1:9/v1"}],
        "deployments": [{"id": "d", "model": "m", "provider": "p", "tokenizer": tokenizer}],
    }
    text = yaml.safe_dump(data, sort_keys=False)
    return [(p.severity, p.path, p.message) for p in check_config_text(text)]


def test_a_missing_tokenizer_file_is_a_warning(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere" / "tokenizer.json"
    [(severity, path, message)] = _problems(str(missing))
    assert (severity, path) == ("warning", "deployments[0].tokenizer")
    assert str(missing) in message and "fall back to the estimate" in message


def test_an_existing_tokenizer_file_passes(tmp_path: Path) -> None:
    present = tmp_path / "tokenizer.json"
    present.write_text("{}")
    assert _problems(str(present)) == []
