"""The routing bookkeeping of a mixture of experts in one program: ``torch.sort`` of the top-k
expert ids, and what is computed from the sort alone, become one region that the backend makes one
kernel (a single program over the whole 1-D tensors).

transformers' grouped-mm experts (every MoE family's ``experts_implementation="grouped_mm"``) sort
the ``tokens * top_k`` expert ids, count them per expert (``torch.histc``), sum the counts up
(``torch.cumsum``: the grouped matmul's offsets) and invert the permutation
(``torch.empty`` + ``arange`` + ``index_put``): a dozen small kernels per layer, none of which
Thunder's fusion pass takes. The ids are indices of ``torch.topk`` over a last dim of E experts, so
every id is in [0, E): the sort is a sort of keys ``id * BLOCK + position`` (ties in position
order, one of the orders an unstable sort may give), which a kernel does in registers.

The region holds ``sort_bounded`` and each later step that reads only what the region computes: a
region of conversions, an ``arange``, ``histc``, ``cumsum``, and ``index_put`` into a fresh
``torch.empty``. It takes the sort's place (what it absorbs moves up to it: those steps read
nothing else); its source-level calls are the steps' own, so where the backend makes no kernel of
it, it runs as before. Only backends with ``fuses_routing`` take it, where it makes a kernel.
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
    TorchCall,
    Value,
    step_reads,
    writes_in_place,
)
from thunder_aot.passes.base import Pass
from thunder_aot.passes.move_gathers_into_kernels import INDEX_DTYPES

#: torch calls that give their input's elements in another shape (the ids flattened)
_VIEWS = frozenset({"torch.reshape", "torch.Tensor.reshape", "torch.Tensor.view", "torch.flatten"})
#: region prims that give their input's elements in another shape
_VIEW_PRIMS = frozenset({"reshape", "shallow_copy", "squeeze"})
#: region prims the routing program takes (elementwise on one 1-D length, or none)
REGION_PRIMS = frozenset({"convert_element_type", "iota", "shallow_copy"})


def _kwarg(call: TorchCall, name: str, default=None):
    for key, value in call.kwargs:
        if key == name:
            return value.value if isinstance(value, Const) else value
    return default


def _id_bound(
    name: str, producers: dict[str, TorchCall | Region], specs: dict
) -> tuple[int, TorchCall] | None:
    """(E, the topk call) where ``name`` holds indices of ``torch.topk`` over a static last dim of
    size E (through reshapes, as torch calls or inside a region: Qwen3-MoE's
    ``top_k_index.reshape(-1)`` is fused with the weights' normalization), else None."""
    while True:
        step = producers.get(name)
        if isinstance(step, Region):
            made = {o.name: op for op in step.ops for o in op.outputs}
            inputs = {v.name for v in step.inputs}
            while name not in inputs:
                op = made.get(name)
                if op is None or op.prim not in _VIEW_PRIMS or not op.args or not isinstance(op.args[0], Ref):
                    return None
                name = op.args[0].name
            continue
        if not isinstance(step, TorchCall):
            return None
        if step.target in _VIEWS and step.args and isinstance(step.args[0], Ref):
            name = step.args[0].name
            continue
        if (
            step.target in ("torch.topk", "torch.Tensor.topk")
            and len(step.outputs) == 2
            and step.outputs[1].name == name
        ):
            source = step.args[0]
            dim = (
                step.args[2].value
                if len(step.args) > 2 and isinstance(step.args[2], Const)
                else _kwarg(step, "dim", -1)
            )
            if not isinstance(source, Ref):
                return None
            shape = specs[source.name].shape
            if not shape or dim not in (-1, len(shape) - 1) or not isinstance(shape[-1], int):
                return None
            return shape[-1], step
        return None


def _sort_op(steps: list, i: int, specs: dict, producers: dict) -> PrimOp | None:
    """``sort_bounded`` for step ``i`` where it is ``torch.sort`` of 1-D expert ids ascending
    (nothing written in place between the topk and the sort), else None."""
    call = steps[i]
    if (
        call.target not in ("torch.sort", "torch.Tensor.sort")
        or len(call.args) != 1
        or len(call.outputs) != 2
    ):
        return None
    (x,) = call.args
    if not isinstance(x, Ref) or len(specs[x.name].shape) != 1 or specs[x.name].dtype not in INDEX_DTYPES:
        return None
    if _kwarg(call, "descending", False) is not False or _kwarg(call, "dim", -1) not in (0, -1):
        return None
    found = _id_bound(x.name, producers, specs)
    if found is None:
        return None
    bound, topk = found
    start = next(k for k, s in enumerate(steps) if s is topk)
    if any(writes_in_place(s) for s in steps[start + 1 : i]):
        return None  # the ids may have been changed after topk made them
    return PrimOp("sort_bounded", call.outputs, (x, Const(bound)), source=call.source)


def _absorbed_ops(
    step, inside: set[str], specs: dict, length, targets: set[str], producers: dict
) -> tuple[PrimOp, ...] | None:
    """The ops that ``step`` adds to the routing region, where it reads only names in ``inside``
    and is of a kind the region takes; else None. ``length``: the sorted ids' length (a region
    without inputs joins only with outputs of that length); ``targets``: the buffers a later
    ``index_put`` writes (the only ``torch.empty`` the region takes)."""
    if isinstance(step, Region):
        if not step.source_calls or any(op.prim not in REGION_PRIMS for op in step.ops):
            return None
        if any(v.name not in inside for v in step.inputs) or any(
            len(o.spec.shape) != 1 for o in step.outputs
        ):
            return None
        if not step.inputs and any(o.spec.shape != (length,) for o in step.outputs):
            return None
        return step.ops
    if not isinstance(step, TorchCall) or any(n not in inside for n in step_reads(step)):
        return None
    out = step.outputs
    if step.target == "torch.histc" and len(step.args) == 1 and len(out) == 1:
        bins, lo, hi = (_kwarg(step, k, d) for k, d in (("bins", 100), ("min", 0), ("max", 0)))
        if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (bins, lo, hi)) and hi > lo:
            return (
                PrimOp("histc", out, (step.args[0], Const(bins), Const(lo), Const(hi)), source=step.source),
            )
        return None
    if step.target == "torch.cumsum" and len(step.args) == 2 and len(out) == 1:
        dim = step.args[1]
        if isinstance(dim, Const) and dim.value in (0, -1) and len(specs[step.args[0].name].shape) == 1:
            return (PrimOp("cumsum", out, (step.args[0],), source=step.source),)
        return None
    if (
        step.target == "torch.empty"
        and len(out) == 1
        and out[0].name in targets
        and len(out[0].spec.shape) == 1
    ):
        return (PrimOp("empty", out, (), source=step.source),)
    if step.target == "torch.index_put" and len(step.args) == 3 and len(out) == 1 and not step.kwargs:
        target, indices, values = step.args
        # into a fresh buffer only: elements no index names stay unset, as torch.empty's
        fresh = (
            isinstance(target, Ref)
            and isinstance(producers.get(target.name), TorchCall)
            and producers[target.name].target == "torch.empty"
        )
        if fresh and isinstance(indices, Seq) and len(indices.items) == 1:
            return (PrimOp("scatter", out, (target, indices.items[0], values), source=step.source),)
    return None


def fuse_routing(program: BucketProgram, makes_kernel: Callable[[Region], bool]) -> BucketProgram:
    """``program`` with each sort of expert ids, and the steps that read only what follows from it,
    one routing region, where the backend makes it a kernel (``makes_kernel``)."""
    done: set[int] = set()
    while True:
        steps = list(program.steps)
        specs = {v.name: v.spec for v in program.inputs}
        producers: dict[str, TorchCall | Region] = {}
        for step in steps:
            specs.update({o.name: o.spec for o in step.outputs})
            producers.update({o.name: step for o in step.outputs})
        for i, step in enumerate(steps):
            sort = (
                _sort_op(steps, i, specs, producers)
                if isinstance(step, TorchCall) and i not in done
                else None
            )
            if sort is None:
                continue
            done.add(i)
            rewritten = _routing_region(program, steps, i, sort, specs, producers, makes_kernel)
            if rewritten is not None:
                program = rewritten
                done = set()
                break
        else:
            return program


def _routing_region(program, steps, i, sort: PrimOp, specs, producers, makes_kernel) -> BucketProgram | None:
    """The program with the sort at step ``i`` and what follows from it alone one region, or None."""
    inside = {o.name for o in sort.outputs}
    length = specs[sort.args[0].name].shape[0]
    targets = {
        s.args[0].name
        for s in steps[i + 1 :]
        if isinstance(s, TorchCall)
        and s.target == "torch.index_put"
        and s.args
        and isinstance(s.args[0], Ref)
    }
    taken: dict[int, tuple[PrimOp, ...]] = {i: (sort,)}  # step index -> the ops it adds
    for k in range(i + 1, len(steps)):
        if writes_in_place(steps[k]):
            break  # a write the moved steps would pass
        more = _absorbed_ops(steps[k], inside, specs, length, targets, producers)
        if more is not None:
            taken[k] = more
            inside |= {o.name for o in steps[k].outputs}
    scatters = [op for ops in taken.values() for op in ops if op.prim == "scatter"]
    # a buffer no scatter of the region fills stays a torch call
    taken = {
        k: ops
        for k, ops in taken.items()
        if not (ops[0].prim == "empty" and ops[0].outputs[0].name not in {op.args[0].name for op in scatters})
    }
    ops = [op for k in sorted(taken) for op in taken[k]]
    stored = {op.outputs[0].name for op in scatters}  # written to memory at indices: never read inside
    if len(ops) == 1 or any(isinstance(a, Ref) and a.name in stored for op in ops for a in op.args):
        return None  # a sort alone: torch's is as good
    rest = [s for k, s in enumerate(steps) if k not in taken]
    read_later = {n for s in rest for n in step_reads(s)} | set(program.outputs)
    outputs = tuple(o for op in ops if op.prim != "empty" for o in op.outputs if o.name in read_later)
    calls = [
        c
        for k in sorted(taken)
        for c in (steps[k].source_calls if isinstance(steps[k], Region) else (steps[k],))
    ]
    region = Region(
        name=f"{FUSION_PREFIX}{i}_routing",  # rendered fusion<i>_routing
        inputs=(Value(sort.args[0].name, specs[sort.args[0].name]),),
        outputs=outputs,
        ops=tuple(ops),
        source_calls=tuple(calls),
    )
    if not makes_kernel(region):
        return None
    new_steps = [region if k == i else s for k, s in enumerate(steps) if k == i or k not in taken]
    return dataclasses.replace(program, steps=tuple(new_steps))


PASS = Pass(
    "fuse_moe_routing",
    lambda program, kernels: fuse_routing(program, kernels.makes_kernel),
    requires="fuses_routing",
)
