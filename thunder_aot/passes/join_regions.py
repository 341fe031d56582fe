"""Joined regions: a region whose first reader is another region becomes part of that region.

Thunder's fusion pass leaves neighbouring regions apart where a torch call stood between them
(a gather that ``passes.move_gathers_into_kernels`` has since moved into its reader, a write-back that
``passes.drop_unobserved_write_backs`` dropped) or where its own merge stopped: transformers' grouped-mm
experts
end up with a bias add and the activation it feeds, the down projection's bias add and the
routing-weight product, the residual norm and its cast, each as two kernels that pass a tensor
through memory. Where region ``A``'s outputs are first read by region ``B``, nothing in between
reads them or writes any tensor, and the backend makes one kernel of both (``B`` computes ``A``'s
values where it reads them), this pass puts ``A``'s ops in front of ``B``'s at ``B``'s place; the
outputs of ``A`` that later steps or the caller read stay outputs of the joined region.

Where ``A`` reduces, it does not join if ``B`` would compute an element of ``A`` more than once (a
value made from ``A``'s outputs broadcast to more elements, or read through a gather); a
pointwise ``A`` is recomputed where ``B`` reads it, as any fused elementwise producer is.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from thunder_aot.ir import BucketProgram, Region, arg_refs, step_reads, writes_in_place
from thunder_aot.passes.base import Pass

#: prims whose every output element reads many input elements: a region with one is never
#: recomputed per element of its reader
REDUCTIONS = frozenset({"sum", "prod", "amax", "amin", "var", "var_mean", "argmax", "argmin"})


def _numel(shape: tuple) -> object:
    """The element count, or None where a dim is dynamic (compared only when both are known)."""
    total = 1
    for d in shape:
        if not isinstance(d, int):
            return None
        total *= d
    return total


def _reads_each_once(b: Region, names: set[str]) -> bool:
    """Whether ``b`` uses each element of the values ``names`` (and what it makes of them) at most
    once per element it stores: no broadcast of them to more elements, no gather of their rows."""
    tainted = set(names)
    specs = {v.name: v.spec for v in b.inputs}
    for op in b.ops:
        for o in op.outputs:
            specs[o.name] = o.spec
        reads = {r for a in op.args for r in arg_refs(a)}
        if not reads & tainted:
            continue
        if op.prim == "take":
            return False
        if op.prim == "broadcast_in_dim":
            before, after = _numel(specs[op.args[0].name].shape), _numel(op.outputs[0].spec.shape)
            if before is None or after is None or after != before:
                return False
        tainted.update(o.name for o in op.outputs)
    return True


def joined(a: Region, b: Region, keep: set[str]) -> Region:
    """``a``'s ops then ``b``'s, as one region named as ``b``; ``a``'s outputs in ``keep`` stay outputs."""
    made = {o.name for o in a.outputs}
    inputs, seen = [], set()
    for v in (*a.inputs, *b.inputs):
        if v.name not in made and v.name not in seen:
            inputs.append(v)
            seen.add(v.name)
    outputs = (*(o for o in a.outputs if o.name in keep), *b.outputs)
    both = a.source_calls and b.source_calls
    return Region(
        b.name, tuple(inputs), outputs, (*a.ops, *b.ops), (*a.source_calls, *b.source_calls) if both else ()
    )


def join_regions(program: BucketProgram, makes_kernel: Callable[[Region], bool]) -> BucketProgram:
    """``program`` with every region that can join its first reader joined to it (repeatedly)."""
    while True:
        steps = list(program.steps)
        for i, a in enumerate(steps):
            if not isinstance(a, Region) or not makes_kernel(a):
                continue
            made = {o.name for o in a.outputs}
            first = next((k for k in range(i + 1, len(steps)) if made & set(step_reads(steps[k]))), None)
            if first is None or not isinstance(steps[first], Region) or not makes_kernel(steps[first]):
                continue
            if any(writes_in_place(s) for s in steps[i + 1 : first]):
                continue  # a write in between might change what A read
            b = steps[first]
            if any(op.prim in REDUCTIONS for op in a.ops) and not _reads_each_once(
                b, made & set(step_reads(b))
            ):
                continue
            later = {n for s in steps[first + 1 :] for n in step_reads(s)} | set(program.outputs)
            c = joined(a, b, made & later)
            if not makes_kernel(c):
                continue
            new_steps = tuple(c if k == first else s for k, s in enumerate(steps) if k != i)
            program = dataclasses.replace(program, steps=new_steps)
            break
        else:
            return program


PASS = Pass(
    "join_regions",
    lambda program, kernels: join_regions(program, kernels.makes_kernel),
    requires="joins_regions",
)
