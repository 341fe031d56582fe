"""Inside a region, a value rounded to a narrower float and widened back is read as it was before
the rounding: ``convert_element_type(convert_element_type(a, bfloat16), float32)`` with ``a``
float32 reads ``a``. The rounded value stays where something else reads it (a region output, an op
that takes the narrow dtype).

Thunder records each bf16 or fp16 elementwise op of the source as torch defines it: computed in
float32 and rounded to the input's dtype, so a tanh-approximated GELU rounds eight intermediates.
Torch's own kernels for one op, inductor's fused kernels and Thunder's nvFuser executor keep
float32 between the ops of a fusion instead. Kept as recorded, a kernel errs far more than eager
where an intermediate cancels: ``1 + tanh(u)`` with ``tanh(u)`` rounded to bf16 near -1 is off by
a third, or is 0 where eager's value is not, which the element-wise judgement refuses. Without the
round trips the kernel rounds once, at its outputs, and is closer to float64 than eager is.

This is the one pass that changes values a kernel computes (:class:`~thunder_aot.passes.base.Pass`):
only intermediates inside a region, each to its value before a rounding.
"""

from __future__ import annotations

import dataclasses

from thunder_aot.ir import BucketProgram, DType, PrimOp, Ref, Region, arg_refs, renamed
from thunder_aot.passes.base import Pass

CONVERT = "convert_element_type"
#: floating dtypes by width, narrowest first
FLOAT_WIDTHS = {"float8_e4m3fn": 1, "float8_e5m2": 1, "bfloat16": 2, "float16": 2, "float32": 4, "float64": 8}


def _cast(op: PrimOp) -> tuple[str, str] | None:
    """``(input name, target dtype)`` of a convert_element_type of a tensor, else None."""
    if op.prim != CONVERT or len(op.args) != 2 or len(op.outputs) != 1:
        return None
    source, dtype = op.args
    return (source.name, dtype.name) if isinstance(source, Ref) and isinstance(dtype, DType) else None


def _round_trips(region: Region, dtypes: dict[str, str]) -> dict[str, str]:
    """The region's values that widen a rounded value back to its dtype before the rounding, each
    with the value before the rounding."""
    rounded: dict[str, str] = {}  # a narrowed value -> the wider value it rounds
    before: dict[str, str] = {}
    for op in region.ops:
        cast = _cast(op)
        if cast is None:
            continue
        source, dtype = cast
        out = op.outputs[0].name
        source_dtype = dtypes.get(source)
        if source_dtype not in FLOAT_WIDTHS or dtype not in FLOAT_WIDTHS:
            continue
        if FLOAT_WIDTHS[dtype] < FLOAT_WIDTHS[source_dtype]:
            rounded[out] = source
        elif source in rounded and dtypes.get(rounded[source]) == dtype:
            before[out] = rounded[source]
    return before


def _live_ops(region: Region) -> tuple[PrimOp, ...]:
    """The region's ops whose outputs something reads (a later op, or the region's outputs)."""
    needed = {o.name for o in region.outputs}
    kept: list[PrimOp] = []
    for op in reversed(region.ops):
        if any(o.name in needed for o in op.outputs):
            kept.append(op)
            for arg in (*op.args, *(v for _, v in op.kwargs)):
                needed.update(arg_refs(arg))
    return tuple(reversed(kept))


def drop_round_trip_casts(program: BucketProgram) -> BucketProgram:
    """``program`` with each region's round trips through a narrower float read as their values
    before the rounding (the region's outputs keep their names and values)."""
    steps = []
    for step in program.steps:
        if not isinstance(step, Region):
            steps.append(step)
            continue
        dtypes = {v.name: v.spec.dtype for v in step.inputs}
        dtypes.update({o.name: o.spec.dtype for op in step.ops for o in op.outputs})
        before = _round_trips(step, dtypes)
        if not before:
            steps.append(step)
            continue
        ops = tuple(
            dataclasses.replace(op, args=renamed(op.args, before), kwargs=renamed(op.kwargs, before))
            for op in step.ops
        )
        region = dataclasses.replace(step, ops=ops)
        steps.append(dataclasses.replace(region, ops=_live_ops(region)))
    return dataclasses.replace(program, steps=tuple(steps))


PASS = Pass("drop_round_trip_casts", lambda program, _kernels: drop_round_trip_casts(program))
