"""Temporaries released inside ``forward`` as eager code releases them: after the statement that
reads a local for the last time, ``del`` it (Thunder's own generated Python does the same). Without
it every intermediate of a program lives until the program returns: on the CPU each large one then
takes fresh memory from the system (a torch-backend RMSNorm of 2048 rows took three times eager's
time), and on the GPU the peak of the caching allocator rises."""

from __future__ import annotations

import ast
from collections.abc import Iterable

from thunder_aot.backends.base import Line


def _top_level_stores(tree: ast.Module) -> set[str]:
    """Names the snippet's top-level statements assign (a conditional or loop body's are left out:
    on another path the name may not exist)."""
    names: set[str] = set()
    for statement in tree.body:
        targets = (
            statement.targets
            if isinstance(statement, ast.Assign)
            else [statement.target] if isinstance(statement, (ast.AnnAssign, ast.AugAssign)) else []
        )
        for target in targets:
            names.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
    return names


def released(steps: Iterable[Line], keep: Iterable[str]) -> tuple[Line, ...]:
    """``steps`` with ``del name, ...`` after the last statement that reads or assigns each local a
    top-level statement of theirs assigns, except the names in ``keep`` (those the program returns)
    and those the last statement reads (the program returns right after it). Names with a leading
    underscore are the backends' own locals around a launch (pointers, flags, the kernel): not
    tensors, left alone."""
    steps = tuple(steps)
    keep = set(keep)
    last: dict[str, int] = {}
    local: set[str] = set()
    for i, step in enumerate(steps):
        tree = ast.parse(step.code)
        local |= _top_level_stores(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Name):
                last[node.id] = i
    dead_after: dict[int, list[str]] = {}
    for name, i in last.items():
        if name in local and name not in keep and not name.startswith("_") and i < len(steps) - 1:
            dead_after.setdefault(i, []).append(name)
    out: list[Line] = []
    for i, step in enumerate(steps):
        out.append(step)
        if i in dead_after:
            out.append(Line(f"del {', '.join(dead_after[i])}"))  # (in the order first named)
    return tuple(out)
