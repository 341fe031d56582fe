"""Grouped-query attention without copies of the keys and values: the query heads that share a key
head attend as rows of that head.

transformers' sdpa attention repeats each key and value head for its group of query heads before
calling ``scaled_dot_product_attention`` whenever it passes a mask (``repeat_kv``:
``k[:, :, None].expand(b, kv, g, l, d).reshape(b, kv * g, l, d)``). The reshape of the expanded
tensor copies the *whole* cache, keys and values, in every layer and call: in a decode step over a
static cache that is ``g`` times the cache read by two extra kernels, more than the attention reads.

Query head ``kv * g + j`` attends key head ``kv``, so the ``g`` query heads of a group can instead
be ``g`` blocks of rows of one query: ``q.reshape(b, kv, g * s, d)`` against the unrepeated ``k``
and ``v``, the mask repeated over the group's blocks (a view where it has one query row), and the
result reshaped back to ``(b, kv * g, s, d)``. Every row's scores, softmax and weighted sum are the
ones eager computes. The pass leaves the call alone where the attention is causal by flag (the
rows' causal alignment would change), has dropout, or has a mask with one row per head.
"""

from __future__ import annotations

import dataclasses

from thunder_aot.ir import (
    Arg,
    BucketProgram,
    Const,
    Dim,
    Ref,
    Seq,
    SliceArg,
    SymDim,
    TensorSpec,
    TorchCall,
    Value,
    bound_args,
    dim_arg,
    step_reads,
    value_specs,
)
from thunder_aot.passes.base import Pass

SDPA = "torch.nn.functional.scaled_dot_product_attention"
#: its parameters in order (all but the first three are literals or a mask where this pass applies)
SDPA_PARAMS = ("query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale", "enable_gqa")
_FULL = SliceArg(Const(None), Const(None), Const(None))
#: ``x[:, :, None]`` (and the same with every later dim sliced whole)
_NEW_AXIS_2 = (_FULL, _FULL, Const(None))


def _times(dim: Dim, factor: int) -> Dim:
    if isinstance(dim, int):
        return dim * factor
    return SymDim(dim.name, dim.coeff * factor, dim.offset * factor)


def _dims(args: tuple[Arg, ...]) -> list[object] | None:
    """The sizes of an ``expand``/``reshape`` shape (its items, or one sequence of them)."""
    items = args[0].items if len(args) == 1 and isinstance(args[0], Seq) else args
    out = []
    for a in items:
        if isinstance(a, Const) and isinstance(a.value, int):
            out.append(a.value)
        elif hasattr(a, "dim"):
            out.append(a.dim)
        else:
            return None
    return out


def _unrepeated(name: str, producer: dict[str, TorchCall], specs: dict[str, TensorSpec]):
    """``(source, group, calls)`` where ``name`` is ``repeat_kv(source, group)`` made of the calls
    ``calls`` (a new axis 2, an expand over it, a reshape merging it into the heads), else None."""
    reshape = producer.get(name)
    if not (
        reshape and reshape.target in ("torch.reshape", "torch.Tensor.reshape") and len(reshape.args) >= 2
    ):
        return None
    expand = producer.get(reshape.args[0].name) if isinstance(reshape.args[0], Ref) else None
    if not (expand and expand.target == "torch.Tensor.expand" and isinstance(expand.args[0], Ref)):
        return None
    axis = producer.get(expand.args[0].name)
    if not (axis and isinstance(axis.args[0], Ref)):
        return None
    if axis.target == "torch.Tensor.__getitem__":
        index = axis.args[1].items if len(axis.args) == 2 and isinstance(axis.args[1], Seq) else None
        if index is None or tuple(index[:3]) != _NEW_AXIS_2 or any(i != _FULL for i in index[3:]):
            return None
    elif axis.target in ("torch.unsqueeze", "torch.Tensor.unsqueeze"):
        if axis.args[1:] != (Const(2),):
            return None
    else:
        return None
    source = axis.args[0].name
    shape = specs.get(source)
    sizes = _dims(expand.args[1:])
    if shape is None or len(shape.shape) != 4 or sizes is None or len(sizes) != 5:
        return None
    b, kv, length, d = shape.shape
    group = sizes[2]
    if not (
        isinstance(group, int)
        and group >= 1
        and [sizes[0], sizes[1], sizes[3], sizes[4]] == [b, kv, length, d]
    ):
        return None
    if specs[name].shape != (b, _times(kv, group), length, d):
        return None
    return source, group, (axis, expand, reshape)


def _unique(base: str, taken: set[str]) -> str:
    name, i = base, 0
    while name in taken:
        i += 1
        name = f"{base}_{i}"
    taken.add(name)
    return name


def group_queries_instead_of_repeating_kv(program: BucketProgram) -> BucketProgram:
    """``program`` with each attention over repeated key/value heads computed over the heads
    themselves, the query's heads grouped as rows; the repeats go where nothing else reads them."""
    specs = value_specs(program)
    producer = {o.name: s for s in program.steps if isinstance(s, TorchCall) for o in s.outputs}
    taken = set(specs)
    replaced: dict[int, list[TorchCall]] = {}
    repeats: list[TorchCall] = []
    for i, step in enumerate(program.steps):
        if not (isinstance(step, TorchCall) and step.target == SDPA and len(step.outputs) == 1):
            continue
        bound = bound_args(step, SDPA_PARAMS)
        if bound is None or not all(isinstance(bound.get(p), Ref) for p in ("query", "key", "value")):
            continue
        if bound.get("is_causal", Const(False)) != Const(False) or bound.get(
            "enable_gqa", Const(False)
        ) != Const(False):
            continue
        dropout = bound.get("dropout_p", Const(0.0))
        if not (isinstance(dropout, Const) and dropout.value == 0):
            continue
        keys = _unrepeated(bound["key"].name, producer, specs)
        values = _unrepeated(bound["value"].name, producer, specs)
        if keys is None or values is None or keys[1] != values[1] or keys[1] == 1:
            continue
        group = keys[1]
        query = specs[bound["query"].name]
        out = step.outputs[0]
        b, heads, s, _ = query.shape
        kv = specs[keys[0]].shape[1]
        if len(query.shape) != 4 or heads != _times(kv, group) or len(out.spec.shape) != 4:
            continue
        calls: list[TorchCall] = []
        grouped_rows = _times(s, group)
        query_name = _unique(f"{bound['query'].name}_grouped", taken)
        calls.append(
            TorchCall(
                "torch.reshape",
                (Value(query_name, TensorSpec((b, kv, grouped_rows, query.shape[3]), query.dtype)),),
                (
                    Ref(bound["query"].name),
                    Seq(tuple(dim_arg(x) for x in (b, kv, grouped_rows, query.shape[3]))),
                ),
                source=step.source,
            )
        )
        mask = bound.get("attn_mask", Const(None))
        if isinstance(mask, Ref):
            m = specs[mask.name]
            if len(m.shape) != 4 or m.shape[1] != 1:
                continue
            if m.shape[2] != 1:  # one mask row per query row: repeated over the group's blocks
                if m.shape[2] != s:
                    continue
                mb, _, _, ml = m.shape
                axis = _unique(f"{mask.name}_axis", taken)
                expanded = _unique(f"{mask.name}_expanded", taken)
                grouped = _unique(f"{mask.name}_grouped", taken)
                calls += [
                    TorchCall(
                        "torch.unsqueeze",
                        (Value(axis, TensorSpec((mb, 1, 1, s, ml), m.dtype)),),
                        (mask, Const(2)),
                        source=step.source,
                    ),
                    TorchCall(
                        "torch.Tensor.expand",
                        (Value(expanded, TensorSpec((mb, 1, group, s, ml), m.dtype)),),
                        (Ref(axis), *(dim_arg(x) for x in (mb, 1, group, s, ml))),
                        source=step.source,
                    ),
                    TorchCall(
                        "torch.reshape",
                        (Value(grouped, TensorSpec((mb, 1, grouped_rows, ml), m.dtype)),),
                        (Ref(expanded), Seq(tuple(dim_arg(x) for x in (mb, 1, grouped_rows, ml)))),
                        source=step.source,
                    ),
                ]
                mask = Ref(grouped)
        elif mask != Const(None):
            continue
        attended = _unique(f"{out.name}_grouped", taken)
        ob, _, _, od = out.spec.shape
        args = {**bound, "query": Ref(query_name), "key": Ref(keys[0]), "value": Ref(values[0])}
        if "attn_mask" in bound or isinstance(mask, Ref):
            args["attn_mask"] = mask
        positional = tuple(args.pop(p) for p in SDPA_PARAMS[:3])
        calls.append(
            TorchCall(
                SDPA,
                (Value(attended, TensorSpec((ob, kv, grouped_rows, od), out.spec.dtype)),),
                positional,
                tuple(args.items()),
                source=step.source,
            )
        )
        calls.append(
            TorchCall(
                "torch.reshape",
                (out,),
                (Ref(attended), Seq(tuple(dim_arg(x) for x in out.spec.shape))),
                source=step.source,
            )
        )
        replaced[i] = calls
        repeats += [*keys[2], *values[2]]
    if not replaced:
        return program
    steps = [c for i, s in enumerate(program.steps) for c in replaced.get(i, [s])]
    # the repeats' calls that nothing reads any more, last first (none writes: dropping one
    # changes no value)
    for call in reversed(repeats):
        read = {n for s in steps for n in step_reads(s)} | set(program.outputs)
        if call in steps and all(o.name not in read for o in call.outputs):
            steps.remove(call)
    return dataclasses.replace(program, steps=tuple(steps))


PASS = Pass(
    "group_queries_instead_of_repeating_kv",
    lambda program, _kernels: group_queries_instead_of_repeating_kv(program),
)
