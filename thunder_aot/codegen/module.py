"""The module view: everything ``templates/module.py.jinja`` prints, decided from a Program and a backend.

The templates only loop over these views and fill slots; every choice (which checks, which
dispatch, which definitions are shared, what each program's branch says) is made here or in the
backend's region views. It is one file because it is the one place those choices are made: the
view types and the functions that fill them read each other's decisions.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass

from thunder_aot.backends.base import (
    Backend,
    Line,
    RegionView,
    ops_use_device,
    render_arg,
    render_dim,
    torch_call_expression,
    torch_call_line,
    tuple_text,
)
from thunder_aot.codegen.header import UNCHECKED_NOTE, header_lines
from thunder_aot.codegen.liveness import released
from thunder_aot.codegen.per_shape import bind_per_shape
from thunder_aot.ir import (
    LINEAR,
    Bucket,
    BucketProgram,
    Dim,
    Program,
    ProgramInput,
    Ref,
    Region,
    SymDim,
    TorchCall,
)
from thunder_aot.runtime import RUNTIME_VERSION
from thunder_aot.shapes import env_inside, format_bucket

#: what every generated module imports from the runtime library (more as its checks need)
RUNTIME_NAMES = (
    "BucketSpec",
    "InputSpec",
    "GLOBAL_BACKWARD_HOOKS",
    "GLOBAL_BACKWARD_PRE_HOOKS",
    "GLOBAL_FORWARD_HOOKS",
    "GLOBAL_FORWARD_PRE_HOOKS",
    "GeneratedModule",
    "NoBucketError",
    "autocast_error",
    "autocasting",
    "no_bucket",
    "require",
)
#: what the fast path (a guard per input shape) imports
FAST_PATH_NAMES = ("GuardTable", "dynamo_compiling", "is_grad_enabled")


def _runtime_import(
    checks: list[Check],
    fast_path: bool,
    records_choices: bool = False,
    merged: bool = False,
    dynamic: bool = False,
) -> str:
    names = set(RUNTIME_NAMES) | (set(FAST_PATH_NAMES) if fast_path else set())
    if dynamic:  # a dynamic size in the typed bucket table
        names.add("Size")
    if merged:  # a merged projection's call reads its members while torch.compile traces
        names.add("dynamo_compiling")
    if records_choices:  # a kernel's top-k picks, for a verification watching the call
        names.add("CHOICES")
    names |= {c.error.partition("(")[0] for c in checks}
    if "unmerged" in names:
        names.add("UnmergedError")
    return f"from thunder_aot.runtime import {', '.join(sorted(names))}"


def _size_expression(dim: Dim) -> str:
    if isinstance(dim, int):
        return str(dim)
    extra = f", {dim.coeff}, {dim.offset}" if dim.offset else (f", {dim.coeff}" if dim.coeff != 1 else "")
    return f"Size({dim.name!r}{extra})"


def bucket_spec_expression(bucket: Bucket, text: str) -> str:
    """``bucket`` as the runtime.BucketSpec expression of the generated module's ``BUCKET_SPECS``."""
    inputs = []
    for i, spec in enumerate(bucket.inputs):
        shape = tuple_text([_size_expression(d) for d in spec.shape]) if spec.shape else "()"
        values = bucket.value_range(i)
        inputs.append(f"InputSpec({shape}, torch.{spec.dtype}" + (f", values={values!r})" if values else ")"))
    dims = tuple_text([f"({r.name!r}, {r.lo}, {r.hi})" for r in bucket.dims])
    return f"BucketSpec({text!r}, {tuple_text(inputs)}" + (f", {dims})" if bucket.dims else ")")


@dataclass(frozen=True)
class Check:
    """One per-call check of ``_dispatch``: a Python test that the call is wrong, and the error raised
    then."""

    failure: str
    error: str


@dataclass(frozen=True)
class DispatchEntry:
    """One bucket: its test on the inputs' shapes and dtypes (shape_<i>, dtype_<i>), and the
    statement that selects its program (with the guard table: and the program's sizes)."""

    keyword: str  # "if" or "elif"
    condition: str
    selection: str  # "program = 0", or "program, sizes = 0, (shape_0[1],)"
    spec: str


@dataclass(frozen=True)
class ProgramView:
    """One program's branch of ``forward``: its dynamic sizes, its steps, what it returns."""

    index: int
    label: str  # the buckets it serves
    #: with the guard table: the statement binding its dynamic dims from ``sizes`` ("" for none)
    unpack: str
    dims: tuple[tuple[str, str], ...]  # without it: (dim name, expression reading it off the inputs)
    steps: tuple[Line, ...]
    returns: str


@dataclass(frozen=True)
class SizesFunction:
    """``_sizes_of_<k>``: what program k computes from its dims alone, made once per input shape
    (codegen.per_shape) for the guard table's entry."""

    name: str
    program: int
    params: tuple[str, ...]  # the dims
    values: str  # Python text of the tuple it returns


@dataclass(frozen=True)
class WarmupEntry:
    """One bucket for warmup(): its dynamic dims with their ranges, and its inputs' shapes and
    dtypes as Python text in those dims."""

    ranges: str  # '{"s0": (1, 2048)}'
    params: str  # "s0"
    inputs: str  # "[((1, s0, 2880), torch.bfloat16)]"


@dataclass(frozen=True)
class ModuleView:
    header: tuple[str, ...]
    docstring: str
    dispatch_doc: str
    params_tuple: str  # forward's arguments as a tuple, for the guard table
    imports: tuple[str, ...]  # torch and the runtime library
    backend_imports: tuple[str, ...]  # after require(): an older runtime is named before they fail
    preamble: tuple[str, ...]
    runtime_version: int
    class_name: str
    inputs: tuple[str, ...]
    forward_params: tuple[str, ...]
    bucket_specs: tuple[str, ...]
    #: each bucket of bucket_specs as a runtime.BucketSpec expression (the typed table)
    bucket_values: tuple[str, ...]
    definitions: tuple[RegionView, ...]  # regions that emit a module-level definition, in order
    checks: tuple[Check, ...]
    input_vars: tuple[tuple[str, str, str], ...]  # (shape variable, dtype variable, input name)
    dispatch: tuple[DispatchEntry, ...]
    #: forward's selection of a program: the guard table's fast path, or ``_dispatch`` alone
    select_template: str
    fast_path: bool
    fast_device: tuple[Line, ...]  # on the fast path: the call's ``_device`` (Triton)
    checked_device: tuple[Line, ...]  # on the checked path: the same
    programs: tuple[ProgramView, ...]
    sizes_functions: tuple[SizesFunction, ...]
    state_rows: tuple[str, ...]  # GeneratedModule.STATE rows
    merged_rows: tuple[str, ...]  # GeneratedModule.MERGED rows
    #: on the fast path, after the guard: each merged projection's members still views of it
    fast_tests: tuple[str, ...]
    settings: tuple[tuple[str, str], ...]  # (repr of the setting's path, repr of the exported value)
    warmup: tuple[WarmupEntry, ...]
    fallback: bool
    state_args: tuple[str, ...]  # forward's parameter/buffer arguments, read off self
    state_args_in_call: tuple[str, ...]  # the same read off ``state`` (self.__dict__), as __call__ does


def _bucket_condition(bucket: Bucket) -> str:
    """Python test that the inputs (their shape_<i> and dtype_<i> locals) are in ``bucket``."""
    parts: list[str] = []
    bound: dict[str, str] = {}
    ranges = {r.name: r for r in bucket.dims}
    for i, spec in enumerate(bucket.inputs):
        shape_var = f"shape_{i}"
        parts.append(f"dtype_{i} is torch.{spec.dtype}")
        if all(isinstance(d, int) for d in spec.shape):
            parts.append(f"{shape_var} == {tuple(spec.shape)!r}")
            continue
        parts.append(f"len({shape_var}) == {len(spec.shape)}")
        for axis, dim in enumerate(spec.shape):
            here = f"{shape_var}[{axis}]"
            if isinstance(dim, int):
                parts.append(f"{here} == {dim}")
            elif dim.name in bound:
                parts.append(f"{here} == {bound[dim.name]}")
            else:
                r = ranges[dim.name]
                parts.append(f"{r.lo} <= {here} <= {r.hi}")
                bound[dim.name] = here
    return " and ".join(parts)


def _dim_reads(
    program: BucketProgram, user_inputs: list[ProgramInput], shapes_bound: bool
) -> list[tuple[str, str]]:
    """Each dynamic dim of the program, read off the first input shape that carries it (``shape_<i>``
    where ``_dispatch`` has bound the shapes, else the input's ``.shape``)."""
    reads: dict[str, str] = {}
    for i, (spec, inp) in enumerate(zip(program.bucket.inputs, user_inputs)):
        shape = f"shape_{i}" if shapes_bound else f"{inp.name}.shape"
        for axis, dim in enumerate(spec.shape):
            if isinstance(dim, SymDim) and dim.name not in reads:
                reads[dim.name] = f"{shape}[{axis}]" if dim.coeff == 1 else f"{shape}[{axis}] // {dim.coeff}"
    return list(reads.items())


def _step_lines(
    program: BucketProgram, views: dict[str, RegionView], members: dict[str, tuple[str, ...]], backend: str
) -> tuple[Line, ...]:
    """The program's steps in order: each region's statements (after a comment naming the prims
    it fuses), torch calls for what was not fused (a merged projection's call while torch.compile
    traces: see :func:`_merged_call_line`). A kernel reads its inputs as contiguous: one
    that torch ops or an nvFuser fusion made (a transposed view, say) is made contiguous first (a
    no-op when it is). So is a program output a fusion may lay out permuted (eager returns it
    contiguous: a caller feeding it back, a KV cache, gets what it would from the source)."""
    lines = []
    from_torch: set[str] = set()  # values that may not be contiguous, not yet made so
    permuted: set[str] = set()  # of those, the ones a fusion laid out permuted
    for step in program.steps:
        if isinstance(step, Region):
            view = views[step.name]
            if getattr(view, "source_level", False) and backend == "torch":
                lines.append(Line("", f"{view.name}: the source's torch calls ({len(step.ops)} prims)"))
            elif getattr(view, "source_level", False):
                lines.append(
                    Line(
                        "",
                        f"{view.name}: no kernel for {', '.join(op.prim for op in step.ops)}; "
                        "its source's torch calls",
                    )
                )
            else:
                lines.append(Line("", f"{view.name}: {', '.join(op.prim for op in step.ops)}"))
            if view.runs_kernel:
                for v in step.inputs:
                    if v.name in from_torch:
                        lines.append(Line(f"{v.name} = {v.name}.contiguous()"))
                        from_torch.discard(v.name)
                        permuted.discard(v.name)
            if not view.runs_kernel:  # torch ops may return views
                from_torch.update(o.name for o in step.outputs)
            else:
                from_torch.update(view.strided_outputs)
                permuted.update(view.permuted_outputs)
            lines += view.steps
        else:
            from_torch.update(o.name for o in step.outputs)
            lines.append(_merged_call_line(step, members) or torch_call_line(step))
    lines += [
        Line(f"{name} = {name}.contiguous()") for name in dict.fromkeys(program.outputs) if name in permuted
    ]
    regions = [s for s in program.steps if isinstance(s, Region)]
    if ops_use_device([s for s in program.steps if isinstance(s, TorchCall)]) or any(
        ops_use_device(r.ops) or ops_use_device(r.source_calls) for r in regions
    ):  # torch calls and torch-backend regions that make tensors on the input's device
        lines.insert(0, Line(f"device = {program.inputs[0].name}.device"))
    return tuple(lines)


def _merged_call_line(call: TorchCall, members: dict[str, tuple[str, ...]]) -> Line | None:
    """A linear call on a merged weight, as the concatenated member calls while torch.compile
    traces: dynamo cannot trace the ``data_ptr()`` tests that prove the members still lie in the
    merged tensor, so a traced call reads the members themselves (correct whatever they alias, one
    matmul per member and a copy of their outputs); None for any other call."""
    if (
        call.target != LINEAR
        or len(call.args) < 2
        or not isinstance(call.args[1], Ref)
        or call.args[1].name not in members
    ):
        return None
    x = render_arg(call.args[0])
    weights = members[call.args[1].name]
    bias = call.args[2] if len(call.args) == 3 else None
    biases = members[bias.name] if isinstance(bias, Ref) else (None,) * len(weights)
    parts = ", ".join(f"{call.target}({x}, {w}, {b})" for w, b in zip(weights, biases))
    code = f"torch.cat(({parts},), -1)\n    if dynamo_compiling()\n    else {torch_call_expression(call)}"
    return Line(f"{call.outputs[0].name} = (\n    {code}\n)", call.source.comment() if call.source else "")


def _warmup_entry(bucket: Bucket) -> WarmupEntry:
    ranges = "{" + ", ".join(f'"{r.name}": ({r.lo}, {r.hi})' for r in bucket.dims) + "}"
    shapes = []
    for spec in bucket.inputs:
        dims = ", ".join(render_dim(d) for d in spec.shape)
        shapes.append(f"(({dims}{',' if len(spec.shape) == 1 else ''}), torch.{spec.dtype})")
    return WarmupEntry(ranges, ", ".join(r.name for r in bucket.dims), "[" + ", ".join(shapes) + "]")


def _state_lookup(p: ProgramInput, in_call: bool = False) -> str:
    """``self._modules["norm"]._parameters["weight"]``: where nn.Module.__getattr__ would find the
    tensor, without its Python fallback. ``in_call``: the same read off the module's ``__dict__``,
    which __call__ binds to ``state``: ``state["_modules"]["norm"]._parameters["weight"]``."""
    *owners, leaf = p.source_name.split(".")
    store = "_parameters" if p.kind == "parameter" else "_buffers"
    first, *rest = [*(("_modules", o) for o in owners), (store, leaf)]
    tail = "".join(f'.{attr}["{key}"]' for attr, key in rest)
    return f'state["{first[0]}"]["{first[1]}"]{tail}' if in_call else f'self.{first[0]}["{first[1]}"]{tail}'


def _region_name(region: Region, program: BucketProgram, programs: int) -> str:
    """``fusion0``: a region's definition, named by its place in the program (``program1_fusion0``
    where the module has several programs)."""
    k = region.name.removeprefix("aotFusion")
    return f"fusion{k}" if programs == 1 else f"program{program.index}_fusion{k}"


def _checks(
    program: Program,
    backend: Backend,
    user_inputs: list[ProgramInput],
    kernel_inputs: set[str],
    kernels_run: bool,
) -> list[Check]:
    """What ``_dispatch`` tests of every call before it trusts the kernels with raw memory."""
    owner = "_OWNER"
    first = user_inputs[0].name
    checks = []
    for p in user_inputs:
        if not kernels_run:
            checks.append(
                Check(
                    f"not isinstance({p.name}, torch.Tensor)",
                    f'bad_input({owner}, "{p.name}", {p.name}, "a tensor")',
                )
            )
            continue
        tests = [f"isinstance({p.name}, torch.Tensor)", backend.input_requirement.format(name=p.name)]
        expected = backend.input_requirement_text
        if p.name != first:
            tests.append(f"{p.name}.get_device() == {first}.get_device()")
            expected += f" on {first}'s device"
        checks.append(
            Check(f"not ({' and '.join(tests)})", f'bad_input({owner}, "{p.name}", {p.name}, "{expected}")')
        )
    if not kernels_run:
        return checks
    specs = {v.name: v.spec for v in program.programs[0].inputs}
    for p in program.inputs:
        if p.kind == "input" or p.name not in kernel_inputs:
            continue
        spec = specs[p.name]
        shape = tuple(int(d) for d in spec.shape)
        test = (
            f"{p.name}.dtype is torch.{spec.dtype} and {p.name}.get_device() == {first}.get_device()"
            f" and {p.name}.shape == {shape!r} and {p.name}.is_contiguous()"
        )
        wanted = (
            f"a contiguous {spec.dtype} tensor of shape {'x'.join(map(str, shape)) or 'scalar'} "
            f"on {first}'s device"
        )
        checks.append(
            Check(
                f"not ({test})",
                f'bad_state({owner}, "{p.source_name}", {p.name}, "{wanted}", {first}.device)',
            )
        )
    if not backend.supports_autograd:
        any_grad = " or ".join(f"{p.name}.requires_grad" for p in program.inputs)
        checks.append(
            Check(f"torch.is_grad_enabled() and ({any_grad})", f'no_autograd({owner}, "{backend.name}")')
        )
    return checks


def _member_addresses(program: Program) -> list[tuple[ProgramInput, ProgramInput, str]]:
    """Per member parameter of a merged projection: its input, the merged tensor's input, and the
    Python text of the address the member must have (the merged tensor's plus its byte offset)."""
    import math

    import torch

    by_key = {p.source_name: p for p in program.inputs}
    specs = {v.name: v.spec for v in program.programs[0].inputs}
    rows = []
    for m in program.merged:
        merged = by_key[m.key]
        itemsize = getattr(torch, specs[merged.name].dtype).itemsize
        at = 0
        for key in m.members:
            p = by_key[key]
            rows.append((p, merged, f"{merged.name}.data_ptr()" + (f" + {at}" if at else "")))
            at += math.prod(int(d) for d in specs[p.name].shape) * itemsize
    return rows


def _merged_checks(program: Program) -> list[Check]:
    """Each member parameter of a merged projection still lies where the merged tensor holds it
    (not tested while torch.compile traces: the traced program reads the members themselves)."""
    return [
        Check(
            f"not dynamo_compiling() and {p.name}.data_ptr() != {where}",
            f'unmerged(_OWNER, "{p.source_name}", "{merged.source_name}")',
        )
        for p, merged, where in _member_addresses(program)
    ]


def _fast_tests(program: Program) -> tuple[str, ...]:
    return tuple(f"{p.name}.data_ptr() == {where}" for p, _, where in _member_addresses(program))


def module_view(
    program: Program, backend: Backend, command: str, versions: dict[str, str], checks: bool = True
) -> ModuleView:
    """Everything the module template needs. ``checks=False`` (``--unchecked``) leaves out the
    per-call input, parameter and autograd checks; the bucket dispatch stays."""
    user_inputs = [p for p in program.inputs if p.kind == "input"]
    state_inputs = [p for p in program.inputs if p.kind != "input"]
    definitions: list[RegionView] = []
    shared: dict[tuple, str] = {}  # a definition's key -> the name of the region that emits it
    kernel_inputs: set[str] = set()  # names some kernel reads as raw memory
    program_views: list[tuple[BucketProgram, dict[str, RegionView]]] = []
    for bp in program.programs:
        known = tuple(
            env_inside(bp.bucket, bucket)
            for bucket, index in program.dispatch
            if index == bp.index and bucket.is_exact
        )
        views: dict[str, RegionView] = {}
        for region in bp.regions():
            named = dataclasses.replace(region, name=_region_name(region, bp, len(program.programs)))
            view = backend.region_view(named, bp.bucket.dims, known)
            key = view.definition_key
            if key is not None and key in shared:
                view = view.sharing(shared[key])
            elif view.template:
                definitions.append(view)
                if key is not None:
                    shared[key] = view.name
            if view.runs_kernel:
                kernel_inputs.update(v.name for v in region.inputs)
            views[region.name] = view
        program_views.append((bp, views))
    runs_kernels = bool(kernel_inputs)
    kernels_run = (
        bool(backend.input_requirement) and runs_kernels and checks
    )  # the module's checks guard kernels
    device_per_call = backend.device_per_call and runs_kernels
    first = user_inputs[0].name
    programs, sizes_of, sizes_functions = [], {}, []
    by_key = {p.source_name: p.name for p in program.inputs}
    members = {by_key[m.key]: tuple(by_key[k] for k in m.members) for m in program.merged}
    for bp, views in program_views:
        steps = _step_lines(bp, views, members, backend.name)
        code = "\n".join(step.code for step in steps)
        dims = [(n, e) for n, e in _dim_reads(bp, user_inputs, kernels_run) if re.search(rf"\b{n}\b", code)]
        served = [format_bucket(b) for b, index in program.dispatch if index == bp.index]
        returns = ", ".join(bp.outputs) + ("," if program.returns_tuple and len(bp.outputs) == 1 else "")
        if kernels_run:  # the guard table holds the sizes: _dispatch makes them, once per shape
            bound = bind_per_shape(steps, [n for n, _ in dims])
            steps, names = bound.steps, [n for n, _ in bound.values]
            if all(n == text for n, text in bound.values):  # the dims alone: read inline
                sizes_of[bp.index] = tuple_text([e for n, e in dims if n in names])
            else:
                function = SizesFunction(
                    f"_sizes_of_{bp.index}",
                    bp.index,
                    tuple(n for n, _ in dims),
                    tuple_text([t for _, t in bound.values]),
                )
                sizes_functions.append(function)
                sizes_of[bp.index] = f"{function.name}({', '.join(e for _, e in dims)})"
            unpack, read_dims = (f"{tuple_text(names)} = sizes" if names else ""), ()
        else:
            unpack, read_dims = "", tuple(dims)
        steps = released(steps, bp.outputs)
        programs.append(ProgramView(bp.index, "; ".join(served), unpack, read_dims, steps, returns))
    bucket_specs = tuple(format_bucket(b) for b, _ in program.dispatch)
    header = header_lines(
        command=command,
        source=program.source,
        class_name=program.class_name,
        backend=backend.name,
        dispatch=[(spec, index) for spec, (_, index) in zip(bucket_specs, program.dispatch)],
        versions=versions,
        checks=checks,
    )
    spec_of = {v.name: v.spec for v in program.programs[0].inputs}
    state_rows = tuple(
        f'("{p.source_name}", "{p.kind}", {tuple(int(d) for d in spec_of[p.name].shape)!r}, '
        f"torch.{spec_of[p.name].dtype}, {p.persistent})"
        for p in state_inputs
        if p.kind != "merged"
    )
    merged_rows = tuple(f"({m.key!r}, {tuple(m.members)!r})" for m in program.merged)
    docstring = (
        f"{program.class_name} from {program.source}, exported by thunder-aot ({backend.name} backend).\n\n"
        "Imports torch"
        + (", the backend library" if backend.imports and runs_kernels else "")
        + " and thunder_aot.runtime; Thunder is not imported."
        + ("" if checks else f"\n\n{UNCHECKED_NOTE}.")
    )
    module_checks = (
        _checks(program, backend, user_inputs, kernel_inputs, kernels_run) + _merged_checks(program)
        if checks
        else []
    )
    dispatch_doc = (
        "The checked path: every check of the arguments, then the program of the first bucket the\n"
        "    inputs' shapes and dtypes match; records a guard of these tensors for their shape."
        if kernels_run
        else "The program of the first bucket the inputs' shapes and dtypes match."
    )
    return ModuleView(
        header=header,
        docstring=docstring,
        dispatch_doc=dispatch_doc,
        params_tuple=tuple_text([p.name for p in program.inputs]),
        imports=(
            "import torch",
            _runtime_import(
                module_checks,
                kernels_run,
                any(getattr(v, "recorded", ()) for _, views in program_views for v in views.values()),
                bool(program.merged),
                any(b.dims for b, _ in program.dispatch),
            ),
        ),
        backend_imports=backend.imports_for(definitions) if runs_kernels else (),
        preamble=backend.preamble if runs_kernels else (),
        runtime_version=RUNTIME_VERSION,
        class_name=program.class_name,
        inputs=tuple(p.name for p in user_inputs),
        forward_params=tuple(p.name for p in program.inputs),
        bucket_specs=bucket_specs,
        bucket_values=tuple(
            bucket_spec_expression(b, text) for (b, _), text in zip(program.dispatch, bucket_specs)
        ),
        definitions=tuple(definitions),
        checks=tuple(module_checks),
        input_vars=tuple((f"shape_{i}", f"dtype_{i}", p.name) for i, p in enumerate(user_inputs)),
        dispatch=tuple(
            DispatchEntry(
                "if" if k == 0 else "elif",
                _bucket_condition(bucket),
                f"program, sizes = {index}, {sizes_of[index]}" if kernels_run else f"program = {index}",
                format_bucket(bucket),
            )
            for k, (bucket, index) in enumerate(program.dispatch)
        ),
        select_template="select_guarded.py.jinja" if kernels_run else "select_plain.py.jinja",
        fast_path=kernels_run,
        fast_device=(
            (
                Line(
                    "_device = fast[3]",
                    "the guard fixed the tensors' device; kernels launch directly on the current one",
                ),
                Line("if _device >= 0 and _device != current_device():\n    _device = -1"),
            )
            if device_per_call
            else ()
        ),
        checked_device=(Line(f"_device = eager_device({first})"),) if device_per_call else (),
        programs=tuple(programs),
        sizes_functions=tuple(sizes_functions),
        state_rows=state_rows,
        merged_rows=merged_rows,
        fast_tests=_fast_tests(program) if kernels_run else (),
        settings=tuple((repr(path), repr(value)) for path, value in program.attributes),
        warmup=tuple(_warmup_entry(bucket) for bucket, _ in program.dispatch),
        fallback=program.fallback,
        state_args=tuple(_state_lookup(p) for p in state_inputs),
        state_args_in_call=tuple(_state_lookup(p, in_call=True) for p in state_inputs),
    )
