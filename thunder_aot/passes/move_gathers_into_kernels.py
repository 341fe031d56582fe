"""Gathers into kernels: ``x[idx]`` read only by regions becomes a ``take`` in each of them.

Advanced indexing by one integer index tensor (``hidden_states[token_idx]``, ``bias[expert_ids]``,
``out[inv_perm]``) is left by Thunder's fusion pass as a torch call: one more kernel, and a copy of
the gathered rows in memory, that the region reading it then loads again. transformers' grouped-mm
experts (every MoE family's ``experts_implementation="grouped_mm"``) make five per layer. Where
every reader of such a gather is a region that the backend still makes one kernel of with the
gather inside (a ``take`` prim prepended to its ops: the kernel loads ``x`` at ``idx``'s rows), the
torch call goes; the region's source-level calls (its fallback) get the gather back in front.

Only backends with ``gathers_region_inputs`` take this (their kernels load at indices read at run
time); a gather the program returns, one a torch call reads, or one with an in-place write
between it and a reader, stays as it is.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from thunder_aot.ir import BucketProgram, Const, PrimOp, Ref, Region, TorchCall, Value
from thunder_aot.passes.base import Pass
from thunder_aot.passes.move_calls_into_readers import absorb_into_readers

GETITEM = "torch.Tensor.__getitem__"
INDEX_DTYPES = frozenset({"int64", "int32"})


def _gather_parts(step, specs: dict) -> tuple[str, str] | None:
    """``(x, idx)`` of ``x[idx]`` with ``idx`` a 1-D integer tensor (a gather of ``x``'s dim 0)."""
    if not (
        isinstance(step, TorchCall)
        and step.target == GETITEM
        and len(step.args) == 2
        and not step.kwargs
        and len(step.outputs) == 1
        and all(isinstance(a, Ref) for a in step.args)
    ):
        return None
    x, idx = step.args[0].name, step.args[1].name
    if x not in specs or idx not in specs:
        return None
    index = specs[idx]
    if len(index.shape) != 1 or index.dtype not in INDEX_DTYPES or not specs[x].shape:
        return None
    return x, idx


def take_op(out, x: str, idx: str) -> PrimOp:
    """``out = x[idx]`` along dim 0 as a region op."""
    return PrimOp("take", (out,), (Ref(x), Ref(idx), Const(0)))


def _with_take(region: Region, call: TorchCall, x: str, idx: str, specs: dict) -> Region:
    out = call.outputs[0]
    had = {v.name for v in region.inputs}
    inputs = []
    for v in region.inputs:  # x and idx take the gathered tensor's place (where the region lacks them)
        inputs += [Value(n, specs[n]) for n in (x, idx) if n not in had] if v.name == out.name else [v]
    return dataclasses.replace(
        region,
        inputs=tuple(inputs),
        ops=(take_op(out, x, idx), *region.ops),
        source_calls=(call, *region.source_calls) if region.source_calls else (),
    )


def absorb_gathers(program: BucketProgram, makes_kernel: Callable[[Region], bool]) -> BucketProgram:
    """``program`` with each gather that only regions read moved into those regions, where every
    one of them still makes a kernel (``makes_kernel``) with it inside."""
    return absorb_into_readers(
        program,
        makes_kernel,
        _gather_parts,
        lambda region, call, parts, specs: _with_take(region, call, *parts, specs),
    )


PASS = Pass(
    "move_gathers_into_kernels",
    lambda program, kernels: absorb_gathers(program, kernels.makes_kernel),
    requires="gathers_region_inputs",
)
