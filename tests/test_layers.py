"""The package's layers, as docs/architecture.md states them, read off every import in the source.

Imports are read with :mod:`ast` (module level and inside functions alike; only ``if TYPE_CHECKING:``
blocks are left out, as they never run), so a new upward import or a cycle fails here with the
module and the line, rather than surfacing later as a circular-import error or a tangled layer.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import pytest

PACKAGE = "django_wakes"
ROOT = Path(__file__).resolve().parent.parent / PACKAGE

#: The vocabulary: what a wake is and its rules. Imports nothing above itself.
VOCABULARY = {
    "approval_links",
    "clock",
    "conf",
    "dbcompat",
    "deliveries",
    "durations",
    "events",
    "exceptions",
    "fields",
    "indexes",
    "logs",
    "tracing",
    "models",
    "querysets",
    "receipts",
    "signals",
    "sinks",
    "states",
    "text",
    "timeutil",
    "transient",
    "validation",
    "migrations",
}
#: Each layer and the layers it may import (besides itself). The wiring sits on top and may import any.
ALLOWED: dict[str, set[str]] = {
    "vocabulary": set(),
    "schedules": {"vocabulary"},
    "engine": {"vocabulary", "schedules"},
    "runner": {"vocabulary", "schedules", "engine"},
    "console": {"vocabulary", "schedules", "engine"},
    "web": {"vocabulary", "schedules", "engine"},
    "agents": {"vocabulary", "schedules", "engine"},
    "tasks": {"vocabulary", "schedules", "engine"},
}
#: Top-level modules that wire the layers into Django (app config, checks, URLconf, admin and
#: template-tag discovery, commands, the documented re-exports and test helpers).
WIRING = {"", "apps", "checks", "urls", "admin", "tools", "testing", "templatetags", "management"}
#: No module of the package is longer than this (migrations aside, which are generated): a room one can
#: hold in one's head. A module that grows past it is split by what it is about (docs/architecture.md).
MAX_MODULE_LINES = 600


def layer_of(module: str) -> str:
    """The layer of ``django_wakes.<...>``: its sub-package, or the vocabulary / wiring for top-level modules."""
    parts = module.split(".")[1:]
    head = parts[0] if parts else ""
    if head in ALLOWED:
        return head
    if head in VOCABULARY:
        return "vocabulary"
    if head in WIRING:
        return "wiring"
    raise AssertionError(f"{module}: not in any layer; place it in docs/architecture.md and this test")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _runtime_nodes(tree: ast.AST) -> list[ast.AST]:
    """Every node except the bodies of ``if TYPE_CHECKING:`` blocks."""
    out: list[ast.AST] = []
    stack = [tree]
    while stack:
        node = stack.pop()
        out.append(node)
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                stack.extend(child.orelse)
                continue
            stack.append(child)
    return out


def read_imports() -> dict[str, list[tuple[str, int]]]:
    """Module -> the package modules it imports, with the line of each import."""
    modules = {module_name(p): p for p in ROOT.rglob("*.py")}
    graph: dict[str, list[tuple[str, int]]] = defaultdict(list)
    for module, path in modules.items():
        package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
        for node in _runtime_nodes(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[: len(package.split(".")) - node.level + 1]
                    target = ".".join(base + ([node.module] if node.module else []))
                else:
                    target = node.module or ""
                if not (target == PACKAGE or target.startswith(PACKAGE + ".")):
                    continue
                for alias in node.names:
                    sub = f"{target}.{alias.name}"
                    graph[module].append((sub if sub in modules else target, node.lineno))
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.startswith(PACKAGE + "."):
                        graph[module].append((alias.name, node.lineno))
    return {m: [(t, line) for t, line in deps if t != m] for m, deps in graph.items()}


def test_every_import_runs_down_the_layers():
    wrong = []
    for module, deps in sorted(read_imports().items()):
        source = layer_of(module)
        if source == "wiring":
            continue
        for target, line in deps:
            if target == PACKAGE:  # the package root re-exports every layer: never import it from inside
                wrong.append(f"{module}:{line} imports the package root {PACKAGE}")
                continue
            dest = layer_of(target)
            if dest == "wiring":
                wrong.append(f"{module}:{line} ({source}) imports {target} (wiring)")
            elif dest != source and dest not in ALLOWED[source]:
                wrong.append(f"{module}:{line} ({source}) imports {target} ({dest})")
    assert not wrong, "imports against the layers of docs/architecture.md:\n" + "\n".join(wrong)


def test_no_import_cycle_between_modules():
    graph = {m: {t for t, _ in deps} for m, deps in read_imports().items()}
    cycles: list[list[str]] = []
    state: dict[str, int] = {}  # 1: on the path, 2: done

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                cycles.append([*path[path.index(nxt) :], nxt])
            elif nxt not in state:
                visit(nxt, [*path, nxt])
        state[node] = 2

    for start in sorted(graph):
        if start not in state:
            visit(start, [start])
    assert not cycles, "import cycles:\n" + "\n".join(" -> ".join(c) for c in cycles)


def test_no_module_is_too_big_to_hold_in_ones_head():
    too_big = [
        f"{module_name(path)}: {lines} lines"
        for path in sorted(ROOT.rglob("*.py"))
        if "migrations" not in path.relative_to(ROOT).parts
        and (lines := len(path.read_text().splitlines())) > MAX_MODULE_LINES
    ]
    assert not too_big, f"modules over {MAX_MODULE_LINES} lines (split each by subject):\n" + "\n".join(too_big)


@pytest.mark.parametrize("layer", ["schedules", "engine", "runner", "console", "web", "agents", "tasks"], ids=str)
def test_each_layer_is_a_package_on_disk(layer):
    assert (ROOT / layer / "__init__.py").is_file()
