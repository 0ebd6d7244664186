"""The layers point one way: module-level imports inside ``router`` and ``workers`` form no circle,
the CLI is imported by nothing of the server's, and the wire, the worker connection and the error
tree sit below both the HTTP edge and the sessions."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("router", "workers")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _runtime_imports(path: Path, modules: set[str]) -> Iterator[str]:
    """What a module imports when it is imported: its top level, not ``if TYPE_CHECKING:``
    blocks, not function bodies (those load later, on use). ``from package import submodule``
    imports the submodule (the package is initialising already when its own modules do it)."""
    tree = ast.parse(path.read_text())
    package = _module_name(path) if path.name == "__init__.py" else _module_name(path).rpartition(".")[0]
    for node in tree.body:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            continue
        for child in [node] if not isinstance(node, ast.If | ast.Try) else ast.walk(node):
            if isinstance(child, ast.Import):
                yield from (alias.name for alias in child.names)
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    base = ".".join([*package.split(".")[: len(package.split(".")) - child.level + 1], base]).strip(".")
                names = [f"{base}.{alias.name}" for alias in child.names]
                yield from names
                if not all(name in modules for name in names):
                    yield base


def _graph() -> dict[str, set[str]]:
    modules = {
        _module_name(p): p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py") if "node_modules" not in p.parts
    }
    known = set(modules)
    return {
        name: {m for m in _runtime_imports(path, known) if m in known and m != name} for name, path in modules.items()
    }


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in graph[node]:
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_import_circle_at_run_time() -> None:
    assert _cycles(_graph()) == []


def _importers_of(prefix: str) -> dict[str, set[str]]:
    return {
        name: {m for m in imports if m == prefix or m.startswith(prefix + ".")}
        for name, imports in _graph().items()
        if any(m == prefix or m.startswith(prefix + ".") for m in imports)
    }


def test_nothing_outside_the_cli_imports_it() -> None:
    outside = {name: found for name, found in _importers_of("router.cli").items() if not name.startswith("router.cli")}
    assert outside == {}


@pytest.mark.parametrize(
    "low",
    ["router.errors", "router.protocol", "router.upstream", "router.sessions", "router.record", "workers"],
)
def test_the_lower_layers_do_not_import_the_http_edge(low: str) -> None:
    found = {name: m for name, m in _importers_of("router.http").items() if name == low or name.startswith(low + ".")}
    assert found == {}
