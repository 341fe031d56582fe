"""Generalise traces over sizes, and let buckets that share one program share it.

A dynamic bucket is traced at several sizes; :func:`generalize` walks the concrete programs in
lock step and turns every integer that moved with a dynamic dimension into a :class:`SymDim`.
Anything else that differs between the traces means one trace cannot serve the whole bucket,
and export refuses with the first difference it found.

:func:`share_programs` then gives every bucket its program: an exact bucket whose program is a
dynamic bucket's program at its sizes becomes an entry of that program, and exact buckets whose
programs differ only in sizes get one program over those sizes. Each merge is checked exactly
(the shared program, instantiated at the bucket's sizes, is the bucket's own program), so no
bucket ever runs a program other than its own trace's.
"""

from __future__ import annotations

import dataclasses

from thunder_aot.errors import ExportError
from thunder_aot.ir import (
    Bucket,
    BucketProgram,
    Const,
    DimRange,
    PrimOp,
    SizeArg,
    SymDim,
    TensorSpec,
    TorchCall,
    renamed,
    value_names,
)
from thunder_aot.shapes import env_inside


class _Mismatch(Exception):
    pass


def _unify_int(values: list[int], envs: list[dict[str, int]], path: str) -> int | SymDim:
    if all(v == values[0] for v in values):
        return values[0]
    matches = []
    for name in envs[0]:
        sizes = [env[name] for env in envs]
        # coeff * size + offset through the samples: a positive integer slope, any integer offset
        j = next((j for j, s in enumerate(sizes) if s != sizes[0]), None)
        if j is None or (values[j] - values[0]) % (sizes[j] - sizes[0]):
            continue
        coeff = (values[j] - values[0]) // (sizes[j] - sizes[0])
        offset = values[0] - coeff * sizes[0]
        if coeff >= 1 and all(v == coeff * s + offset for v, s in zip(values, sizes)):
            matches.append(SymDim(name, coeff, offset))
    if len(matches) > 1:
        # sizes moving together: the one nearest to a dim itself, the smallest offset, then slope
        # (with B going 2 -> 1 and L 255 -> 159, attention sinks' L + 1 columns also read as
        # 96 * B + 64): trace_bucket checks the choice against its other traces, and one that does
        # not hold there splits the bucket, as any difference does
        nearest = min((abs(m.offset), m.coeff) for m in matches)
        matches = [m for m in matches if (abs(m.offset), m.coeff) == nearest]
    if len(matches) != 1:
        raise _Mismatch(f"{path}: the value {values} does not follow one dynamic dimension")
    return matches[0]


def _unify(items: list[object], envs: list[dict[str, int]], path: str) -> object:
    first = items[0]
    if any(type(i) is not type(first) for i in items):
        raise _Mismatch(f"{path}: {[type(i).__name__ for i in items]}")
    if isinstance(first, Const):
        if isinstance(first.value, int) and not isinstance(first.value, bool):
            unified = _unify_int([i.value for i in items], envs, path)
            return Const(unified) if isinstance(unified, int) else SizeArg(unified)
        if any(i != first for i in items):
            values = [i.value for i in items]
            if all(
                isinstance(v, float) and v.is_integer() for v in values
            ):  # x.mean over a dynamic dim divides by it
                try:
                    return SizeArg(_unify_int([int(v) for v in values], envs, path), real=True)
                except _Mismatch:
                    pass
            raise _Mismatch(
                f"{path}: the constant {values} differs between traces at different sizes, not as a "
                "size would (is it read from random, time, a counter or another attribute that "
                "changes while forward runs?)"
            )
        return first
    if isinstance(first, TensorSpec):
        if any(len(i.shape) != len(first.shape) or i.dtype != first.dtype for i in items):
            raise _Mismatch(f"{path}: tensor rank or dtype changes with the size")
        shape = tuple(
            _unify_int([i.shape[k] for i in items], envs, f"{path} dim {k}") for k in range(len(first.shape))
        )
        return TensorSpec(shape, first.dtype)
    if isinstance(first, (PrimOp, TorchCall)) and any(
        getattr(i, "prim", None) != getattr(first, "prim", None)
        or getattr(i, "target", None) != getattr(first, "target", None)
        for i in items
    ):
        raise _Mismatch(f"{path}: a different op is traced at another size")
    if isinstance(first, Bucket):
        return first
    if dataclasses.is_dataclass(first):
        label = getattr(first, "prim", None) or getattr(first, "target", None) or getattr(first, "name", None)
        sub = f"{path}/{type(first).__name__}" + (f"[{label}]" if label else "")
        return dataclasses.replace(
            first,
            **{
                f.name: _unify_field(f.name, [getattr(i, f.name) for i in items], envs, f"{sub}.{f.name}")
                for f in dataclasses.fields(first)
                if f.name not in ("bucket",)
            },
        )
    if isinstance(first, tuple):
        if any(len(i) != len(first) for i in items):
            raise _Mismatch(f"{path}: {len(first)} items at one size, {[len(i) for i in items]} at others")
        return tuple(_unify([i[k] for i in items], envs, f"{path}[{k}]") for k in range(len(first)))
    if any(i != first for i in items):
        raise _Mismatch(
            f"{path}: {items[0]!r} becomes {[i for i in items if i != first][0]!r} at another size"
        )
    return first


def _unify_field(name: str, items: list[object], envs: list[dict[str, int]], path: str) -> object:
    """A region's source calls are its fallback, not its program: where they do not generalise, the
    region goes without them (it then falls back to its prims) rather than refusing the bucket."""
    if name != "source_calls":
        return _unify(items, envs, path)
    try:
        return _unify(items, envs, path)
    except _Mismatch:
        return ()


def align_names(program: BucketProgram, like: BucketProgram) -> BucketProgram:
    """``program`` with its values named as ``like`` names the value in the same place (by first
    mention). Thunder numbers its proxies with a counter that other work in the trace may advance,
    so two traces of one computation can differ in names alone; the rename is one-to-one, so a
    trace that differs in structure still differs after it."""
    ours = list(dict.fromkeys(value_names(program, [])))
    theirs = list(dict.fromkeys(value_names(like, [])))
    if len(ours) != len(theirs) or ours == theirs:
        return program
    return renamed(program, dict(zip(ours, theirs)))  # type: ignore[return-value]


def generalize(programs: list[BucketProgram], envs: list[dict[str, int]]) -> BucketProgram:
    """One program whose sizes are expressed in the dynamic dims, or ExportError naming the difference."""
    programs = [programs[0], *(align_names(p, programs[0]) for p in programs[1:])]
    try:
        return _unify(programs, envs, "program")  # type: ignore[return-value]
    except _Mismatch as e:
        raise ExportError(f"one trace cannot serve the bucket: {e}") from None


def instantiate(obj: object, env: dict[str, int]) -> object:
    """The concrete program a generalised one stands for at sizes ``env`` (inverse of generalize)."""
    if isinstance(obj, SizeArg):
        size = obj.dim.at(env) if isinstance(obj.dim, SymDim) else obj.dim
        return Const(float(size) if obj.real else size)
    if isinstance(obj, SymDim):
        return obj.at(env)
    if isinstance(obj, Bucket):
        return obj
    if dataclasses.is_dataclass(obj):
        return dataclasses.replace(
            obj, **{f.name: instantiate(getattr(obj, f.name), env) for f in dataclasses.fields(obj)}
        )
    if isinstance(obj, tuple):
        return tuple(instantiate(i, env) for i in obj)
    return obj


def first_difference(a: object, b: object, path: str = "program") -> str | None:
    if type(a) is not type(b):
        return f"{path}: {type(a).__name__} vs {type(b).__name__}"
    if dataclasses.is_dataclass(a):
        for f in dataclasses.fields(a):
            d = first_difference(getattr(a, f.name), getattr(b, f.name), f"{path}.{f.name}")
            if d:
                return d
        return None
    if isinstance(a, tuple):
        if len(a) != len(b):
            return f"{path}: {len(a)} items vs {len(b)}"
        for k, (x, y) in enumerate(zip(a, b)):
            d = first_difference(x, y, f"{path}[{k}]")
            if d:
                return d
        return None
    return None if a == b else f"{path}: {a!r} vs {b!r}"


# --- one program per group of buckets that share it ------------------------------------------


def _same_program(general: BucketProgram, concrete: BucketProgram, env: dict[str, int]) -> bool:
    """Whether ``general`` at sizes ``env`` computes exactly what ``concrete`` does."""
    at = instantiate((general.inputs, general.steps, general.outputs), env)
    concrete = align_names(concrete, general)
    return first_difference(at, (concrete.inputs, concrete.steps, concrete.outputs)) is None


def _over_sizes(group: list[tuple[Bucket, BucketProgram]], taken: set[str]) -> BucketProgram | None:
    """One program for exact buckets whose programs differ only in sizes: each (input, axis) whose
    size differs between them becomes a dim; None when their programs are not one program."""
    first = group[0][0]
    if any(
        [(len(s.shape), s.dtype) for s in b.inputs] != [(len(s.shape), s.dtype) for s in first.inputs]
        for b, _ in group
    ):
        return None
    names: dict[tuple[int, ...], str] = {}  # a column of sizes (one per bucket) -> its dim
    shapes = []
    for i, spec in enumerate(first.inputs):
        shape = []
        for axis, size in enumerate(spec.shape):
            column = tuple(b.inputs[i].shape[axis] for b, _ in group)
            if len(set(column)) == 1:
                shape.append(size)
                continue
            if column not in names:
                names[column] = next(
                    f"s{k}"
                    for k in range(len(taken) + len(names) + 1)
                    if f"s{k}" not in taken and f"s{k}" not in names.values()
                )
            shape.append(SymDim(names[column]))
        shapes.append(TensorSpec(tuple(shape), spec.dtype))
    envs = [{name: column[j] for column, name in names.items()} for j in range(len(group))]
    try:
        general = generalize([dataclasses.replace(p, index=0) for _, p in group], envs)
    except ExportError:
        return None
    if not all(_same_program(general, p, env) for (_, p), env in zip(group, envs)):
        return None
    dims = tuple(DimRange(name, min(column), max(column)) for column, name in names.items())
    return dataclasses.replace(general, bucket=Bucket(tuple(shapes), dims))


def share_programs(
    traced: list[tuple[Bucket, BucketProgram]],
) -> tuple[list[BucketProgram], list[tuple[Bucket, int]]]:
    """Programs for buckets traced in dispatch order: (the distinct programs, each numbered by its
    first bucket in dispatch order; every bucket in dispatch order with its program's index)."""
    owner: dict[int, int] = {}  # bucket position -> position of the bucket whose program it runs
    programs: dict[int, BucketProgram] = {}  # owning position -> its program
    dynamic = [k for k, (b, _) in enumerate(traced) if not b.is_exact]
    for k in dynamic:
        owner[k] = k
        programs[k] = traced[k][1]
    rest = []
    for k, (bucket, program) in enumerate(traced):
        if not bucket.is_exact:
            continue
        for d in dynamic:
            env = env_inside(traced[d][0], bucket)
            if env is not None and _same_program(traced[d][1], program, env):
                owner[k] = d
                break
        else:
            rest.append(k)
    if len(rest) > 1:
        taken = {r.name for b, _ in traced for r in b.dims}
        merged = _over_sizes([traced[k] for k in rest], taken)
        if merged is not None:
            programs[rest[0]] = merged
            owner.update({k: rest[0] for k in rest})
            rest = []
    for k in rest:
        owner[k] = k
        programs[k] = traced[k][1]
    order = sorted(set(owner.values()), key=lambda k: min(j for j, o in owner.items() if o == k))
    index = {k: n for n, k in enumerate(order)}
    shared = [dataclasses.replace(programs[k], index=index[k]) for k in order]
    return shared, [(bucket, index[owner[k]]) for k, (bucket, _) in enumerate(traced)]
