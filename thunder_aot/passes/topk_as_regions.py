"""A mixture of experts' ``torch.topk`` over its router's logits as a region of its own.

Thunder's fusion pass leaves ``torch.topk`` to torch (no fusion executor takes it), so every MoE
layer keeps one torch call between the router's matmul and the routing weights' softmax, and with
it one more launch. :func:`topk_regions` makes ``torch.topk(x, k)`` over a static last dim of at
most :data:`MAX_ROW` floats (largest first, sorted: every transformers router) a region of one
``topk`` prim, which the backend lowers to one kernel (``backends/triton/topk_kernels.py``) and whose
fallback is the call itself. Done only where the backend makes a kernel of it, and where the
module does not return the values or picks: which of two tied values comes first is each
implementation's own (torch's differs between CPU and CUDA), so a pick the caller sees stays
torch's, while one the module only uses is judged against the float64 run that picks as it did.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from thunder_aot.ir import FUSION_PREFIX, BucketProgram, Const, PrimOp, Ref, Region, TorchCall, Value
from thunder_aot.passes.base import Pass

TOPKS = frozenset({"torch.topk", "torch.Tensor.topk"})
#: the widest row (experts) the prim takes: one program's lanes hold a row
MAX_ROW = 8192
#: the most picks per row (one pass over the row's lanes each)
MAX_K = 64
FLOAT_DTYPES = ("bfloat16", "float16", "float32")


def _arguments(call: TorchCall) -> dict | None:
    """``topk``'s arguments by name (input, k, dim, largest, sorted), or None where one is not a constant."""
    names = ("input", "k", "dim", "largest", "sorted")
    bound = dict(zip(names, call.args))
    for key, value in call.kwargs:
        if key not in names or key in bound:
            return None
        bound[key] = value
    values = {"dim": -1, "largest": True, "sorted": True}
    for key, arg in bound.items():
        if key == "input":
            if not isinstance(arg, Ref):
                return None
            values[key] = arg
        elif isinstance(arg, Const):
            values[key] = arg.value
        else:
            return None
    return values if "input" in values and "k" in values else None


def topk_op(call: TorchCall, specs: dict) -> PrimOp | None:
    """The ``topk`` prim for ``call`` where it is a top-k the prim takes, else None."""
    if call.target not in TOPKS or len(call.outputs) != 2:
        return None
    args = _arguments(call)
    if args is None:
        return None
    spec = specs.get(args["input"].name)
    k = args["k"]
    if spec is None or not spec.shape or spec.dtype not in FLOAT_DTYPES:
        return None
    rank, width = len(spec.shape), spec.shape[-1]
    if (
        not isinstance(width, int)
        or args["dim"] not in (-1, rank - 1)
        or args["largest"] is not True
        or args["sorted"] is not True
    ):
        return None
    if not isinstance(k, int) or isinstance(k, bool) or not 1 <= k <= min(width, MAX_K) or width > MAX_ROW:
        return None
    return PrimOp("topk", call.outputs, (args["input"], Const(k)), source=call.source)


def topk_regions(program: BucketProgram, makes_kernel: Callable[[Region], bool]) -> BucketProgram:
    """``program`` with each top-k the prim takes a region of its own, where the backend makes a
    kernel of it."""
    specs = {v.name: v.spec for v in program.inputs}
    for step in program.steps:
        specs.update({o.name: o.spec for o in step.outputs})
    steps, count = list(program.steps), 0
    for i, step in enumerate(steps):
        op = topk_op(step, specs) if isinstance(step, TorchCall) else None
        if op is None or any(o.name in program.outputs for o in step.outputs):
            # (a returned pick is compared with torch's own, whose order among ties is its own)
            continue
        source = op.args[0]
        region = Region(
            name=f"{FUSION_PREFIX}{count}_topk",  # rendered fusion<n>_topk
            inputs=(Value(source.name, specs[source.name]),),
            outputs=step.outputs,
            ops=(op,),
            source_calls=(step,),
        )
        if makes_kernel(region):
            steps[i] = region
            count += 1
    return dataclasses.replace(program, steps=tuple(steps)) if count else program


PASS = Pass(
    "topk_as_regions",
    lambda program, kernels: topk_regions(program, kernels.makes_kernel),
    requires="fuses_topk",
)
