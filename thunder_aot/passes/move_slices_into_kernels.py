"""Slices into kernels: ``x[..., a:b]`` read only by regions becomes a ``slice`` in each of them.

Basic indexing that Thunder's fusion pass leaves to torch (a ``__getitem__`` call outside every
region) is a view, but the kernel that reads it gets a strided tensor and copies it first
(``.contiguous()``). Falcon's attention splits its fused projection as ``qkv[:, :, :, :-2]``,
``qkv[:, :, :, [-2]]`` and ``qkv[:, :, :, [-1]]``: three torch calls (the last two gathers, each a
copy) and three copies in front of the rotary kernel. Where every reader of such an index is a
region that the backend still makes one kernel of with the index inside (a ``slice`` prim, and a
``squeeze`` for an integer index, prepended to its ops: the kernel loads ``x`` at the sliced
positions), the torch call goes; the region's source-level calls (its fallback) get the index back
in front.

Indices taken: slices with constant bounds and no step (any bounds on a static dim, only ``:`` on
a dynamic one), ``...``, integers, and lists of one integer (``[k]``: a gather of one position,
the same values as ``k:k + 1``). Only backends with ``slices_region_inputs`` take this; an index
the program returns, one a torch call reads, or one with an in-place write between it and a reader,
stays as it is.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from thunder_aot.ir import (
    BucketProgram,
    Const,
    Dim,
    PrimOp,
    Ref,
    Region,
    Seq,
    SliceArg,
    TensorSpec,
    TorchCall,
    TorchName,
    Value,
    dim_arg,
)
from thunder_aot.passes.base import Pass
from thunder_aot.passes.move_calls_into_readers import absorb_into_readers

GETITEM = "torch.Tensor.__getitem__"


@dataclasses.dataclass(frozen=True)
class BasicIndex:
    """``x[index]`` as Thunder's prims: ``slice(x, starts, ends)`` per dim, then the integer-indexed
    dims squeezed."""

    source: str
    starts: tuple[int, ...]
    ends: tuple[Dim, ...]  # a dynamic dim where the slice is ``:``
    squeezed: tuple[int, ...]

    @property
    def sliced_shape(self) -> tuple[Dim, ...]:
        """The slice's shape, before the squeeze."""
        return tuple(e - s if isinstance(e, int) else e for s, e in zip(self.starts, self.ends))

    @property
    def shape(self) -> tuple[Dim, ...]:
        """``x[index]``'s shape."""
        return tuple(d for k, d in enumerate(self.sliced_shape) if k not in self.squeezed)


def _bound(value: object, size: int, default: int) -> int | None:
    """A constant slice bound on a dim of static ``size``, clamped as Python clamps it."""
    if value is None:
        return default
    if type(value) is not int:
        return None
    if value < 0:
        value += size
    return min(max(value, 0), size)


def basic_index(call: object, specs: dict[str, TensorSpec]) -> BasicIndex | None:
    """The slices of ``call`` where it is ``x[index]`` with a basic index this pass takes, else None."""
    if not (
        isinstance(call, TorchCall)
        and call.target == GETITEM
        and len(call.args) == 2
        and not call.kwargs
        and len(call.outputs) == 1
        and isinstance(call.args[0], Ref)
        and call.args[0].name in specs
    ):
        return None
    shape = specs[call.args[0].name].shape
    index = call.args[1]
    items = list(index.items) if isinstance(index, Seq) and not index.is_list else [index]
    ellipses = [k for k, item in enumerate(items) if item == TorchName("...")]
    if len(ellipses) > 1:
        return None
    if ellipses:
        k = ellipses[0]
        items[k : k + 1] = [SliceArg(Const(None), Const(None), Const(None))] * (len(shape) - len(items) + 1)
    if len(items) > len(shape):
        return None
    items += [SliceArg(Const(None), Const(None), Const(None))] * (len(shape) - len(items))
    starts, ends, squeezed = [], [], []
    for dim, (item, size) in enumerate(zip(items, shape)):
        if isinstance(item, Seq) and item.is_list and len(item.items) == 1:
            item = item.items[0]  # [k]: position k, its dim kept
        elif isinstance(item, Const) and type(item.value) is int:
            squeezed.append(dim)
        elif isinstance(item, SliceArg):
            if not all(
                isinstance(b, Const) for b in (item.start, item.stop, item.step)
            ) or item.step.value not in (None, 1):
                return None
            if not isinstance(size, int):
                if item.start.value not in (None, 0) or item.stop.value is not None:
                    return None
                starts.append(0)
                ends.append(size)
                continue
            start, stop = _bound(item.start.value, size, 0), _bound(item.stop.value, size, size)
            if start is None or stop is None or start >= stop:
                return None
            starts.append(start)
            ends.append(stop)
            continue
        else:
            return None
        if not (isinstance(item, Const) and type(item.value) is int) or not isinstance(size, int):
            return None
        position = item.value + size if item.value < 0 else item.value
        if not 0 <= position < size:
            return None
        starts.append(position)
        ends.append(position + 1)
    found = BasicIndex(call.args[0].name, tuple(starts), tuple(ends), tuple(squeezed))
    return found if tuple(call.outputs[0].spec.shape) == found.shape else None


def index_ops(out: Value, index: BasicIndex, fresh: str) -> tuple[PrimOp, ...]:
    """``out = x[index]`` as region ops (``fresh``: the name of the slice before its squeeze)."""
    sliced = (
        out if not index.squeezed else Value(fresh, dataclasses.replace(out.spec, shape=index.sliced_shape))
    )
    ops = [
        PrimOp(
            "slice",
            (sliced,),
            (
                Ref(index.source),
                Seq(tuple(Const(s) for s in index.starts)),
                Seq(tuple(dim_arg(e) for e in index.ends)),
                Seq(tuple(Const(1) for _ in index.starts)),
            ),
        )
    ]
    if index.squeezed:
        ops.append(PrimOp("squeeze", (out,), (Ref(fresh), Seq(tuple(Const(d) for d in index.squeezed)))))
    return tuple(ops)


def _with_index(
    region: Region, call: TorchCall, index: BasicIndex, specs: dict[str, TensorSpec], fresh: str
) -> Region:
    out = call.outputs[0]
    had = {v.name for v in region.inputs}
    inputs = []
    for v in region.inputs:  # x takes the indexed tensor's place (where the region lacks it)
        if v.name != out.name:
            inputs.append(v)
        elif index.source not in had:
            inputs.append(Value(index.source, specs[index.source]))
    return dataclasses.replace(
        region,
        inputs=tuple(inputs),
        ops=(*index_ops(out, index, fresh), *region.ops),
        source_calls=(call, *region.source_calls) if region.source_calls else (),
    )


def _fresh(base: str, taken: set[str]) -> str:
    name, n = f"{base}_sliced", 1
    while name in taken:
        n += 1
        name = f"{base}_sliced{n}"
    return name


def absorb_slices(program: BucketProgram, makes_kernel: Callable[[Region], bool]) -> BucketProgram:
    """``program`` with each basic index that only regions read moved into those regions, where every
    one of them still makes a kernel (``makes_kernel``) with it inside."""
    return absorb_into_readers(
        program,
        makes_kernel,
        basic_index,
        lambda region, call, index, specs: _with_index(
            region, call, index, specs, _fresh(call.outputs[0].name, set(specs))
        ),
    )


PASS = Pass(
    "move_slices_into_kernels",
    lambda program, kernels: absorb_slices(program, kernels.makes_kernel),
    requires="slices_region_inputs",
)
