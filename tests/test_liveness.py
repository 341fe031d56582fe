"""Temporaries released in ``forward`` (codegen.liveness): a ``del`` after each local's last use,
never before a read, never of what the program returns or may not have assigned."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from thunder_aot.backends.base import Line
from thunder_aot.codegen.liveness import released

ROOT = Path(__file__).resolve().parent.parent


def _code(lines) -> list[str]:
    return [line.code for line in lines]


def test_a_local_is_released_after_its_last_read_and_returns_are_kept():
    steps = [Line("a = f(x)"), Line("b = g(a)"), Line("c = h(a, b)"), Line("d = k(c)"), Line("e = m(d, c)")]
    assert _code(released(steps, ["e"])) == [
        "a = f(x)",
        "b = g(a)",
        "c = h(a, b)",
        "del a, b",
        "d = k(c)",
        "e = m(d, c)",
    ]
    # a returned name stays; one assigned and never read goes at once
    assert _code(released([Line("a, unused = f(x)"), Line("b = g(a)"), Line("c = h(b)")], ["a", "c"])) == [
        "a, unused = f(x)",
        "del unused",
        "b = g(a)",
        "c = h(b)",
    ]


def test_names_assigned_on_one_path_inputs_and_helpers_are_left_alone():
    steps = [
        Line("if s0 > 1:\n    a = f(x)\nelse:\n    a = g(x)"),  # assigned inside a branch only
        Line("_ptr = a.data_ptr()\nb = k(a, _ptr)"),
        Line("x = x.contiguous()"),  # an input reassigned: a local from here on
        Line("c = h(b, x)"),
        Line("d = m(c)"),
    ]
    assert _code(released(steps, ["d"])) == [
        steps[0].code,
        steps[1].code,
        "x = x.contiguous()",
        "c = h(b, x)",
        "del x, b",
        "d = m(c)",
    ]


def _program_branches(tree: ast.Module):
    forward = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "forward")
    return [n.body for n in forward.body if isinstance(n, ast.If) and "program ==" in ast.unparse(n.test)]


GOLDEN = sorted(p for p in (ROOT / "generated").glob("*.py") if p.stem != "__init__")


@pytest.mark.parametrize("path", GOLDEN, ids=lambda p: p.stem)
def test_no_generated_forward_reads_a_name_after_deleting_it(path):
    """Every golden file's program branches, statement by statement: a deleted name is not read again
    unless assigned again first (the files run on the GPU only for nvFuser: this holds them too)."""
    tree = ast.parse(path.read_text())
    branches = _program_branches(tree)
    assert branches
    for body in branches:
        deleted: set[str] = set()
        for statement in body:
            names = [n for n in ast.walk(statement) if isinstance(n, ast.Name)]
            reads = {n.id for n in names if isinstance(n.ctx, ast.Load)}
            assert not reads & deleted, (path.name, ast.unparse(statement)[:200], reads & deleted)
            if isinstance(statement, ast.Delete):
                deleted |= {t.id for t in statement.targets}
            else:
                deleted -= {n.id for n in names}
