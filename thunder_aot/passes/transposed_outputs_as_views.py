"""Transposed region outputs that only matmuls read, written untransposed and read as views.

Eager attention multiplies the query by ``key_states.transpose(2, 3)``: a view, which the matmul
reads with its strides (cuBLAS takes either operand transposed). Thunder's fusion pass puts that
transpose inside the rotary region, whose output is then the transposed key, contiguous: the
kernel stores a ``(heads, dim, tokens)`` tensor from a ``(tokens, heads, dim)`` input, so that
neighbouring lanes load a whole row of the projection apart (one memory transaction per element).

:func:`transposed_outputs_as_views`: where a region's output is a ``transpose`` of a value the
region computes, the program does not return it, and only matmuls read it, the region outputs
that value instead (stored in its own order: loads and stores walk the same dims) and a
``torch.permute`` view after the region gives the readers the transposed tensor, as eager does.
Done only where the backend still makes one kernel of the region.

The same holds for the transpose of a region's input: ``input @ self.weight.T`` (Falcon's linear
layers) puts the weight's transpose in the region beside it, which would copy the whole weight
every call; the region drops that output (and is dropped where nothing else is left of it) and the
matmul reads a ``torch.permute`` view of the weight.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from thunder_aot.ir import (
    BucketProgram,
    Const,
    Ref,
    Region,
    Seq,
    Step,
    TorchCall,
    arg_refs,
    op_reads,
    step_reads,
)
from thunder_aot.passes.base import Pass

#: torch calls that read an operand through its strides at no cost (no copy of a permuted view)
STRIDED_READERS = frozenset({"torch.matmul", "torch.Tensor.matmul", "torch.bmm", "torch.Tensor.bmm"})


def _untransposed(region: Region, readers: Callable[[str], list[Step]], returned: set[str]):
    """For each transposed output of ``region`` that qualifies: the region writing it untransposed
    (None where nothing is left of it), and the view that gives it back."""
    producer = {o.name: op for op in region.ops for o in op.outputs}
    outputs = {o.name for o in region.outputs}
    inputs = {v.name for v in region.inputs}
    for out in region.outputs:
        op = producer.get(out.name)
        if op is None or op.prim != "transpose" or out.name in returned:
            continue
        source, perm = op.args[0], op.args[1]
        if (
            not isinstance(source, Ref)
            or not (source.name in producer or source.name in inputs)
            or not isinstance(perm, Seq)
        ):
            continue
        found = readers(out.name)
        if not found or not all(isinstance(s, TorchCall) and s.target in STRIDED_READERS for s in found):
            continue
        if source.name in outputs or source.name in inputs:  # (a weight's transpose: a view of the input)
            new_outputs = tuple(o for o in region.outputs if o.name != out.name)
        else:
            value = next(o for o in producer[source.name].outputs if o.name == source.name)
            new_outputs = tuple(value if o.name == out.name else o for o in region.outputs)
        read_inside = any(out.name in arg_refs(a) for o in region.ops for a in o.args)
        ops = region.ops if read_inside else tuple(o for o in region.ops if o is not op)
        read = {n for o in ops for n in op_reads(o)}
        new_inputs = tuple(v for v in region.inputs if v.name in read)
        # its source calls compute the transposed output, not the value: no source-level fallback
        # (the pass keeps the region only where the backend makes a kernel of it)
        new_region = (
            dataclasses.replace(region, inputs=new_inputs, outputs=new_outputs, ops=ops, source_calls=())
            if new_outputs
            else None
        )
        view = TorchCall(
            "torch.permute",
            (out,),
            (Ref(source.name), Seq(tuple(Const(p.value) for p in perm.items))),
            source=op.source,
        )
        yield new_region, view


def transposed_outputs_as_views(
    program: BucketProgram, makes_kernel: Callable[[Region], bool]
) -> BucketProgram:
    """``program`` with each region's transposed outputs that only matmuls read written untransposed."""
    while True:
        steps = list(program.steps)
        returned = set(program.outputs)
        for i, step in enumerate(steps):
            if not isinstance(step, Region) or not makes_kernel(step):
                continue
            later = steps[i + 1 :]
            candidates = _untransposed(
                step, lambda name: [s for s in later if name in step_reads(s)], returned
            )
            found = next(((r, v) for r, v in candidates if r is None or makes_kernel(r)), None)
            if found is not None:
                region, view = found
                kept = () if region is None else (region,)
                program = dataclasses.replace(program, steps=(*steps[:i], *kept, view, *later))
                break
        else:
            return program


PASS = Pass(
    "transposed_outputs_as_views",
    lambda program, kernels: transposed_outputs_as_views(program, kernels.makes_kernel),
    requires="views_for_strided_readers",
)
