"""Torch calls into the kernels that read them: the driver that passes.move_gathers_into_kernels and
passes.move_slices_into_kernels share."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TypeVar

from thunder_aot.ir import BucketProgram, Region, TensorSpec, TorchCall, step_reads, writes_in_place

Parsed = TypeVar("Parsed")


def absorb_into_readers(
    program: BucketProgram,
    makes_kernel: Callable[[Region], bool],
    parse: Callable[[object, dict[str, TensorSpec]], Parsed | None],
    rewrite: Callable[[Region, TorchCall, Parsed, dict[str, TensorSpec]], Region],
) -> BucketProgram:
    """``program`` with each torch call that ``parse`` takes (it returns what ``rewrite`` needs, else
    None) moved into the regions that read its output: ``rewrite(region, call, parsed, specs)`` is
    the reader with the call inside (``specs``: every value's, region-internal ones included). Done
    where only regions read it, the program does not return it, no in-place write comes between it
    and its last reader (they would read what the write changed), and every reader still makes a
    kernel (``makes_kernel``) with it inside."""
    while True:
        steps = list(program.steps)
        specs = {v.name: v.spec for v in program.inputs}
        for step in steps:
            specs.update({o.name: o.spec for o in step.outputs})
            if isinstance(step, Region):
                specs.update({o.name: o.spec for op in step.ops for o in op.outputs})
        for i, step in enumerate(steps):
            parsed = parse(step, specs)
            if parsed is None:
                continue
            out = step.outputs[0].name
            readers = [k for k, s in enumerate(steps) if out in step_reads(s)]
            rewritten = None
            if (
                out not in program.outputs
                and readers
                and all(isinstance(steps[k], Region) for k in readers)
                and not any(writes_in_place(s) for s in steps[i + 1 : readers[-1]])
            ):
                rewritten = {k: rewrite(steps[k], step, parsed, specs) for k in readers}
            if rewritten is None or not all(makes_kernel(r) for r in rewritten.values()):
                continue  # (tried again after the next call moves: a reader it had may have gone)
            program = dataclasses.replace(
                program, steps=tuple(rewritten.get(k, s) for k, s in enumerate(steps) if k != i)
            )
            break
        else:
            return program
