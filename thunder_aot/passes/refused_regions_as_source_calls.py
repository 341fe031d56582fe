"""Regions whose kernels verification refuses run as their source's torch calls instead.

Thunder decomposes a torch call into prims whose edge cases are not always eager's: its
``log_softmax`` goes through ``logsumexp``, which zeroes an infinite row maximum, so a row holding
+inf comes out -inf where eager's is NaN. A kernel built from those prims is then refused by
verification, although the module is correct wherever it runs the user's own calls. After a
refusal, :func:`verified_with_source_calls` tries the program with one region at a time run as the
torch calls it came from (:attr:`Region.source_calls`, the calls Thunder recorded before
decomposing them), then with every such region so, and keeps the first that verifies: the module
exports, its other regions stay kernels, and export names what it gave up. A region's source calls
are the traced calls, so a module that is wrong for other reasons (a size branch the trace did not
take) stays refused.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection
from typing import TypeVar

from thunder_aot.errors import ExportError
from thunder_aot.ir import Program, Region

#: the most regions tried one at a time (each try verifies the whole module again); past it, only
#: all of them at once
MOST_TRIED_ONE_BY_ONE = 16

T = TypeVar("T")


def demotable(program: Program, backend) -> list[tuple[int, str]]:
    """(program index, region name) of every region that has source calls and that ``backend``
    does not already run as them."""
    found = []
    for k, bp in enumerate(program.programs):
        for region in bp.regions():
            if region.source_calls and not getattr(
                backend.region_view(region, bp.bucket.dims), "source_level", False
            ):
                found.append((k, region.name))
    return found


def demote(program: Program, which: Collection[tuple[int, str]]) -> Program:
    """``program`` with the regions ``which`` names replaced by their source calls."""
    programs = []
    for k, bp in enumerate(program.programs):
        steps = []
        for step in bp.steps:
            if isinstance(step, Region) and (k, step.name) in which:
                steps.extend(step.source_calls)
            else:
                steps.append(step)
        programs.append(dataclasses.replace(bp, steps=tuple(steps)))
    return dataclasses.replace(program, programs=tuple(programs))


def verified_with_source_calls(
    program: Program,
    backend,
    refusal: ExportError,
    render_text: Callable[[Program], str],
    verify_text: Callable[[str], T],
    progress: Callable[[str], None],
) -> tuple[str, T]:
    """After verification refused ``program``'s text with ``refusal``: the text of the program with
    one region (else every demotable one) run as its source calls that verifies, and what
    ``verify_text`` returned for it. Raises ``refusal`` where none does."""
    candidates = demotable(program, backend)
    if not candidates:
        raise refusal
    tries = [[c] for c in candidates] if len(candidates) <= MOST_TRIED_ONE_BY_ONE else []
    if len(candidates) > 1 or not tries:
        tries.append(candidates)
    for which in tries:
        try:
            text = render_text(demote(program, set(which)))
            result = verify_text(text)
        except Exception:  # another refusal (or a program the backend cannot render): the next try
            continue
        where = (
            ""
            if len(program.programs) == 1
            else " of program " + ", ".join(sorted({str(k) for k, _ in which}))
        )
        names = ", ".join(name for _, name in which)
        # worded as regions_without_kernels' lines where the backend makes kernels
        lead = (
            f"region(s) {names}"
            if backend.name == "torch"
            else f"no {backend.name} kernel for region(s) {names}"
        )
        progress(
            f"{lead}{where}: verification refused them as Thunder decomposed them ({refusal}); "
            "they run as their source's torch calls instead, and that verified"
        )
        return text, result
    raise refusal
