"""Render a :class:`~thunder_aot.model.Program` into a Python module: views, Jinja, black, atomic write.

All decisions are made here and in the backend, producing small view objects; the templates in
``templates/`` only loop over them and fill slots.
"""

from __future__ import annotations

import os
import re
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path

import black
import jinja2

from thunder_aot import __version__
from thunder_aot.backends.base import Backend, Line, ops_use_device, render_arg, render_dim
from thunder_aot.model import BucketProgram, Program, ProgramInput, Region, SymDim, TorchCall
from thunder_aot.shapes import format_bucket

#: the header line of a module exported with --unchecked
UNCHECKED_NOTE = (
    "UNCHECKED (--unchecked): no per-call checks of inputs, parameters or autograd; a wrong dtype, "
    "device, layout or a converted module reads out of bounds or computes garbage"
)

BLACK_MODE = black.Mode(line_length=110, target_versions={black.TargetVersion.PY310})


def templates_dir() -> Path:
    """Templates ship inside the wheel as thunder_aot/templates; in a checkout they are ../templates."""
    packaged = Path(__file__).parent / "templates"
    return packaged if packaged.is_dir() else Path(__file__).parent.parent / "templates"


def environment() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(templates_dir())),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        autoescape=False,
    )


@dataclass(frozen=True)
class WarmupEntry:
    """One bucket for warmup(): its dynamic dims with their ranges, and its inputs' shapes and dtypes
    as Python text in those dims."""

    ranges: str  # '{"s0": (1, 2048)}'
    params: str  # "s0"
    inputs: str  # "[((1, s0, 2880), torch.bfloat16)]"


@dataclass(frozen=True)
class BucketView:
    """One bucket: its test, then (inline in ``forward``, no call in between) its dynamic sizes and
    steps; each fusion region's definitions (kernels, FusionDefinitions) live at module level."""

    index: int
    spec: str
    condition: str  # the bucket's test on the inputs' shapes and dtypes (shape_<i>, dtype_<i> locals)
    branch: str  # forward's test for running this bucket: the condition, or ``bucket == <index>``
    dims: tuple[tuple[str, str], ...]  # (dim name, expression reading it off the shapes)
    device_from: str | None
    steps: tuple[Line, ...]
    returns: str
    regions: tuple[object, ...]


@dataclass(frozen=True)
class StateTensor:
    attr_path: str  # "norm.weight"
    owner_path: str  # ".norm" (the submodule holding it), "" for the top module
    leaf: str  # "weight"
    kind: str  # "parameter" | "buffer"
    shape: tuple[int, ...]
    dtype: str
    persistent: bool


@dataclass(frozen=True)
class ModuleView:
    header: tuple[str, ...]
    docstring: str
    stdlib_imports: tuple[str, ...]
    imports: tuple[str, ...]
    class_name: str
    inputs: tuple[str, ...]
    forward_params: tuple[str, ...]
    state_args: tuple[str, ...]  # self.<path> expressions for forward's parameter/buffer arguments
    state_args_in_call: tuple[str, ...]  # the same read off ``state`` (self.__dict__), as __call__ does
    submodules: tuple[str, ...]
    state: tuple[StateTensor, ...]
    buckets: tuple[BucketView, ...]
    bucket_specs: tuple[str, ...]
    input_vars: tuple[tuple[str, str, str], ...]  # (shape variable, dtype variable, input name)
    input_dtypes: tuple[tuple[str, str], ...]
    returns_tuple: bool
    fallback: bool
    attributes: tuple[tuple[str, str], ...]  # (attribute path, repr of the exported value)
    warmup: tuple[WarmupEntry, ...]
    prelude_template: str
    requirements: tuple[tuple[str, str, str], ...]  # (input name, Python test, what it must be)
    #: (attribute path, forward parameter, Python test, what it must be) for each parameter/buffer
    state_requirements: tuple[tuple[str, str, str, str], ...]
    autograd_test: str  # Python test that gradients are asked for ("" when the backend supports autograd)
    backend_name: str
    needs_cuda: bool
    #: forward's fast path: a guard recorded per input shape replaces the Python checks and the
    #: bucket tests (the checked path, ``_dispatch``, runs them and records the guard)
    fast_path: bool
    any_requires_grad: str  # Python test that some argument of forward requires grad
    #: forward sets ``_device`` once per call for the regions' launches (Backend.device_per_call)
    device_per_call: bool


def _conditions(program: BucketProgram, user_inputs: list[ProgramInput]) -> tuple[str, tuple[str, ...]]:
    """Python test for the bucket (using shape_<i> locals) and the expressions of its dims."""
    parts: list[str] = []
    bound: dict[str, str] = {}
    ranges = {r.name: r for r in program.bucket.dims}
    for i, (spec, inp) in enumerate(zip(program.bucket.inputs, user_inputs)):
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
    dims = tuple(bound[r.name] for r in program.bucket.dims)
    return " and ".join(parts), dims


def _call_comment(call: TorchCall) -> str:
    return call.source.comment() if call.source else ""


def _step_lines(
    program: BucketProgram, region_lines: dict[str, tuple[Line, ...]], kernel_regions: set[str]
) -> tuple[Line, ...]:
    """The bucket's steps in order: each region's inline statements (after a comment naming the
    prims it fuses), torch calls for what was not fused. A kernel region (nvFuser, Triton)
    reads its inputs as contiguous: one that torch ops made (a transposed view, say) is made
    contiguous first (a no-op when it already is)."""
    lines = []
    from_torch: set[str] = set()  # values torch calls produced, not yet made contiguous
    for step in program.steps:
        targets = ", ".join(o.name for o in step.outputs)
        if isinstance(step, Region):
            ops = ", ".join(op.prim for op in step.ops)
            lines.append(Line("", f"{step.name}: {ops}"))
            if step.name in kernel_regions:
                for v in step.inputs:
                    if v.name in from_torch:
                        lines.append(Line(f"{v.name} = {v.name}.contiguous()"))
                        from_torch.discard(v.name)
            else:  # a region run as torch ops may return views
                from_torch.update(o.name for o in step.outputs)
            lines += region_lines[step.name]
        else:
            from_torch.update(o.name for o in step.outputs)
            args = [render_arg(a) for a in step.args] + [f"{k}={render_arg(v)}" for k, v in step.kwargs]
            lines.append(Line(f"{targets} = {step.target}({', '.join(args)})", _call_comment(step)))
    return tuple(lines)


def _used_dims(dims, steps: tuple[Line, ...]) -> tuple[tuple[str, str], ...]:
    """The bucket's dynamic sizes that its steps mention (each read off the input shapes once)."""
    code = "\n".join(step.code for step in steps)
    return tuple((name, expr) for name, expr in dims if re.search(rf"\b{name}\b", code))


def _fast_branch(bucket: BucketView, user_inputs: list[ProgramInput]) -> BucketView:
    """The bucket as forward's fast path runs it: chosen by index (``_dispatch`` or the guard
    table decided), its dynamic sizes read off ``shape_0`` (which forward binds) or off the other
    inputs' shapes directly."""
    other = {f"shape_{i}": f"{p.name}.shape" for i, p in enumerate(user_inputs) if i}
    dims = tuple((name, re.sub(r"\bshape_\d+\b", lambda m: other.get(m[0], m[0]), expr)) for name, expr in bucket.dims)
    return replace(bucket, branch=f"bucket == {bucket.index}", dims=dims)


def _warmup_entry(bp: BucketProgram) -> WarmupEntry:
    ranges = "{" + ", ".join(f'"{r.name}": ({r.lo}, {r.hi})' for r in bp.bucket.dims) + "}"
    shapes = []
    for spec in bp.bucket.inputs:
        dims = ", ".join(render_dim(d) for d in spec.shape)
        shapes.append(f"(({dims}{',' if len(spec.shape) == 1 else ''}), torch.{spec.dtype})")
    return WarmupEntry(ranges, ", ".join(r.name for r in bp.bucket.dims), "[" + ", ".join(shapes) + "]")


def _state_lookup(p: ProgramInput, in_call: bool = False) -> str:
    """``self._modules["norm"]._parameters["weight"]``: where nn.Module.__getattr__ would find the
    tensor, without its Python fallback (~0.3 µs per tensor per call). ``in_call``: the same read
    off the module's ``__dict__``, which __call__ binds to ``state``:
    ``state["_modules"]["norm"]._parameters["weight"]``."""
    *owners, leaf = p.source_name.split(".")
    store = "_parameters" if p.kind == "parameter" else "_buffers"
    first, *rest = [*(("_modules", o) for o in owners), (store, leaf)]
    tail = "".join(f'.{attr}["{key}"]' for attr, key in rest)
    if in_call:
        return f'state["{first[0]}"]["{first[1]}"]{tail}'
    return f'self.{first[0]}["{first[1]}"]{tail}'


def module_view(
    program: Program, backend: Backend, command: str, versions: dict[str, str], checks: bool = True
) -> ModuleView:
    """Everything the module template needs. ``checks=False`` (``--unchecked``) leaves out the
    per-call input, parameter and autograd checks; the bucket dispatch stays."""
    user_inputs = [p for p in program.inputs if p.kind == "input"]
    state_inputs = [p for p in program.inputs if p.kind != "input"]
    buckets = []
    kernel_inputs: set[str] = set()  # names that some backend kernel reads as raw pointers
    kernels: dict[tuple, str] = {}  # a kernel's key -> the region that emits it (Triton: one per module)
    for bp in program.buckets:
        condition, dims = _conditions(bp, user_inputs)
        dim_names = tuple(r.name for r in bp.bucket.dims)
        region_views = []
        region_lines: dict[str, tuple[Line, ...]] = {}
        kernel_regions: set[str] = set()
        for region in bp.regions():
            fn_name = f"bucket{bp.index}_{region.name.removeprefix('aot').lower()}"
            view = backend.region_view(Region(fn_name, region.inputs, region.outputs, region.ops), bp.bucket.dims)
            key = getattr(view, "kernel_key", None)
            if key is not None:
                view = view.sharing(kernels[key]) if key in kernels else view
                kernels.setdefault(key, view.kernel)
            region_views.append(view)
            if getattr(view, "uses_backend", False):
                kernel_inputs.update(v.name for v in region.inputs)
            region_lines[region.name] = view.inline_lines
            if getattr(view, "uses_backend", False):
                kernel_regions.add(region.name)
        torch_calls = [s for s in bp.steps if isinstance(s, TorchCall)]
        device_from = program.inputs[0].name if ops_use_device(torch_calls) else None
        steps = _step_lines(bp, region_lines, kernel_regions)
        buckets.append(
            BucketView(
                index=bp.index,
                spec=format_bucket(bp.bucket),
                condition=condition,
                branch=condition,
                dims=_used_dims(zip(dim_names, dims), steps),
                device_from=device_from,
                steps=steps,
                returns=", ".join(bp.outputs) + ("," if program.returns_tuple and len(bp.outputs) == 1 else ""),
                regions=tuple(region_views),
            )
        )
    # a backend's imports and prelude only where one of its own region views needs them (a Triton
    # module whose regions all fell back to torch ops imports no Triton)
    uses_backend = any(getattr(v, "uses_backend", False) for b in buckets for v in b.regions)
    #: the module launches kernels that trust their arguments (not only torch ops)
    kernels_run = bool(backend.input_requirement) and uses_backend and checks
    fast_path = kernels_run
    any_requires_grad = " or ".join(f"{p.name}.requires_grad" for p in program.inputs)
    if fast_path:
        buckets = [_fast_branch(b, user_inputs) for b in buckets]
    first = program.buckets[0]
    spec_of = {v.name: v.spec for v in first.inputs}
    state = []
    for p in state_inputs:
        owner, _, leaf = p.source_name.rpartition(".")
        spec = spec_of[p.name]
        state.append(
            StateTensor(
                attr_path=p.source_name,
                owner_path=f".{owner}" if owner else "",
                leaf=leaf,
                kind=p.kind,
                shape=tuple(int(d) for d in spec.shape if not isinstance(d, SymDim)),
                dtype=spec.dtype,
                persistent=p.persistent,
            )
        )
    submodules = sorted(
        {".".join(p.source_name.split(".")[:k]) for p in state_inputs for k in range(1, p.source_name.count(".") + 1)},
        key=lambda s: (s.count("."), s),
    )
    bucket_specs = tuple(format_bucket(bp.bucket) for bp in program.buckets)
    header = (
        f"@generated by thunder-aot {__version__} from templates/module.py.jinja -- do not edit by hand.",
        f"Regenerate: {command}",
        f"Source: {program.source} ({program.class_name})",
        f"Backend: {backend.name}",
        "Buckets (dispatch order, most specific first):",
        *(f"  {bp.index}: {spec}" for bp, spec in zip(program.buckets, bucket_specs)),
        "Versions: " + ", ".join(f"{k} {v}" for k, v in versions.items()),
        *(() if checks else (UNCHECKED_NOTE,)),
    )
    return ModuleView(
        header=header,
        docstring=(
            f"{program.class_name} from {program.source}, exported by thunder-aot ({backend.name} backend).\n\n"
            "Import-time cost: none beyond torch"
            + (" and the backend library" if backend.imports and uses_backend else "")
            + "; Thunder is not imported."
            + ("" if checks else f"\n\n{UNCHECKED_NOTE}.")
        ),
        stdlib_imports=backend.stdlib_imports if uses_backend else (),
        imports=backend.imports if uses_backend else (),
        class_name=program.class_name,
        inputs=tuple(p.name for p in user_inputs),
        forward_params=tuple(p.name for p in program.inputs),
        state_args=tuple(_state_lookup(p) for p in state_inputs),
        state_args_in_call=tuple(_state_lookup(p, in_call=True) for p in state_inputs),
        submodules=tuple(submodules),
        state=tuple(state),
        buckets=tuple(buckets),
        bucket_specs=bucket_specs,
        input_vars=tuple((f"shape_{i}", f"dtype_{i}", p.name) for i, p in enumerate(user_inputs)),
        input_dtypes=tuple((p.name, spec.dtype) for p, spec in zip(user_inputs, first.bucket.inputs)),
        returns_tuple=program.returns_tuple,
        fallback=program.fallback,
        attributes=tuple((path, repr(value)) for path, value in program.attributes),
        warmup=tuple(_warmup_entry(bp) for bp in program.buckets),
        prelude_template=backend.prelude_template if uses_backend else "",
        requirements=() if not checks else tuple(_input_requirement(p.name, user_inputs[0].name, backend, kernels_run) for p in user_inputs),
        state_requirements=tuple(
            _state_requirement(t, p.name, user_inputs[0].name)
            for t, p in zip(state, state_inputs)
            if kernels_run and p.name in kernel_inputs
        ),
        autograd_test=(
            ""
            if backend.supports_autograd or not uses_backend or not checks
            else f"torch.is_grad_enabled() and ({any_requires_grad})"
        ),
        backend_name=backend.name,
        needs_cuda=backend.name != "torch",
        fast_path=fast_path,
        any_requires_grad=any_requires_grad,
        device_per_call=backend.device_per_call and uses_backend,
    )


def _input_requirement(name: str, first_input: str, backend: Backend, kernels_run: bool) -> tuple[str, str, str]:
    """(name, test, what it must be) for a user input: a tensor; where kernels read it as a raw
    pointer, also what the backend requires, and (after the first input) on the first input's
    device: a kernel launched on one GPU must not be handed another GPU's memory."""
    if not kernels_run:
        return name, f"isinstance({name}, torch.Tensor)", "a tensor"
    tests = [f"isinstance({name}, torch.Tensor)", backend.input_requirement.format(name=name)]
    expected = backend.input_requirement_text
    if name != first_input:
        tests.append(f"{name}.get_device() == {first_input}.get_device()")
        expected += f" on {first_input}'s device"
    return name, " and ".join(tests), expected


def _state_requirement(t: StateTensor, name: str, first_input: str) -> tuple[str, str, str, str]:
    """Kernels read parameters and buffers as raw pointers with the exported dtype and shape: a
    module converted after export (``.half()``, ``.cpu()``, another GPU) must be refused, not read."""
    test = (
        f"{name}.dtype is torch.{t.dtype} and {name}.get_device() == {first_input}.get_device()"
        f" and {name}.shape == {t.shape!r} and {name}.is_contiguous()"
    )
    shape = "x".join(map(str, t.shape)) or "scalar"
    return t.attr_path, name, test, f"a contiguous {t.dtype} tensor of shape {shape} on {first_input}'s device"


def render(program: Program, backend: Backend, command: str, versions: dict[str, str], checks: bool = True) -> str:
    view = module_view(program, backend, command, versions, checks)
    text = environment().get_template("module.py.jinja").render(m=view)
    return black.format_str(text, mode=BLACK_MODE)


def write_atomic(path: Path, text: str) -> bool:
    """Write ``text`` to ``path`` through a temporary file and a rename; False if unchanged."""
    path = Path(path)
    if path.exists() and path.read_text() == text:
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return True
