"""Copies as kernels: ``y.transpose(...)`` / ``.permute(...)`` then ``.contiguous()``, where ``y``
comes contiguous from a matmul or a kernel, becomes a region of one ``transpose`` prim.

Thunder's fusion pass leaves a model's layout changes between matmuls to torch: eager attention's
``attn_output.transpose(1, 2).contiguous()`` after its second matmul is a transpose view and one
copy kernel that torch launches. Made a region, it is a kernel the backend launches, or one that
:mod:`passes.join_regions` puts into the region that reads it (no copy at all); its torch calls stay
its source-level fallback. A transposed view of what another op returns permuted (sdpa's output,
laid out as ``(batch, seq, heads, dim)`` by the GPU's attention kernels, whose
``transpose(1, 2).contiguous()`` copies nothing) stays torch calls. Every value stays as eager
computes it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from thunder_aot.ir import (
    FUSION_PREFIX,
    BucketProgram,
    Const,
    PrimOp,
    Ref,
    Region,
    Seq,
    Step,
    TorchCall,
    step_reads,
    value_specs,
)
from thunder_aot.passes.base import Pass
from thunder_aot.passes.drop_no_op_calls import CONTIGUOUS, contiguous_values, is_contiguous_call

#: views that permute their argument's dims
TRANSPOSES = frozenset({"torch.transpose", "torch.Tensor.transpose", "torch.permute", "torch.Tensor.permute"})
#: torch calls whose results are laid out contiguously as torch computes them on the GPU (a copy
#: of a permuted view of one is a real copy)
CONTIGUOUS_RESULTS = frozenset(
    {
        "torch.nn.functional.linear",
        "torch.matmul",
        "torch.bmm",
        "torch.mm",
        "torch.addmm",
        "torch.baddbmm",
        "torch._grouped_mm",
        CONTIGUOUS,
    }
)


def _permutation(call: TorchCall, rank: int) -> tuple[int, ...] | None:
    """The output dim k's input dim, per k, of a transpose or permute call (None: not one)."""
    if (
        call.target not in TRANSPOSES
        or call.kwargs
        or len(call.outputs) != 1
        or not isinstance(call.args[0], Ref)
    ):
        return None
    rest = call.args[1:]
    if len(rest) == 1 and isinstance(rest[0], Seq):
        rest = rest[0].items
    if not all(
        isinstance(a, Const) and isinstance(a.value, int) and not isinstance(a.value, bool) for a in rest
    ):
        return None
    dims = [a.value % rank if -rank <= a.value < rank else None for a in rest]
    if None in dims:
        return None
    if "transpose" in call.target:
        if len(dims) != 2:
            return None
        perm = list(range(rank))
        perm[dims[0]], perm[dims[1]] = perm[dims[1]], perm[dims[0]]
        return tuple(perm)
    return tuple(dims) if sorted(dims) == list(range(rank)) else None


def _copy_region(
    steps: list[Step],
    k: int,
    specs: dict,
    producer: dict[str, int],
    contiguous_made: set[str],
    region_name: str,
) -> tuple[Region, list[int]] | None:
    """The region that ``steps[k]`` (a ``contiguous`` call) and the transposes it copies become,
    with the indices of those transposes; None where it is not such a copy."""
    call = steps[k]
    if not is_contiguous_call(call):
        return None
    chain, name, perm = [], call.args[0].name, None
    while name in producer and isinstance(steps[producer[name]], TorchCall):
        view = steps[producer[name]]
        step_perm = _permutation(view, len(specs[view.args[0].name].shape))
        if step_perm is None:
            break
        # output dim j of the chain is the view's input dim step_perm[perm[j]]
        perm = step_perm if perm is None else tuple(step_perm[p] for p in perm)
        chain.insert(0, producer[name])
        name = view.args[0].name
    if not chain or name not in contiguous_made:
        return None
    inside = {steps[i].outputs[0].name for i in chain}
    if any(n in inside for j, s in enumerate(steps) if j not in chain and j != k for n in step_reads(s)):
        return None  # a view of the chain is read elsewhere
    out = call.outputs[0]
    source = specs[name]
    op = PrimOp("transpose", (out,), (Ref(name), Seq(tuple(Const(p) for p in perm))), source=call.source)
    region = Region(
        name=region_name,
        inputs=(dataclasses.replace(out, name=name, spec=source),),
        outputs=(out,),
        ops=(op,),
        source_calls=(*(steps[i] for i in chain), call),
    )
    return region, chain


def copies_to_regions(
    program: BucketProgram,
    contiguous_outputs: Callable[[Region], set[str]],
    makes_kernel: Callable[[Region], bool],
) -> BucketProgram:
    """``program`` with each copy of a permuted view of a contiguous matmul or kernel result a
    region, where the backend makes a kernel of it."""
    start, count = 0, 0
    while True:
        steps = list(program.steps)
        specs = value_specs(program)
        producer = {o.name: i for i, s in enumerate(steps) for o in s.outputs}
        made = contiguous_values(steps, contiguous_outputs) | {
            o.name
            for s in steps
            if isinstance(s, TorchCall) and s.target in CONTIGUOUS_RESULTS
            for o in s.outputs
        }
        for k in range(start, len(steps)):
            found = _copy_region(
                steps, k, specs, producer, made, f"{FUSION_PREFIX}{count}_copy"
            )  # rendered fusion<n>_copy
            if found is None or not makes_kernel(found[0]):
                continue
            region, chain = found
            new = [region if i == k else s for i, s in enumerate(steps) if i not in chain]
            program = dataclasses.replace(program, steps=tuple(new))
            start, count = k - len(chain) + 1, count + 1
            break
        else:
            return program


PASS = Pass(
    "copies_as_kernels",
    lambda program, kernels: copies_to_regions(program, kernels.contiguous_outputs, kernels.makes_kernel),
    requires="copies_as_kernels",
)
