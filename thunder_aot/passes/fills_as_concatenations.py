"""Fills as kernels: an empty tensor filled slice by slice with ``copy_`` is a concatenation.

DeepSeek-V3's attention builds its keys as ``k = kv.new_empty(..., nope + rope)`` and then
``k[..., :nope].copy_(k_nope)`` and ``k[..., nope:].copy_(k_rot.expand(...))``: Thunder leaves the
allocation, the two slices and the two copies to torch (five calls, two copy kernels). Where the
slices of one dim cover the tensor edge to edge, every slice is read only by its copy, nothing reads
the tensor before the last copy and no other in-place write comes between, the tensor's value is
the concatenation of the copied values, each broadcast to its slice (``copy_`` broadcasts; an
``expand`` only the copy reads is that broadcast). This pass makes it a region of ``broadcast_in_dim``
and ``cat`` prims at the last copy's place, where the backend makes a kernel of it: one kernel, which
``passes.join_regions`` may then put into the kernel that computes the copied values. Elsewhere the calls
stay as they are.
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
    SliceArg,
    Step,
    TensorSpec,
    TorchCall,
    TorchName,
    Value,
    dim_arg,
    step_reads,
    value_specs,
    writes_in_place,
)
from thunder_aot.passes.base import Pass

EMPTIES = frozenset({"torch.Tensor.new_empty", "torch.empty"})
GETITEM = "torch.Tensor.__getitem__"
COPY = "torch.Tensor.copy_"
EXPAND = "torch.Tensor.expand"


@dataclasses.dataclass(frozen=True)
class _Piece:
    start: int
    stop: int
    source: str  # the value copied (an expand's input where the expand is only the copy's)
    steps: tuple[int, ...]  # the slice, the copy (and the expand)


def _last_dim_slice(call: Step, buffer: str, width: int) -> tuple[int, int] | None:
    """``(start, stop)`` where ``call`` is ``buffer[..., start:stop]`` (constant bounds, no step)."""
    if not (
        isinstance(call, TorchCall) and call.target == GETITEM and len(call.args) == 2 and not call.kwargs
    ):
        return None
    target, index = call.args
    if (
        target != Ref(buffer)
        or not isinstance(index, Seq)
        or len(index.items) != 2
        or index.items[0] != TorchName("...")
    ):
        return None
    piece = index.items[1]
    if not isinstance(piece, SliceArg) or piece.step != Const(None):
        return None
    bounds = []
    for bound, default in ((piece.start, 0), (piece.stop, width)):
        if not isinstance(bound, Const) or not (bound.value is None or isinstance(bound.value, int)):
            return None
        value = default if bound.value is None else bound.value
        bounds.append(value + width if value < 0 else value)
    start, stop = bounds
    return (start, stop) if 0 <= start < stop <= width else None


def _readers(steps: list[Step], name: str) -> list[int]:
    return [i for i, s in enumerate(steps) if name in step_reads(s)]


def _fill(steps: list[Step], k: int, specs: dict, outputs: set[str]) -> tuple[list[_Piece], int] | None:
    """The pieces that fill the tensor ``steps[k]`` makes, and the index of the last copy; None where
    it is not filled that way."""
    call = steps[k]
    if not isinstance(call, TorchCall) or call.target not in EMPTIES or len(call.outputs) != 1:
        return None
    buffer = call.outputs[0]
    shape = buffer.spec.shape
    if not shape or not isinstance(shape[-1], int) or buffer.name in outputs:
        return None
    producer = {o.name: i for i, s in enumerate(steps) for o in s.outputs}
    pieces: list[_Piece] = []
    last = k
    for i in _readers(steps, buffer.name):
        bounds = _last_dim_slice(steps[i], buffer.name, shape[-1])
        if bounds is None:
            break  # the first reader of the filled tensor: every copy must come before it
        view = steps[i].outputs[0].name
        readers = _readers(steps, view)
        if len(readers) != 1 or view in outputs:
            return None
        copy = steps[readers[0]]
        if not (
            isinstance(copy, TorchCall)
            and copy.target == COPY
            and len(copy.args) == 2
            and not copy.kwargs
            and copy.args[0] == Ref(view)
            and isinstance(copy.args[1], Ref)
        ):
            return None
        if _readers(steps, copy.outputs[0].name) or copy.outputs[0].name in outputs:
            return None
        source, used = copy.args[1].name, (i, readers[0])
        made_by = steps[producer[source]] if source in producer else None
        if (
            isinstance(made_by, TorchCall)
            and made_by.target == EXPAND
            and isinstance(made_by.args[0], Ref)
            and _readers(steps, source) == [readers[0]]
            and source not in outputs
            and len(specs[made_by.args[0].name].shape) == len(shape)
        ):
            source, used = made_by.args[0].name, (producer[source], *used)
        pieces.append(_Piece(*bounds, source, used))
        last = max(last, readers[0])
    pieces.sort(key=lambda p: p.start)
    if len(pieces) < 2 or pieces[0].start != 0 or pieces[-1].stop != shape[-1]:
        return None
    if any(a.stop != b.start for a, b in zip(pieces, pieces[1:])):
        return None
    first_reader = next(
        (i for i in _readers(steps, buffer.name) if not any(i in p.steps for p in pieces)), None
    )
    if first_reader is not None and first_reader < last:
        return None
    taken = {j for p in pieces for j in p.steps}
    if any(writes_in_place(steps[j]) for j in range(k + 1, last) if j not in taken):
        return None  # another write in between might change what a copy read
    for p in pieces:
        spec = specs[p.source]
        wanted = (*shape[:-1], p.stop - p.start)
        if spec.dtype != buffer.spec.dtype or len(spec.shape) != len(shape):
            return None
        if any(d != w and d != 1 for d, w in zip(spec.shape, wanted)):
            return None
        if any(j > last or (p.source in producer and producer[p.source] > j) for j in p.steps):
            return None
    return pieces, last


def _region(buffer: Value, pieces: list[_Piece], specs: dict, name: str) -> Region:
    ops, parts, inputs = [], [], []
    for n, p in enumerate(pieces):
        spec = specs[p.source]
        if Value(p.source, spec) not in inputs:
            inputs.append(Value(p.source, spec))
        wanted = (*buffer.spec.shape[:-1], p.stop - p.start)
        if tuple(spec.shape) == wanted:
            parts.append(Ref(p.source))
            continue
        out = Value(f"{buffer.name}_piece{n}", TensorSpec(wanted, buffer.spec.dtype))
        dims = Seq(tuple(dim_arg(d) for d in wanted))
        ops.append(
            PrimOp(
                "broadcast_in_dim",
                (out,),
                (Ref(p.source), dims, Seq(tuple(Const(j) for j in range(len(wanted))))),
            )
        )
        parts.append(Ref(out.name))
    ops.append(PrimOp("cat", (buffer,), (Seq(tuple(parts), is_list=True), Const(-1))))
    return Region(name, tuple(inputs), (buffer,), tuple(ops))


def fills_to_regions(program: BucketProgram, makes_kernel: Callable[[Region], bool]) -> BucketProgram:
    """``program`` with each tensor filled slice by slice a region, where the backend makes a kernel of it."""
    count = 0
    while True:
        steps = list(program.steps)
        specs = value_specs(program)
        outputs = set(program.outputs)
        for k in range(len(steps)):
            found = _fill(steps, k, specs, outputs)
            if found is None:
                continue
            pieces, last = found
            region = _region(
                steps[k].outputs[0], pieces, specs, f"{FUSION_PREFIX}{count}_fill"
            )  # rendered fusion<n>_fill
            if not makes_kernel(region):
                continue
            taken = {k, *(j for p in pieces for j in p.steps)}
            new = [region if i == last else s for i, s in enumerate(steps) if i == last or i not in taken]
            program = dataclasses.replace(program, steps=tuple(new))
            count += 1
            break
        else:
            return program


PASS = Pass(
    "fills_as_concatenations",
    lambda program, kernels: fills_to_regions(program, kernels.makes_kernel),
    requires="copies_as_kernels",
)
