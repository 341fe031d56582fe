"""Tracing one shape bucket: the sizes traced, the traces shared within an export, the settings
that do not change a trace, and the splits of a bucket where its sizes trace differently (a forward
that tests a dynamic size, an edge size that traces to another program)."""

from __future__ import annotations

from collections.abc import Callable

import torch

from thunder_aot.errors import ExportError
from thunder_aot.frontend.generalize import align_names, first_difference, generalize, instantiate
from thunder_aot.frontend.lower import Lowerer
from thunder_aot.frontend.trace import size_conditions, trace_module
from thunder_aot.ir import Bucket, BucketProgram, DimRange, ProgramInput, SymDim, TensorSpec
from thunder_aot.request import Progress
from thunder_aot.runtime import setting
from thunder_aot.shapes import format_bucket
from thunder_aot.verify import random_inputs


def trace_envs(bucket: Bucket) -> list[dict[str, int]]:
    """Sizes to trace a bucket at: two generic points to generalise from, then both edges to check.

    Each dynamic dim gets a different offset so that no two dims take the same size in a trace.
    """
    if bucket.is_exact:
        return [{}]

    def clamp(r, v: int) -> int:
        return max(r.lo, min(r.hi, v))

    a = {r.name: clamp(r, r.hi - k) for k, r in enumerate(bucket.dims)}
    b = {r.name: clamp(r, (r.lo + r.hi) // 2 - k) for k, r in enumerate(bucket.dims)}
    if a == b:
        b = {r.name: r.lo for r in bucket.dims}
    envs = [a, b, {r.name: r.lo for r in bucket.dims}, {r.name: r.hi for r in bucket.dims}]
    return [e for i, e in enumerate(envs) if e not in envs[:i]]


def sample_args(bucket: Bucket, env: dict[str, int]) -> list[torch.Tensor]:
    """The inputs export traces ``bucket`` with at sizes ``env`` (seeded: the same on every call)."""
    return random_inputs(bucket, env, "cpu", torch.Generator().manual_seed(1234))


#: settings that name a submodule's place in a model rather than its computation, each with the
#: two other values export retraces with: transformers' layer_idx (a layer's KV-cache slot), and a
#: layer's attention kind (sliding-window and full layers, whose window eager and sdpa attention take
#: from the mask). Read by a trace, yet often without effect on it: a setting whose other values
#: trace alike is not recorded (a module exported from layer 0 serves every layer); one that changes
#: the trace stays a setting. (A forward that tests the value only against values not tried is not caught.)
LAYER_TYPES = ("full_attention", "sliding_attention")


def _other_windows(window: object) -> list[object]:
    return [None, 2 * window + 1] if type(window) is int else [128, 4097] if window is None else []


PLACEMENT_SETTINGS: dict[str, Callable[[object], list[object]]] = {
    "layer_idx": lambda v: [v + 1, v + 7] if type(v) is int else [],
    "sliding_window": _other_windows,
    "layer_type": lambda v: [t for t in LAYER_TYPES if t != v] * 2 if v in LAYER_TYPES else [],
}


class Traces:
    """The module's Thunder traces in one export, by the shapes of the inputs traced and the settings
    changed for it: the parts of a bucket split at an edge, and the setting checks at a size traced
    before, reuse what was traced (a decoder layer's ``[S=1..N]``, split at ``S=1``, traces 8 times
    where it traced 15). Tracing does not depend on the bucket, only on the inputs' shapes."""

    def __init__(self, module: torch.nn.Module, input_names: list[str], claimable: list) -> None:
        self.module, self.input_names, self.claimable = module, input_names, claimable
        self._traced: dict[tuple, object] = {}
        self._conditions: dict[tuple, object] = {}

    @staticmethod
    def _shapes(args: list[torch.Tensor]) -> tuple:
        return tuple((tuple(a.shape), a.dtype) for a in args)

    @staticmethod
    def _key(args: list[torch.Tensor], settings: dict[str, object] | None) -> tuple:
        return Traces._shapes(args), tuple(sorted((p, repr(v)) for p, v in (settings or {}).items()))

    def has(self, bucket: Bucket, env: dict[str, int]) -> bool:
        return self._key(sample_args(bucket, env), None) in self._traced

    def trace(self, bucket: Bucket, env: dict[str, int], settings: dict[str, object] | None = None):
        """The trace at ``env`` with each setting ``path`` of ``settings`` set to its value (an
        ExportError where Thunder cannot trace it so, raised again each time it is asked for)."""
        args = sample_args(bucket, env)
        key = self._key(args, settings)
        if key not in self._traced:
            saved = []
            for path, other in (settings or {}).items():
                parent, _, name = path.rpartition(
                    "."
                )  # PLACEMENT_SETTINGS are attributes: the path ends in ".name"
                owner = setting(self.module, parent) if parent else self.module
                saved.append((owner, name, getattr(owner, name)))
                setattr(owner, name, other)
            try:
                self._traced[key] = trace_module(self.module, args, self.input_names, self.claimable)
            except ExportError as e:
                self._traced[key] = e
            finally:
                for owner, name, before in reversed(saved):
                    setattr(owner, name, before)
        found = self._traced[key]
        if isinstance(found, ExportError):
            raise found
        return found

    def size_conditions(self, bucket: Bucket, env: dict[str, int]):
        """Thunder's symbolic-size trace's tests of the sizes at ``env`` (None: it cannot trace so)."""
        args = sample_args(bucket, env)
        key = self._shapes(args)
        if key not in self._conditions:
            self._conditions[key] = size_conditions(self.module, args, self.input_names)
        return self._conditions[key]


def _trace_ignores(traces: Traces, others: dict[str, object], program, bucket, env, index) -> bool:
    """Whether tracing with each setting ``path`` of ``others`` set to its value gives ``program`` again."""
    try:
        traced = traces.trace(bucket, env, others)
    except ExportError:
        return False
    return align_names(Lowerer(traced, traces.input_names).lower(index, bucket)[0], program) == program


def trace_bucket(
    traces: Traces, bucket: Bucket, index: int, progress: Progress
) -> tuple[BucketProgram, list[ProgramInput], bool, dict[str, object]]:
    envs = trace_envs(bucket)
    if not bucket.is_exact:
        check_size_conditions(traces, bucket, progress)
    concrete: list[BucketProgram] = []
    program_inputs: list[ProgramInput] = []
    returns_tuple = False
    attributes: dict[str, object] = {}
    for env in envs:
        again = " (traced before)" if traces.has(bucket, env) else ""
        progress(f"tracing bucket {index} ({format_bucket(bucket)}) at {env or 'its shape'}{again}")
        traced = traces.trace(bucket, env)
        program, program_inputs = Lowerer(traced, traces.input_names).lower(index, bucket)
        attributes.update(traced.attributes)
        returns_tuple = isinstance(traced.outputs, (tuple, list))
        flat = traced.outputs if returns_tuple else (traced.outputs,)
        if not all(isinstance(t, torch.Tensor) for t in flat):
            raise ExportError(
                f"{type(traces.module).__name__} returns a {type(traced.outputs).__name__}; "
                "expected a tensor or a tuple of tensors"
            )
        concrete.append(program)
    general = concrete[0]
    if not bucket.is_exact:  # before the settings' checks: a bucket split at an edge checks them in its parts
        general = generalize(concrete[:2], envs[:2])
        for env, program in zip(envs[2:], concrete[2:]):
            diff = first_difference(instantiate(general, env), align_names(program, general))
            if diff is not None:
                raise EdgeMismatch(
                    f"bucket {format_bucket(bucket)}: the trace at {env} differs from the traces at "
                    f"{envs[0]} and {envs[1]} ({diff}); split the bucket so that {env} gets a bucket "
                    "of its own",
                    env,
                )
    others = {
        p: PLACEMENT_SETTINGS[p.rpartition(".")[2]](v)
        for p, v in attributes.items()
        if p.rpartition(".")[2] in PLACEMENT_SETTINGS
    }
    positions = {p: alternatives for p, alternatives in others.items() if alternatives}

    def ignored(paths: list[str]) -> bool:
        return all(
            _trace_ignores(
                traces, {p: positions[p][trial] for p in paths}, concrete[0], bucket, envs[0], index
            )
            for trial in (0, 1)
        )

    # all at once (a model's layers), else one by one
    for paths in (
        [list(positions)] if len(positions) > 1 and ignored(list(positions)) else [[p] for p in positions]
    ):
        if len(paths) > 1 or ignored(paths):
            for path in paths:
                del attributes[path]
            shown = paths[0] if len(paths) == 1 else f"{paths[0]} and {len(paths) - 1} more"
            progress(
                f"{shown} {'do' if len(paths) > 1 else 'does'} not change the trace (two other values "
                "trace alike): the module serves any"
            )
    return general, program_inputs, returns_tuple, attributes


class SizeSplit(ExportError):
    """A dynamic bucket's forward tests one of its dynamic sizes: the parts on which the test is constant."""

    def __init__(self, message: str, parts: list[Bucket]) -> None:
        super().__init__(message)
        self.parts = parts


def sub_bucket(bucket: Bucket, name: str, lo: int, hi: int) -> Bucket:
    """``bucket`` with its dynamic dim ``name`` narrowed to [lo..hi] (an exact size where lo == hi)."""
    if lo == hi:
        specs = tuple(
            TensorSpec(
                tuple(d.at({name: lo}) if isinstance(d, SymDim) and d.name == name else d for d in s.shape),
                s.dtype,
            )
            for s in bucket.inputs
        )
        return Bucket(specs, tuple(r for r in bucket.dims if r.name != name), bucket.values)
    return Bucket(
        bucket.inputs,
        tuple(DimRange(name, lo, hi) if r.name == name else r for r in bucket.dims),
        bucket.values,
    )


def condition_parts(lo: int, hi: int, op: str, value: int) -> list[tuple[int, int]]:
    """[lo..hi] cut where ``size OP value`` changes truth: the pieces on which it is constant."""
    starts = {"eq": (value, value + 1), "ne": (value, value + 1), "lt": (value,), "ge": (value,)}.get(
        op, (value + 1,)
    )
    cuts = sorted({c for c in starts if lo < c <= hi})
    bounds = [lo, *cuts, hi + 1]
    return [(a, b - 1) for a, b in zip(bounds, bounds[1:])]


_OPERATORS = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}


def check_size_conditions(traces: Traces, bucket: Bucket, progress: Progress) -> None:
    """Refuse or split a dynamic bucket whose forward tests its dynamic sizes (``x * 3 if
    x.shape[0] == 7 else x * 2``): one trace serves only the sizes on which every test is constant.
    Found from Thunder's symbolic-size trace; where Thunder cannot trace the module so, the
    constant-size traces and the verification's samples are the only defence (export says so)."""
    conditions = traces.size_conditions(bucket, trace_envs(bucket)[0])
    if conditions is None:
        progress(
            f"bucket {format_bucket(bucket)}: Thunder cannot trace it with symbolic sizes; tests of its "
            "dynamic sizes are looked for by tracing and verifying at sampled sizes only"
        )
        return
    dynamic = {
        (i, axis): d.name
        for i, s in enumerate(bucket.inputs)
        for axis, d in enumerate(s.shape)
        if isinstance(d, SymDim)
    }
    ranges = {r.name: r for r in bucket.dims}
    for c in conditions:
        if not any(size in dynamic for size in c.sizes):
            continue
        if c.input is None:
            raise ExportError(
                f"bucket {format_bucket(bucket)}: forward tests a value computed from its dynamic sizes "
                f"({c.where}); one trace cannot serve every size: give the sizes on each side of the test "
                "buckets of their own"
            )
        name = dynamic[(c.input, c.axis)]
        r = ranges[name]
        parts = condition_parts(r.lo, r.hi, c.op, c.value)
        if len(parts) == 1:
            continue  # the test has one outcome over the whole range
        test = f"{name} {_OPERATORS[c.op]} {c.value}"
        if len(bucket.dims) != 1:
            raise ExportError(
                f"bucket {format_bucket(bucket)}: forward tests {test} ({c.where}); a bucket with several "
                "dynamic dims is not split: split it by hand at that size"
            )
        raise SizeSplit(
            f"bucket {format_bucket(bucket)}: forward tests {test} ({c.where})",
            [sub_bucket(bucket, name, lo, hi) for lo, hi in parts],
        )


class EdgeMismatch(ExportError):
    """A dynamic bucket's edge size traces to another program than the sizes inside it."""

    def __init__(self, message: str, env: dict[str, int]) -> None:
        super().__init__(message)
        self.env = env


MAX_EDGE_SPLITS = 8


def split_at_edge(bucket: Bucket, env: dict[str, int]) -> list[Bucket] | None:
    """For a bucket with one dynamic dim whose edge ``env`` traces differently: that edge as an
    exact bucket plus the rest of the range; None when that is not a split of this bucket."""
    if len(bucket.dims) != 1:
        return None
    (r,) = bucket.dims
    size = env[r.name]
    if size not in (r.lo, r.hi):
        return None
    rest = DimRange(r.name, r.lo + 1, r.hi) if size == r.lo else DimRange(r.name, r.lo, r.hi - 1)

    def at(value: int | None, rng: DimRange | None) -> Bucket:
        specs = tuple(
            TensorSpec(
                tuple(value if isinstance(d, SymDim) and value is not None else d for d in s.shape), s.dtype
            )
            for s in bucket.inputs
        )
        return Bucket(specs, (rng,) if rng is not None else (), bucket.values)

    rest_bucket = at(rest.lo, None) if rest.lo == rest.hi else at(None, rest)
    return [at(size, None), rest_bucket]
