"""Read a fleet config (YAML or a dict), validate it whole, report every problem by path."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from fleetgate.config.registry import SEMANTIC_CHECKS, Loc, SemanticCheck
from fleetgate.config.schema import FleetConfig


@dataclass(frozen=True, slots=True)
class Problem:
    path: str
    message: str
    line: int | None = None
    severity: str = "error"  # "error" | "warning"

    def __str__(self) -> str:
        where = f"line {self.line}: " if self.line else ""
        return f"{where}{self.path}: {self.message}"


class ConfigError(Exception):
    """The config is invalid; `problems` lists every error found."""

    def __init__(self, problems: list[Problem], source: str = "config") -> None:
        self.problems = problems
        lines = "\n".join(f"  {p}" for p in problems)
        super().__init__(f"{source} is invalid ({len(problems)} problem(s)):\n{lines}")


@cache
def registered_checks() -> tuple[SemanticCheck, ...]:
    """Every whole-tree check. The check modules register themselves (`registry.py`) when
    imported; they are imported here, on first validation, not when the config package is."""
    from fleetgate.config import (  # noqa: F401
        chain_checks,
        checks,
        context_checks,
        preference_checks,
    )

    return tuple(SEMANTIC_CHECKS)


def format_loc(loc: Loc) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out or "(root)"


# libyaml's parser where PyYAML was built with it (its wheels are): the same documents and
# errors, about a tenth of the pure-Python parser's time (a 20-provider file: 31 -> 3.4 ms
# for the two parses a load makes, on the start's path)
_SAFE_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _line_map(text: str) -> dict[Loc, int]:
    """Map each path in the YAML document to its 1-based line number."""
    lines: dict[Loc, int] = {}
    try:
        root = yaml.compose(text, Loader=_SAFE_LOADER)
    except yaml.YAMLError:
        return lines

    def walk(node: yaml.Node, loc: Loc) -> None:
        lines[loc] = node.start_mark.line + 1
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                child = (*loc, str(key.value))
                lines[child] = key.start_mark.line + 1
                walk(value, child)
                lines[child] = key.start_mark.line + 1
        elif isinstance(node, yaml.SequenceNode):
            for i, item in enumerate(node.value):
                walk(item, (*loc, i))

    if root is not None:
        walk(root, ())
    return lines


def _nearest_line(lines: dict[Loc, int], loc: Loc) -> int | None:
    while True:
        if loc in lines:
            return lines[loc]
        if not loc:
            return None
        loc = loc[:-1]


def _message(err: Any) -> str:
    kind = err["type"]
    ctx = err.get("ctx") or {}
    if kind == "greater_than" and ctx.get("gt") == 0:
        return (
            "must be a positive number"
            if "float" in str(err.get("input"))
            else ("must be a positive integer")
        )
    if kind in ("int_type", "int_parsing", "int_from_float"):
        return "must be an integer"
    if kind == "extra_forbidden":
        return "unknown field (check the spelling; see docs/config.md)"
    if kind == "missing":
        return "is required"
    msg: str = err["msg"]
    return msg.removeprefix("Value error, ")


def validate_config(data: Any, text: str | None = None) -> tuple[FleetConfig | None, list[Problem]]:
    """Validate a parsed config; return the tree (or None) and every problem found."""
    lines = _line_map(text) if text else {}
    if data is None:
        data = {}
    if not isinstance(data, dict):
        return None, [Problem("(root)", "must be a mapping of sections", 1)]
    try:
        config = FleetConfig.model_validate(data)
    except ValidationError as exc:
        problems = []
        for err in exc.errors():
            loc = tuple(p for p in err["loc"] if not (isinstance(p, str) and "[" in p))
            problems.append(Problem(format_loc(loc), _message(err), _nearest_line(lines, loc)))
        return None, problems
    problems = []
    for check in registered_checks():
        for loc, message in check(config):
            severity = "warning" if message.startswith("warning: ") else "error"
            problems.append(
                Problem(
                    format_loc(loc),
                    message.removeprefix("warning: "),
                    _nearest_line(lines, loc),
                    severity,
                )
            )
    if any(p.severity == "error" for p in problems):
        return None, problems
    return config, problems


def parse_yaml(text: str, source: str = "config") -> Any:
    try:
        return yaml.load(text, Loader=_SAFE_LOADER)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark is not None else None
        raise ConfigError([Problem("(yaml)", str(exc).splitlines()[0], line)], source) from exc


def load_config_text(text: str, source: str = "config") -> FleetConfig:
    config, problems = validate_config(parse_yaml(text, source), text)
    if config is None:
        raise ConfigError([p for p in problems if p.severity == "error"], source)
    return config


def load_config_file(path: str | Path) -> FleetConfig:
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError([Problem(str(path), f"cannot read: {exc.strerror}")], str(path)) from exc
    return load_config_text(text, str(path))


def check_config_text(text: str, source: str = "config") -> list[Problem]:
    """Every problem (errors and warnings) in a config text; empty when it is clean."""
    try:
        data = parse_yaml(text, source)
    except ConfigError as exc:
        return exc.problems
    return validate_config(data, text)[1]
