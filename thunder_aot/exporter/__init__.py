"""The export pipeline: resolve, trace per bucket, lower, generalise, render, verify, write."""

from __future__ import annotations

import copy
import dataclasses
import inspect
import itertools
import shlex
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import torch

from thunder_aot.backends import Backend, get_backend
from thunder_aot.errors import ExportError
from thunder_aot.exporter.resolve import resolve_module
from thunder_aot.model import (
    Bucket,
    BucketProgram,
    DimRange,
    Program,
    ProgramInput,
    Region,
    SymDim,
    TensorSpec,
    TorchCall,
)
from thunder_aot.shapes import contains, dispatch_order, format_bucket, parse_shapes

Progress = Callable[[str], None]


@dataclass(frozen=True)
class ExportRequest:
    source: str
    shapes: tuple[str, ...]
    backend: str = "nvfuser"
    out: str | None = None
    fallback: bool = False
    nvfuser_dynamic: str = "specialize"
    nvfuser_frontend: str = "direct"
    #: per-call checks of inputs, parameters and autograd in the generated module (off: --unchecked)
    checks: bool = True
    #: the seed of verification's random inputs (None: a fresh one, named in any refusal)
    verify_seed: int | None = None
    #: compare the generated module with its source before returning it (off: --no-verify, which
    #: the header records)
    verify: bool = True
    #: one matmul for linear layers that read one input (q/k/v, gate/up), where the backend's
    #: kernels can slice their parts (off: --no-merge-projections, which the header records)
    merge_projections: bool = True
    #: the module itself where it was given as an object (Python API), not found by ``source``
    instance: torch.nn.Module | None = dataclasses.field(default=None, compare=False, repr=False)

    def command(self) -> str:
        """The exact command line that regenerates the output (written into its header)."""
        buckets = "; ".join(format_bucket(b) for b in parse_shapes(list(self.shapes)))
        parts = ["thunder-aot", "export", self.source, "--shapes", buckets, "--backend", self.backend]
        if self.fallback:
            parts.append("--fallback")
        if self.nvfuser_dynamic != "specialize":
            parts += ["--nvfuser-dynamic", self.nvfuser_dynamic]
        if self.nvfuser_frontend != "direct":
            parts += ["--nvfuser-frontend", self.nvfuser_frontend]
        if not self.checks:
            parts.append("--unchecked")
        if not self.verify:
            parts.append("--no-verify")
        if not self.merge_projections:
            parts.append("--no-merge-projections")
        if self.out is not None:
            parts += ["--out", Path(self.out).as_posix()]
        return shlex.join(parts)


def _package_version(name: str) -> str:
    try:
        return version(name).split("+")[0]
    except PackageNotFoundError:
        return "unknown"


def versions() -> dict[str, str]:
    from thunder_aot import __version__

    return {
        "thunder-aot": __version__,
        "lightning-thunder": _package_version("lightning-thunder"),
        "torch": torch.__version__.split("+")[0],
        FORMATTER: _package_version(
            FORMATTER
        ),  # check names a formatter of another version as the cause of a diff
    }


#: the formatter of generated code (its version goes into the header)
FORMATTER = "black"


def forward_input_names(module: torch.nn.Module, count: int) -> list[str]:
    params = list(inspect.signature(module.forward).parameters.values())
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    required = [p for p in positional if p.default is p.empty]
    if any(p.kind == p.VAR_POSITIONAL for p in params):
        return [f"arg{i}" for i in range(count)]
    if not (len(required) <= count <= len(positional)):
        names = ", ".join(p.name for p in positional)
        raise ExportError(
            f"{type(module).__name__}.forward({names}) takes {len(required)}"
            + (f" to {len(positional)}" if len(positional) != len(required) else "")
            + f" tensor inputs; the bucket gives {count}"
        )
    return [p.name for p in positional[:count]]


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


def _sample_args(bucket: Bucket, env: dict[str, int]) -> list[torch.Tensor]:
    from thunder_aot.verify import random_inputs

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
        return self._key(_sample_args(bucket, env), None) in self._traced

    def trace(self, bucket: Bucket, env: dict[str, int], settings: dict[str, object] | None = None):
        """The trace at ``env`` with each setting ``path`` of ``settings`` set to its value (an
        ExportError where Thunder cannot trace it so, raised again each time it is asked for)."""
        from thunder_aot.exporter.trace import trace_module
        from thunder_aot.runtime import setting

        args = _sample_args(bucket, env)
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
        from thunder_aot.exporter.trace import size_conditions

        args = _sample_args(bucket, env)
        key = self._shapes(args)
        if key not in self._conditions:
            self._conditions[key] = size_conditions(self.module, args, self.input_names)
        return self._conditions[key]


def _trace_ignores(traces: Traces, others: dict[str, object], program, bucket, env, index) -> bool:
    """Whether tracing with each setting ``path`` of ``others`` set to its value gives ``program`` again."""
    from thunder_aot.exporter.generalize import align_names
    from thunder_aot.exporter.lower import Lowerer

    try:
        traced = traces.trace(bucket, env, others)
    except ExportError:
        return False
    return align_names(Lowerer(traced, traces.input_names).lower(index, bucket)[0], program) == program


def trace_bucket(
    traces: Traces, bucket: Bucket, index: int, progress: Progress
) -> tuple[BucketProgram, list[ProgramInput], bool, dict[str, object]]:
    from thunder_aot.exporter.generalize import align_names, first_difference, generalize, instantiate
    from thunder_aot.exporter.lower import Lowerer

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


def _sub_bucket(bucket: Bucket, name: str, lo: int, hi: int) -> Bucket:
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
            [_sub_bucket(bucket, name, lo, hi) for lo, hi in parts],
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


def build_program(request: ExportRequest, progress: Progress) -> tuple[Program, torch.nn.Module, Backend]:
    """The request's module, resolved and put where tracing reads it, traced into a program for its
    backend (``trace_program``)."""
    backend = get_backend(
        request.backend, nvfuser_dynamic=request.nvfuser_dynamic, nvfuser_frontend=request.nvfuser_frontend
    )
    module = module_to_trace(request, progress)
    return trace_program(request, module, backend, progress), module, backend


def module_to_trace(request: ExportRequest, progress: Progress) -> torch.nn.Module:
    """The request's module in eval mode, on the CPU (a copy where its tensors are elsewhere)."""
    module = request.instance if request.instance is not None else resolve_module(request.source)
    module.eval()
    devices = {
        str(t.device)
        for t in itertools.chain(module.parameters(), module.buffers())
        if t.device.type != "cpu"
    }
    if "meta" in devices:
        raise ExportError(
            "the module's tensors are on the meta device: export traces and verifies with their values; "
            "load its weights first (e.g. to_empty() then load_state_dict)"
        )
    if devices:  # Thunder traces with CPU example inputs; the module itself is left where it is
        progress(f"the module's tensors are on {', '.join(sorted(devices))}: export traces a copy on the CPU")
        module = copy.deepcopy(module).cpu()
    return module


def trace_program(
    request: ExportRequest, module: torch.nn.Module, backend: Backend, progress: Progress
) -> Program:
    """``module`` traced with Thunder at each of the request's buckets, lowered, generalised over
    their dynamic sizes and put through the backend's passes."""
    buckets = parse_shapes(list(request.shapes))
    input_names = forward_input_names(module, len(buckets[0].inputs))
    for b in buckets:
        if len(b.inputs) != len(input_names):
            raise ExportError(
                f"bucket {format_bucket(b)} gives {len(b.inputs)} inputs; the others give {len(input_names)}"
            )
    traced: list[tuple[Bucket, BucketProgram]] = []
    program_inputs: list[ProgramInput] | None = None
    returns_tuple = False
    attributes: dict[str, object] = {}
    pending = [buckets[i] for i in dispatch_order(buckets)]
    splits = 0
    from thunder_aot.exporter.trace import prims  # first: it imports thunder with its warnings silenced

    traces = Traces(module, input_names, [p for p in prims.PrimIDs if p.name.lower() in backend.prims])
    while pending:
        bucket = pending.pop(0)
        try:
            program, inputs, returns_tuple, read = trace_bucket(traces, bucket, len(traced), progress)
        except SizeSplit as e:
            splits += 1
            if splits > MAX_EDGE_SPLITS:
                raise ExportError(
                    f"{e}; too many splits: give the bucket's pieces buckets of their own"
                ) from None
            parts = [p for p in e.parts if not any(contains(b, p) and contains(p, b) for b in buckets)]
            progress(f"{e}: split into " + " and ".join(format_bucket(p) for p in parts))
            pending[:0] = parts
            continue
        except EdgeMismatch as e:
            parts = split_at_edge(bucket, e.env)
            splits += 1
            if parts is None or splits > MAX_EDGE_SPLITS:
                raise
            parts = [p for p in parts if not any(contains(b, p) and contains(p, b) for b in buckets)]
            progress(
                f"{e.env} traces differently from the rest of {format_bucket(bucket)}: split into "
                + " and ".join(format_bucket(p) for p in parts)
            )
            pending[:0] = parts
            continue
        if program_inputs is not None and [p.source_name for p in inputs] != [
            p.source_name for p in program_inputs
        ]:
            raise ExportError(f"bucket {format_bucket(bucket)} uses other parameters than bucket 0")
        program_inputs = inputs
        attributes.update(read)
        traced.append((bucket, program))
    assert program_inputs is not None
    from thunder_aot.exporter.generalize import share_programs

    order = dispatch_order([b for b, _ in traced])
    programs, dispatch = share_programs([traced[i] for i in order])
    _refuse_shadowing_dims(programs)
    program_inputs = [_with_persistence(p, module) for p in program_inputs]
    from thunder_aot.exporter.identity import drop_identity_calls
    from thunder_aot.exporter.writeback import drop_unobserved_write_backs

    programs = [drop_unobserved_write_backs(drop_identity_calls(bp)) for bp in programs]
    programs = [_kernel_passes(bp, backend) for bp in programs]
    merged = ()
    if request.merge_projections and backend.slices_region_inputs:
        from thunder_aot.exporter.merge import merge_projections

        programs, program_inputs, merged = merge_projections(programs, program_inputs)
        for m in merged:
            progress(f"merged projections: {', '.join(m.members)} -> one matmul on {m.key}")
    return Program(
        source=request.source,
        class_name=type(module).__name__,
        inputs=tuple(program_inputs),
        programs=tuple(programs),
        dispatch=tuple(dispatch),
        returns_tuple=returns_tuple,
        fallback=request.fallback,
        attributes=tuple(sorted(attributes.items())),
        merged=merged,
    )


def _kernel_passes(bp: BucketProgram, backend: Backend) -> BucketProgram:
    """The passes whose outcome the backend's kernels decide: regions of independent parts split
    where the parts make kernels and the whole does not (exporter.split), tensors filled slice by slice
    as concatenations (exporter.fill), copies of permuted views as regions
    and calls that copy nothing dropped (exporter.copies), a mixture of experts' routing
    bookkeeping in one program (exporter.routing), gathers into their readers (exporter.gather),
    basic indices into their readers (exporter.slices), regions into the regions that read them
    (exporter.join), transposed outputs (and transposed region inputs) that only matmuls read
    written untransposed, read as views (exporter.views), then a router's top-k a region of its own
    (exporter.topk)."""
    views: dict[Region, object] = {}

    def view(region: Region):
        if region not in views:
            views[region] = backend.region_view(region, bp.bucket.dims)
        return views[region]

    def makes_kernel(region: Region) -> bool:
        return view(region).runs_kernel

    def contiguous_outputs(region: Region) -> set[str]:
        """The region's outputs a kernel writes contiguously into tensors it allocated."""
        if not view(region).runs_kernel:
            return set()
        return {o.name for o in region.outputs} - set(view(region).strided_outputs)

    from thunder_aot.exporter.copies import copies_to_regions, drop_no_op_calls
    from thunder_aot.exporter.split import split_regions

    bp = split_regions(bp, makes_kernel)
    if backend.copies_as_kernels:
        from thunder_aot.exporter.fill import fills_to_regions

        bp = fills_to_regions(bp, makes_kernel)
        bp = copies_to_regions(bp, contiguous_outputs, makes_kernel)
    bp = drop_no_op_calls(bp, contiguous_outputs)
    if backend.fuses_routing:
        from thunder_aot.exporter.routing import fuse_routing

        bp = fuse_routing(bp, makes_kernel)
    if backend.gathers_region_inputs:
        from thunder_aot.exporter.gather import absorb_gathers

        bp = absorb_gathers(bp, makes_kernel)
    if backend.slices_region_inputs:
        from thunder_aot.exporter.slices import absorb_slices

        bp = absorb_slices(bp, makes_kernel)
    if backend.joins_regions:
        from thunder_aot.exporter.join import join_regions

        bp = join_regions(bp, makes_kernel)
    if backend.views_for_strided_readers:
        from thunder_aot.exporter.views import transposed_outputs_as_views

        bp = transposed_outputs_as_views(bp, makes_kernel)
    if backend.fuses_topk:
        from thunder_aot.exporter.topk import topk_regions

        bp = topk_regions(bp, makes_kernel)
    return bp


def _refuse_shadowing_dims(programs: list[BucketProgram]) -> None:
    """A dynamic dim becomes a local of the generated forward: it must not share a value's name."""
    for bp in programs:
        values = {v.name for v in bp.inputs} | {o.name for step in bp.steps for o in step.outputs}
        for r in bp.bucket.dims:
            if r.name in values:
                raise ExportError(
                    f"the dynamic dim {r.name!r} has the name of a value of the traced program; "
                    "name it otherwise (e.g. [S=LO..HI])"
                )


def _with_persistence(p: ProgramInput, module: torch.nn.Module) -> ProgramInput:
    if p.kind != "buffer":
        return p
    owner_name, _, leaf = p.source_name.rpartition(".")
    owner = module.get_submodule(owner_name) if owner_name else module
    return dataclasses.replace(p, persistent=leaf not in owner._non_persistent_buffers_set)


def regions_without_kernels(program: Program, backend) -> list[str]:
    """One line per region the backend runs as torch calls, not as a kernel: what it holds, and what
    it runs as instead (the user's source-level calls, or one call per prim)."""
    if backend.name == "torch":
        return []
    lines = []
    for bp in program.programs:
        for region in bp.regions():
            view = backend.region_view(region, bp.bucket.dims)
            if view.runs_kernel:
                continue
            where = f"program {bp.index}, " if len(program.programs) > 1 else ""
            if getattr(view, "source_level", False):
                calls = Counter(c.target for c in region.source_calls)
                instead = "its source's torch calls: " + ", ".join(
                    f"{t} x{n}" for t, n in sorted(calls.items())
                )
            else:
                instead = f"one torch call per prim ({len(region.ops)})"
            prims = sorted({op.prim for op in region.ops})
            lines.append(
                f"no {backend.name} kernel for {where}region {region.name} ({', '.join(prims)}): "
                f"runs as {instead}"
            )
    return lines


def export(request: ExportRequest, *, verify: bool = True, progress: Progress | None = None) -> str:
    """Generate the module's text (``request.out`` only goes into its header; callers write)."""
    from thunder_aot.codegen import render
    from thunder_aot.verify import verify as run_verify

    progress = progress or (lambda msg: None)
    if request.backend == "auto":
        from thunder_aot.backends import resolve_auto

        name, why = resolve_auto()
        progress(f"backend auto: {name} ({why})")
        request = dataclasses.replace(request, backend=name)
    verify = verify and request.verify
    if verify:  # before any tracing: a module that cannot be verified here is not written unasked
        reason = get_backend(
            request.backend,
            nvfuser_dynamic=request.nvfuser_dynamic,
            nvfuser_frontend=request.nvfuser_frontend,
        ).unavailable_reason()
        if reason is not None:
            raise ExportError(
                f"cannot verify a {request.backend} module on this machine ({reason}); "
                "pass --no-verify (Python: verify=False) to write it unverified"
            )
    program, module, backend = build_program(request, progress)
    unfused = Counter(s.target for bp in program.programs for s in bp.steps if isinstance(s, TorchCall))
    if unfused:
        listed = ", ".join(f"{target} x{count}" for target, count in sorted(unfused.items()))
        progress(f"not fused (run as torch calls): {listed}")
    for line in regions_without_kernels(program, backend):
        progress(line)
    progress(
        f"rendering {len(program.dispatch)} bucket(s) as {len(program.programs)} program(s) "
        f"with the {backend.name} backend"
    )
    text = render(program, backend, request.command(), versions(), checks=request.checks)
    if verify:
        from thunder_aot.exporter.demote import verified_with_source_calls
        from thunder_aot.verify import new_seed

        buckets = [bucket for bucket, _ in program.dispatch]
        seed = request.verify_seed if request.verify_seed is not None else new_seed()

        def verified(text: str) -> tuple[int, list[str]]:
            eager_only: list[str] = []
            checked = run_verify(
                text,
                module,
                buckets,
                program.class_name,
                device=backend.verify_device,
                seed=seed,
                without_float64=eager_only,
            )
            return checked, eager_only

        try:
            checked, eager_only = verified(text)
        except ExportError as refusal:
            text, (checked, eager_only) = verified_with_source_calls(
                program,
                backend,
                refusal,
                lambda demoted: render(
                    demoted, backend, request.command(), versions(), checks=request.checks
                ),
                verified,
                progress,
            )
        against = (
            "float64"
            if not eager_only
            else (
                f"float64; {len(eager_only)} of them against eager alone: "
                "the source module cannot run in float64"
            )
        )
        progress(f"verified: {checked} calls match the source module (against {against}; seed {seed})")
    else:
        progress("not verified (--no-verify)")
    return text
