"""The floors of docs/architecture.md hold: no import circle anywhere in the package, no
import that runs up a floor, and no front that imports another front.

Every import counts: module-level, inside a function, and under `TYPE_CHECKING` alike (a
type-only import that closes a loop means a type lives on the wrong floor).
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "fleetgate"

# docs/architecture.md, from the ground up: a module may import its own floor and below
FLOORS: list[tuple[str, set[str]]] = [
    (
        "foundation",
        {"errors", "redact", "outage", "gc_tuning", "web", "trace_context", "__init__"},
    ),
    ("fleet model", {"config", "fleet"}),
    (
        "stages",
        {
            "ingress",
            "context",
            "translate",
            "routing",
            "discovery",
            "state",
            "execute",
            "record",
            "auth",
            "store",
            "telemetry",
        },
    ),
    ("pipeline", {"pipeline"}),
    ("control plane", {"control"}),
    ("fronts", {"server", "admin", "ui", "epp"}),
    (
        "entry",
        {"assemble", "cli", "commands", "launch", "__main__", "demo", "diagnose", "testing"},
    ),
]
FRONTS = {"server", "admin", "ui", "epp"}


def _modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__" and len(parts) > 1:
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


MODULES = _modules()


def _resolve(name: str) -> str | None:
    """The package module that `import name` loads last (its longest known prefix)."""
    while name:
        if name in MODULES:
            return name
        name = name.rpartition(".")[0]
    return None


def import_graph() -> dict[str, set[str]]:
    """module -> the package modules it imports, wherever in the file it does."""
    edges: dict[str, set[str]] = defaultdict(set)
    for module, path in MODULES.items():
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*anchor, *([base] if base else [])])
                # `from pkg import mod` imports the module `pkg.mod`
                targets = [
                    f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else base
                    for alias in node.names
                ]
            for target in targets:
                if not target.startswith("fleetgate"):
                    continue
                resolved = _resolve(target)
                assert resolved is not None, f"{module} imports {target}, which does not exist"
                if resolved != module:
                    edges[module].add(resolved)
    return edges


def circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for root in sorted(MODULES):
        if root in index:
            continue
        work = [(root, iter(sorted(edges.get(root, ()))))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def top(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def floor_of(module: str) -> int:
    name = top(module)
    for number, (_title, members) in enumerate(FLOORS):
        if name in members:
            return number
    raise AssertionError(
        f"{module} is on no floor: add `{name}` to docs/architecture.md and to FLOORS here"
    )


def test_every_module_is_on_a_floor() -> None:
    for module in MODULES:
        floor_of(module)


def test_no_import_circles() -> None:
    edges = import_graph()
    found = circles(edges)
    described = [
        " ; ".join(f"{a} -> {b}" for a in c for b in sorted(edges[a] & set(c))) for c in found
    ]
    assert not found, "import circles:\n" + "\n".join(described)


def test_imports_point_down_the_floors() -> None:
    upward = [
        f"{a} ({FLOORS[floor_of(a)][0]}) -> {b} ({FLOORS[floor_of(b)][0]})"
        for a, targets in import_graph().items()
        for b in targets
        if floor_of(b) > floor_of(a)
    ]
    assert not upward, "imports that run up a floor:\n" + "\n".join(sorted(upward))


def test_fronts_do_not_import_each_other() -> None:
    crossing = [
        f"{a} -> {b}"
        for a, targets in import_graph().items()
        for b in targets
        if top(a) in FRONTS and top(b) in FRONTS and top(a) != top(b)
    ]
    assert not crossing, "fronts that import another front:\n" + "\n".join(sorted(crossing))


@pytest.mark.parametrize(
    ("edges", "expected"),
    [
        ({"a": {"b"}, "b": {"a"}}, [["a", "b"]]),
        ({"a": {"b"}, "b": {"c"}, "c": {"a"}}, [["a", "b", "c"]]),
        ({"a": {"b"}, "b": {"c"}}, []),
    ],
)
def test_the_circle_finder_finds_circles(
    edges: dict[str, set[str]], expected: list[list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("tests.test_floors.MODULES", {name: Path(name) for name in ("a", "b", "c")})
    assert circles(edges) == expected
