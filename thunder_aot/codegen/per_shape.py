"""Values a program computes from its bucket's dynamic dims alone, bound once per input shape.

A program's statements build tuples from its dims on every call: an output's shape and strides
for ``empty_strided_cuda``, the shape of a reshape. Where the module has a guard table, such a
tuple is the same for every call of one shape, so it is made once, when ``_dispatch`` records the
shape (by the program's ``_sizes_of_<k>`` function), and the call unpacks it from the guard
entry's ``sizes`` with the dims themselves. Names say what a value is where that is known (the
shape and strides of the tensor an allocation makes), else ``_shape_<n>``.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

from thunder_aot.backends.base import Line

#: the allocation whose first two arguments are a tensor's shape and strides
ALLOCATOR = "empty_strided_cuda"


@dataclass(frozen=True)
class PerShape:
    """A program's statements with its dim-only tuples replaced by names, and what those names and
    the dims it still reads are bound to: ``values`` in the order ``sizes`` holds them."""

    steps: tuple[Line, ...]
    values: tuple[tuple[str, str], ...]  # (name, Python text in the dims), dims first


def _is_dim_only(node: ast.AST, dims: set[str]) -> bool:
    """An expression of int constants and these dims, with + - * // only."""
    if isinstance(node, ast.Constant):
        return type(node.value) is int
    if isinstance(node, ast.Name):
        return node.id in dims
    if isinstance(node, ast.BinOp):
        return (
            isinstance(node.op, (ast.Add, ast.Sub, ast.Mult, ast.FloorDiv))
            and _is_dim_only(node.left, dims)
            and _is_dim_only(node.right, dims)
        )
    if isinstance(node, ast.UnaryOp):
        return isinstance(node.op, ast.USub) and _is_dim_only(node.operand, dims)
    if isinstance(node, ast.Tuple):
        return isinstance(node.ctx, ast.Load) and all(_is_dim_only(e, dims) for e in node.elts)
    return False


def _mentions(node: ast.AST, dims: set[str]) -> bool:
    return any(isinstance(n, ast.Name) and n.id in dims for n in ast.walk(node))


def _tuples(tree: ast.AST, dims: set[str]) -> list[ast.Tuple]:
    """The outermost tuples built from the dims alone (and at least one of them)."""
    found: list[ast.Tuple] = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.Tuple) and _is_dim_only(node, dims) and _mentions(node, dims):
            found.append(node)
            return
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return found


def _role_names(tree: ast.AST) -> dict[int, str]:
    """id of a tuple node -> the name its role gives it: ``<t>_shape`` and ``<t>_strides`` for the
    first two arguments of an allocation assigned to ``t``."""
    names: dict[int, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            target = node.targets[0].id
            for call in ast.walk(node.value):
                if (
                    isinstance(call, ast.Call)
                    and isinstance(call.func, ast.Name)
                    and call.func.id == ALLOCATOR
                ):
                    for arg, role in zip(call.args[:2], ("shape", "strides")):
                        names[id(arg)] = f"{target}_{role}"
    return names


def _offset(code: str, line: int, col: int) -> int:
    """Index into ``code`` of ast's (1-based line, UTF-8 byte column)."""
    lines = code.splitlines(keepends=True)
    start = sum(len(text) for text in lines[: line - 1])
    return start + len(lines[line - 1].encode()[:col].decode())


def bind_per_shape(steps: tuple[Line, ...], dims: list[str]) -> PerShape:
    """Replace the dim-only tuples of ``steps`` with names (one per distinct tuple); the values are
    the dims the statements still read, then each name's tuple. ``dims``: the program's dims its
    statements read, in order."""
    by_text: dict[str, str] = {}  # a tuple's text -> its name
    taken: set[str] = set()
    new_steps = []
    dim_set = set(dims)
    for step in steps:
        if not step.code or not dim_set:
            new_steps.append(step)
            continue
        try:
            tree = ast.parse(step.code)
        except SyntaxError:  # not a whole statement: left as it is
            new_steps.append(step)
            continue
        roles = _role_names(tree)
        edits = []
        for node in _tuples(tree, dim_set):
            text = ast.unparse(node)
            if text not in by_text:
                name = roles.get(id(node))
                if name is None or name in taken:
                    name = f"_shape_{len(by_text)}"
                by_text[text] = name
                taken.add(name)
            start = _offset(step.code, node.lineno, node.col_offset)
            end = _offset(step.code, node.end_lineno, node.end_col_offset)
            edits.append((start, end, by_text[text]))
        code = step.code
        for start, end, name in sorted(edits, reverse=True):
            code = code[:start] + name + code[end:]
        new_steps.append(Line(code, step.comment))
    still = set()
    for step in new_steps:
        if step.code:
            still |= {n for n in dims if re.search(rf"\b{n}\b", step.code)}
    values = [(d, d) for d in dims if d in still]
    values += [(name, text) for text, name in by_text.items()]
    return PerShape(tuple(new_steps), tuple(values))
