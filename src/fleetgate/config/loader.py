"""Read a fleet config (YAML or a dict), validate it whole, report every problem by path."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, get_args, get_origin

import yaml
from pydantic import BaseModel, ValidationError

from fleetgate.config.registry import SEMANTIC_CHECKS, Loc, SemanticCheck
from fleetgate.config.schema import FleetConfig
from fleetgate.config.suggest import did_you_mean


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


def _model_at(loc: Loc) -> type[BaseModel] | None:
    """The config model whose fields `loc` (a path into the tree) names, if any."""
    cls: type[BaseModel] | None = FleetConfig
    keyed = False  # the next part is a key of a mapping (a tier's name), not a field
    for part in loc:
        if isinstance(part, int) or cls is None:
            continue
        if keyed:
            keyed = False
            continue
        field = cls.model_fields.get(part)
        if field is None:
            return None
        cls, keyed = _model_in(field.annotation)
    return None if keyed else cls


def _model_in(annotation: Any) -> tuple[type[BaseModel] | None, bool]:
    """The model a field's type holds (through Optional, list, dict, Annotated), and whether
    it sits in a mapping."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation, False
    mapping = get_origin(annotation) in (dict, Mapping)
    for arg in get_args(annotation):
        found, keyed = _model_in(arg)
        if found is not None:
            return found, keyed or mapping
    return None, False


def _unknown_field(loc: Loc) -> str:
    model = _model_at(loc[:-1])
    hint = did_you_mean(str(loc[-1]), model.model_fields) if model is not None else ""
    if hint:
        return f"unknown field{hint} (see docs/config.md)"
    return "unknown field (check the spelling; see docs/config.md)"


def _message(err: Any, loc: Loc = ()) -> str:
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
        return _unknown_field(loc)
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
            loc = _clean(err["loc"])
            problems.append(Problem(format_loc(loc), _message(err, loc), _nearest_line(lines, loc)))
        # the other stages still run, on the tree without the parts in error, so one run
        # reports every problem (`fleetgate check`)
        return None, problems + _problems_beyond(data, exc, lines)
    problems = _semantic_problems(config, lines)
    if any(p.severity == "error" for p in problems):
        return None, problems
    return config, problems


def _clean(loc: tuple[Any, ...]) -> Loc:
    return tuple(p for p in loc if not (isinstance(p, str) and "[" in p))


def _semantic_problems(
    config: FleetConfig, lines: dict[Loc, int], repair: _Repair | None = None
) -> list[Problem]:
    problems = []
    for check in registered_checks():
        for loc, message in check(config):
            if repair is not None:
                if repair.touches(message):
                    continue  # about a part in error, already reported
                loc = repair.original(loc)
            severity = "warning" if message.startswith("warning: ") else "error"
            problems.append(
                Problem(
                    format_loc(loc),
                    message.removeprefix("warning: "),
                    _nearest_line(lines, loc),
                    severity,
                )
            )
    return problems


class _Repair:
    """The tree with each part in error taken out (a field: its default applies; a list
    entry missing a required field: the entry), and how to map paths back."""

    def __init__(self, data: dict[str, Any]) -> None:
        self.data = copy.deepcopy(data)
        self.indices: dict[Loc, list[int]] = {}  # a list's path -> its entries' first index
        self.removed: set[str] = set()  # ids and names of removed entries

    def remove(self, errors: list[Any]) -> bool:
        """Take out what each error names; False when nothing could be."""
        targets: set[Loc] = set()
        for err in errors:
            loc = _clean(err["loc"])
            if err["type"] == "missing":
                ints = [i for i, p in enumerate(loc) if isinstance(p, int)]
                loc = loc[: ints[-1] + 1] if ints else loc[:-1]
            if loc:
                targets.add(loc)
        done = False
        # the deepest and last first, so one removal never shifts another's path
        for loc in sorted(targets, key=lambda t: (len(t), [str(p).zfill(9) for p in t]))[::-1]:
            done = self._remove(loc) or done
        return done

    def _remove(self, loc: Loc) -> bool:
        parent: Any = self.data
        for part in loc[:-1]:
            try:
                parent = parent[part]
            except (KeyError, IndexError, TypeError):
                return False
        last = loc[-1]
        if isinstance(parent, list) and isinstance(last, int) and last < len(parent):
            entry = parent.pop(last)
            if isinstance(entry, dict):
                self._note(entry)
            indices = self.indices.setdefault(loc[:-1], list(range(len(parent) + 1)))
            del indices[last]
            return True
        if isinstance(parent, dict) and last in parent:
            del parent[last]
            return True
        return False

    def _note(self, entry: dict[str, Any]) -> None:
        for key in ("id", "name", "model"):
            if isinstance(entry.get(key), str):
                self.removed.add(entry[key])
        if isinstance(entry.get("provider"), str) and isinstance(entry.get("model"), str):
            upstream = entry.get("upstream_model") or entry["model"]
            self.removed.add(f"{entry['provider']}/{upstream}")

    def touches(self, message: str) -> bool:
        return any(repr(name) in message for name in self.removed)

    def original(self, loc: Loc) -> Loc:
        out: list[str | int] = []
        for i, part in enumerate(loc):
            indices = self.indices.get(loc[:i])
            if isinstance(part, int) and indices is not None and part < len(indices):
                part = indices[part]
            out.append(part)
        return tuple(out)


def _problems_beyond(
    data: dict[str, Any], exc: ValidationError, lines: dict[Loc, int]
) -> list[Problem]:
    """The reference and semantic problems of a tree whose schema failed (see `_Repair`)."""
    repair = _Repair(data)
    errors = exc.errors()
    for _ in range(4):
        if not repair.remove(errors):
            return []
        try:
            config = FleetConfig.model_validate(repair.data)
        except ValidationError as again:
            errors = again.errors()
            continue
        return _semantic_problems(config, lines, repair)
    return []


def parse_yaml(text: str, source: str = "config") -> Any:
    try:
        return yaml.load(text, Loader=_SAFE_LOADER)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark is not None else None
        problem = Problem("(yaml)", yaml_message(exc, text), line)
        raise ConfigError([problem], source) from exc


def yaml_message(exc: yaml.YAMLError, text: str) -> str:
    """The parser's own problem with its column, what it was parsing and where that began,
    and a hint when a `${...}` reference sits unquoted in a flow (`{...}`, `[...]`) block."""
    problem = getattr(exc, "problem", None)
    mark = getattr(exc, "problem_mark", None)
    if not problem:
        return str(exc).splitlines()[0]
    message = str(problem).strip()
    if mark is not None:
        message += f" (column {mark.column + 1})"
    context = getattr(exc, "context", None)
    context_mark = getattr(exc, "context_mark", None)
    if context:
        message += f", {str(context).strip()}"
        if context_mark is not None:
            message += f" that starts at line {context_mark.line + 1}, column "
            message += f"{context_mark.column + 1}"
    lines = text.splitlines()
    marks = [m for m in (mark, context_mark) if m is not None and m.line < len(lines)]
    if any(_unquoted_ref_in_flow(lines[m.line]) for m in marks):
        message += (
            "; a ${...} reference inside {...} or [...] must be quoted, e.g. "
            '{key: "${FLEETGATE_ADMIN_KEY}"}, or written in block style'
        )
    return message


def _unquoted_ref_in_flow(line: str) -> bool:
    """Whether the line has an unquoted `${` after a `{` or `[` opens a flow collection."""
    opened = False
    quote = ""
    for i, ch in enumerate(line):
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "#":
            return False
        elif ch in "{[":
            if ch == "{" and line[i - 1 : i] == "$":
                if opened:
                    return True
                continue
            opened = True
    return False


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
