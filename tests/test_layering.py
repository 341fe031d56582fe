"""The package's stages import only downwards, and no module imports itself back through others:
runtime <- backends <- codegen <- passes <- frontend <- pipeline <- api/cli (docs/internals.md).
Every import counts, function-local ones included; those under ``if TYPE_CHECKING:`` do not."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.helpers import ROOT

PACKAGE = ROOT / "thunder_aot"

#: each stage's modules (prefixes of dotted names) by level: a module imports only from its own
#: level or below
STAGES: tuple[tuple[str, ...], ...] = (
    ("thunder_aot.errors", "thunder_aot.ir", "thunder_aot.shapes", "thunder_aot.runtime"),
    ("thunder_aot.request", "thunder_aot.verify"),
    ("thunder_aot.backends",),
    ("thunder_aot.codegen",),
    ("thunder_aot.passes",),
    ("thunder_aot.frontend",),
    ("thunder_aot.pipeline",),
    ("thunder_aot.api", "thunder_aot.integrations", "thunder_aot.swap", "thunder_aot.examples"),
    ("thunder_aot.bench",),
    ("thunder_aot.arguments", "thunder_aot.cli", "thunder_aot.__main__", "thunder_aot"),
)


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _type_checking_only(node: ast.AST, parents: dict[ast.AST, ast.AST]) -> bool:
    while node in parents:
        node = parents[node]
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            return True
    return False


def imports(path: Path, modules: set[str]) -> set[str]:
    """The package's modules that ``path`` imports (``from a import b`` counts ``a.b`` where that
    is a module, else ``a``)."""
    tree = ast.parse(path.read_text())
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    found: set[str] = set()
    for node in ast.walk(tree):
        if _type_checking_only(node, parents):
            continue
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("thunder_aot")}
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("thunder_aot"):
            for a in node.names:
                full = f"{node.module}.{a.name}"
                found.add(full if full in modules else node.module)
    return found & modules


def graph() -> dict[str, set[str]]:
    files = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    return {name: imports(path, set(files)) - {name} for name, path in files.items()}


def level(module: str) -> int:
    for i, stage in enumerate(STAGES):
        if any(module == p or module.startswith(p + ".") for p in stage if p != "thunder_aot"):
            return i
    assert module == "thunder_aot", module
    return len(STAGES) - 1


def test_no_module_imports_from_a_later_stage():
    upward = [
        f"{a} (stage {level(a)}) imports {b} (stage {level(b)})"
        for a, targets in sorted(graph().items())
        for b in sorted(targets)
        if level(b) > level(a) and b != "thunder_aot"  # the package's own __version__ is everyone's
    ]
    assert not upward, "\n".join(upward)


def test_no_import_cycles():
    edges = graph()
    cycles: list[list[str]] = []
    state: dict[str, int] = {}  # 1: on the path, 2: done
    path: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(edges[node] - {"thunder_aot"}):
            if state.get(nxt) == 1:
                cycles.append(path[path.index(nxt) :] + [nxt])
            elif nxt not in state:
                visit(nxt)
        path.pop()
        state[node] = 2

    for node in sorted(edges):
        if node not in state:
            visit(node)
    assert not cycles, "\n".join(" -> ".join(c) for c in cycles)


@pytest.mark.parametrize("limit", [500])
def test_long_files_say_why(limit):
    """A file over 500 lines says in its docstring why it is one file."""
    long = []
    for path in sorted(PACKAGE.rglob("*.py")):
        lines = path.read_text().splitlines()
        if len(lines) > limit:
            doc = ast.get_docstring(ast.parse("\n".join(lines))) or ""
            if "one file" not in doc and "one module" not in doc:
                long.append(f"{path.relative_to(ROOT)} ({len(lines)} lines)")
    assert not long, long
