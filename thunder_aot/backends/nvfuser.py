"""nvFuser backend: each region becomes the nvFuser FusionDefinition Thunder would build, written
out as readable Python, and is called with nothing else on the hot path.

Two frontends of nvFuser 0.2.35 take the same definition calls (``fd.define_tensor``,
``fd.ops.*``, ``fd.add_output``): ``nvfuser_direct`` (the default: Thunder 0.2.6 itself uses it
with nvFuser >= 0.2.34, and it executes ~2.5 µs faster per call on the GPU machine) and the older
``nvfuser``. Everything frontend-specific lives in this file and the ``nvfuser_*`` templates.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from thunder_aot.backends.base import (
    Backend,
    Line,
    assign_text,
    region_dims,
    render_const,
    render_dim,
    source_comments,
)
from thunder_aot.ir import (
    VIEW_PRIMS,
    Arg,
    Const,
    DeviceArg,
    DimRange,
    DType,
    PrimOp,
    Ref,
    Region,
    Seq,
    SizeArg,
    SymDim,
    Value,
    dim_arg,
)

#: torch dtype name -> nvFuser DataType member
NV_DTYPES = {
    "bool": "Bool",
    "uint8": "Byte",
    "int8": "Char",
    "int16": "Short",
    "int32": "Int32",
    "int64": "Int",
    "float16": "Half",
    "bfloat16": "BFloat16",
    "float32": "Float",
    "float64": "Double",
    "complex64": "ComplexFloat",
    "complex128": "ComplexDouble",
}
INTEGER_DTYPES = {"bool", "uint8", "int8", "int16", "int32", "int64"}

#: How a dynamic bucket's regions are defined. "specialize" (default): one static FusionDefinition
#: per size met at run time, recorded at that size's first call (nvFuser then compiles it once);
#: "symbolic": one FusionDefinition with -1 sizes serves the whole bucket.
DYNAMIC_MODES = ("specialize", "symbolic")

#: frontend name -> its Python module
FRONTENDS = {"direct": "nvfuser_direct", "legacy": "nvfuser"}


def _scalar(value: object) -> str:
    if isinstance(value, bool):
        return f"fd.define_scalar({value!r}, dtype=DataType.Bool)"
    if isinstance(value, int):
        return f"fd.define_scalar({value!r}, dtype=DataType.Int)"
    if isinstance(value, float):
        return f"fd.define_scalar({render_const(value)}, dtype=DataType.Double)"
    raise TypeError(f"no nvFuser scalar for {value!r}")


def nv_arg(arg: Arg, *, inline: bool = False, specialized: bool = False) -> str:
    """nvFuser frontend text for an argument. ``inline`` keeps plain Python ints (dims, sizes);
    ``specialized``: dynamic sizes are Python ints known when the definition is recorded."""
    if isinstance(arg, Ref):
        return arg.name
    if isinstance(arg, Const):
        if inline or arg.value is None:
            return render_const(arg.value)
        return _scalar(arg.value)
    if isinstance(arg, DType):
        return f"DataType.{NV_DTYPES[arg.name]}"
    if isinstance(arg, SizeArg):
        dim = arg.dim
        if isinstance(dim, int):
            return str(dim) if inline else _scalar(float(dim) if arg.real else dim)
        if specialized:  # a float as a constant of the definition is (Const's _scalar)
            return (
                f"fd.define_scalar(float({render_dim(dim)}), dtype=DataType.Double)"
                if arg.real
                else render_dim(dim)
            )
        text = dim.name if dim.coeff == 1 else f"fd.ops.mul({dim.name}, {_scalar(dim.coeff)})"
        text = text if not dim.offset else f"fd.ops.add({text}, {_scalar(dim.offset)})"
        return f"fd.ops.cast({text}, DataType.Double)" if arg.real else text
    if isinstance(arg, Seq):
        symbolic = not specialized and any(isinstance(i, SizeArg) for i in arg.items)
        # a shape with a dynamic size is a vector of nvFuser scalars; a static one stays Python ints
        return (
            "[" + ", ".join(nv_arg(i, inline=not symbolic, specialized=specialized) for i in arg.items) + "]"
        )
    if isinstance(arg, DeviceArg):
        return "None"
    raise TypeError(f"cannot render {arg!r} for nvFuser")


@dataclass
class NvOp:
    op: PrimOp
    specialized: bool = False

    def a(self, i: int, *, inline: bool = False) -> str:
        return nv_arg(self.op.args[i], inline=inline, specialized=self.specialized)

    def kw(self, name: str, *, inline: bool = False) -> str:
        return nv_arg(dict(self.op.kwargs)[name], inline=inline, specialized=self.specialized)


def _ops(name: str, arity: int) -> Callable[[NvOp], str]:
    return lambda c: f"fd.ops.{name}({', '.join(c.a(i) for i in range(arity))})"


def _div(c: NvOp) -> str:
    if c.op.outputs[0].spec.dtype in INTEGER_DTYPES:
        return f"fd.ops.div({c.a(0)}, {c.a(1)})"
    return f"fd.ops.mul({c.a(0)}, fd.ops.reciprocal({c.a(1)}))"  # as Thunder's nvFuser executor does


def _slice(c: NvOp) -> str:
    """A slice; with a step along the innermost dim (``x[..., 1::2]``, which nvFuser's slice refuses)
    as unit-step parts: the elements from the first to the last one taken, padded to ``m * step``,
    viewed as ``[..., m, step]``, and the first of each step."""
    x, starts, ends = c.op.args[:3]
    steps = c.op.args[3] if len(c.op.args) > 3 else None
    items = steps.items if isinstance(steps, Seq) else ()
    if not any(not (isinstance(s, Const) and s.value in (1, None)) for s in items):
        return f"fd.ops.slice({', '.join(c.a(i) for i in range(len(c.op.args)))})"
    rank, out = len(items), c.op.outputs[0].spec.shape
    step, start, count = items[-1], starts.items[-1], out[-1]
    if (
        any(not (isinstance(s, Const) and s.value == 1) for s in items[:-1])
        or not isinstance(step, Const)
        or not isinstance(start, Const)
        or not isinstance(count, int)
    ):
        raise ValueError(
            "nvFuser backend: a slice with a step is fused along a static innermost dim only "
            f"({c.op.outputs[0].name})"
        )
    k, s = step.value, start.value
    last = Const(s + k * (count - 1) + 1)
    ones = Seq(tuple(Const(1) for _ in range(rank)))
    part = (
        f"fd.ops.slice({c.a(0)}, {c.a(1)}, "
        f"{nv_arg(Seq(ends.items[:-1] + (last,)), specialized=c.specialized)}, {nv_arg(ones)})"
    )
    lead = tuple(dim_arg(d) for d in out[:-1])
    shape = nv_arg(Seq(lead + (Const(count), Const(k))), specialized=c.specialized)
    viewed = f"fd.ops.reshape(fd.ops.pad({part}, [0, {k - 1}]), {shape})"
    zeros = nv_arg(Seq(tuple(Const(0) for _ in range(rank + 1))))
    firsts = nv_arg(Seq(lead + (Const(count), Const(1))), specialized=c.specialized)
    return (
        f"fd.ops.squeeze(fd.ops.slice({viewed}, {zeros}, {firsts}, "
        f"{nv_arg(Seq(tuple(Const(1) for _ in range(rank + 1))))}), [{rank}])"
    )


def _where(c: NvOp) -> str:
    out = NV_DTYPES[c.op.outputs[0].spec.dtype]
    return f"fd.ops.cast(fd.ops.where({c.a(0)}, {c.a(1)}, {c.a(2)}), DataType.{out})"


def _reduction(name: str) -> Callable[[NvOp], str]:
    return lambda c: f"fd.ops.{name}({c.a(0)}, {c.a(1, inline=True)})"


_UNARY = (
    "abs acos acosh asin asinh atan atanh bitwise_not ceil cos cosh erf erfc erfinv exp exp2 expm1 "
    "floor isfinite lgamma log log10 log1p log2 neg reciprocal round rsqrt sign signbit sin sinh "
    "sqrt tan tanh trunc"
).split()
_BINARY = (
    "add sub mul pow eq ne lt le gt ge maximum minimum fmod remainder atan2 "
    "bitwise_and bitwise_or bitwise_xor"
).split()

#: prim name -> nvFuser frontend text for its result. One row per prim; a prim missing here is not fused.
NV_PRIMS: dict[str, Callable[[NvOp], str]] = {
    **{name: _ops(name, 1) for name in _UNARY},
    **{name: _ops(name, 2) for name in _BINARY},
    "div": _div,
    "where": _where,
    "convert_element_type": lambda c: f"fd.ops.cast({c.a(0)}, {c.a(1)})",
    "shallow_copy": lambda c: c.a(0),
    "broadcast_in_dim": lambda c: f"fd.ops.broadcast_in_dim({c.a(0)}, {c.a(1)}, {c.a(2, inline=True)})",
    "reshape": lambda c: f"fd.ops.reshape({c.a(0)}, {c.a(1)})",
    "transpose": lambda c: f"fd.ops.permute({c.a(0)}, {c.a(1, inline=True)})",
    "squeeze": lambda c: f"fd.ops.squeeze({c.a(0)}, {c.a(1, inline=True)})",
    "slice": _slice,
    "cat": lambda c: f"fd.ops.cat({c.a(0)}, {c.a(1, inline=True)})",
    "sum": _reduction("sum"),
    "amax": _reduction("max"),
    "amin": _reduction("min"),
    "var_mean": lambda c: (
        f"fd.ops.var_mean({c.a(0)}, {c.a(1, inline=True)}, {c.kw('correction', inline=True)})"
    ),
    "full": lambda c: f"fd.ops.full({c.a(0)}, {c.a(1)}, {c.kw('dtype')})",
    "iota": lambda c: f"fd.ops.iota({c.a(0)}, {c.kw('start')}, {c.kw('step')}, {c.kw('dtype')})",
}


#: prims after which nvFuser may lay out every output in a permuted order (model.VIEW_PRIMS: those
#: whose output it may return as a view of another tensor's memory: permuted, expanded, sliced)
PERMUTING_PRIMS = frozenset({"transpose"})


def permuted_outputs(region: Region) -> tuple[str, ...]:
    """Every output of a region that permutes (nvFuser propagates a permuted allocation to what
    is computed from it), none otherwise."""
    return (
        tuple(o.name for o in region.outputs) if any(op.prim in PERMUTING_PRIMS for op in region.ops) else ()
    )


def strided_outputs(region: Region) -> tuple[str, ...]:
    """The region's outputs that nvFuser may not return contiguous: every output where the region
    permutes (nvFuser propagates a permuted allocation to what is computed from it), else those a
    view prim makes."""
    permuted = permuted_outputs(region)
    if permuted:
        return permuted
    made_by_views = {o.name for op in region.ops if op.prim in VIEW_PRIMS for o in op.outputs}
    return tuple(o.name for o in region.outputs if o.name in made_by_views)


@dataclass(frozen=True)
class TensorDefinition:
    name: str
    code: str


@dataclass(frozen=True)
class NvRegionView:
    runs_kernel = True
    name: str
    inputs: tuple[TensorDefinition, ...]
    sizes: tuple[Line, ...]  # dynamic sizes read off the input tensors (symbolic definitions)
    lines: tuple[Line, ...]
    outputs: tuple[str, ...]
    input_names: tuple[str, ...]
    dim_params: tuple[str, ...]  # dynamic sizes the definition is specialised for ("" when symbolic)
    known_sizes: tuple[tuple[int, ...], ...]  # sizes recorded at import (exact buckets of the program)
    frontend: str
    strided_outputs: tuple[str, ...] = ()
    permuted_outputs: tuple[str, ...] = ()
    #: the partial template of its definition ("" where it uses another region's: :meth:`sharing`)
    template: str = "nvfuser_region.py.jinja"

    @property
    def specialized(self) -> bool:
        return bool(self.dim_params)

    @property
    def define_params(self) -> str:
        return ", ".join(("fd: FusionDefinition", *(f"{d}: int" for d in self.dim_params)))

    @property
    def holder(self) -> str:
        """The module-level object that records the definition: one Fusion, or one per size met."""
        frontend = "" if self.frontend == "direct" else f", frontend={self.frontend!r}"
        if not self.specialized:
            return f"Fusion(FusionDefinition, define_{self.name}{frontend})"
        known = f", sizes={self.known_sizes!r}" if self.known_sizes else ""
        return f"SizedFusions(FusionDefinition, define_{self.name}{known}{frontend})"

    @property
    def definition_key(self) -> tuple:
        return (self.inputs, self.sizes, self.lines, self.outputs, self.dim_params, self.known_sizes)

    def sharing(self, name: str) -> NvRegionView:
        return replace(self, name=name, template="")

    @property
    def steps(self) -> tuple[Line, ...]:
        """One call: the region's ``Fusion`` (for a specialised region, the one recorded for these
        sizes, keyed by the size or a tuple of sizes) executes on the inputs."""
        inputs = ", ".join(self.input_names)
        fusion = self.name
        if self.specialized:
            sizes = ", ".join(self.dim_params)
            key = sizes if len(self.dim_params) == 1 else f"({sizes})"
            fusion = f"({self.name}.by_size.get({key}) or {self.name}.record({sizes}))"
        return (Line(f"{assign_text(self.outputs)} = {fusion}.execute([{inputs}])"),)


def define_tensor(value: Value, specialized: bool) -> str:
    """An input tensor; dynamic sizes are ``-1`` (symbolic) or the Python ints it is specialised for."""
    dtype = f"DataType.{NV_DTYPES[value.spec.dtype]}"
    stride_order = list(range(len(value.spec.shape) - 1, -1, -1))
    if specialized and any(isinstance(d, SymDim) for d in value.spec.shape):
        shape = "[" + ", ".join(render_dim(d) for d in value.spec.shape) + "]"
        return (
            f"fd.define_tensor(shape={shape}, contiguity=contiguity({shape}), "
            f"dtype={dtype}, is_cpu=False, stride_order={stride_order})"
        )
    dims = [-1 if isinstance(d, SymDim) else d for d in value.spec.shape]
    # inputs are checked to be contiguous: nvFuser's contiguity is None for size-1 (broadcast) dims
    contiguity = [None if d == 1 else True for d in dims]
    return (
        f"fd.define_tensor(shape={dims}, contiguity={contiguity}, "
        f"dtype={dtype}, is_cpu=False, stride_order={stride_order})"
    )


class NvFuserBackend(Backend):
    name = "nvfuser"
    prims = frozenset(NV_PRIMS)
    input_requirement = "{name}.is_cuda and {name}.is_contiguous()"
    input_requirement_text = "a contiguous CUDA tensor"
    supports_autograd = False

    @property
    def verify_device(self) -> str:
        return "cuda"

    def unavailable_reason(self) -> str | None:
        import importlib.util

        import torch

        if not torch.cuda.is_available():
            return "no CUDA device"
        if importlib.util.find_spec(self.frontend_module) is None:
            return f"nvFuser ({self.frontend_module}) is not installed"
        return None

    def __init__(self, dynamic: str = "specialize", frontend: str = "direct") -> None:
        if dynamic not in DYNAMIC_MODES:
            raise ValueError(f"unknown nvFuser dynamic mode {dynamic!r}")
        self.specialize = dynamic == "specialize"
        self.frontend = frontend
        self.frontend_module = FRONTENDS[frontend]
        #: the frontend's names, bound through the runtime (its ImportError says what to install)
        self.preamble = (f'FusionDefinition, DataType = frontend("{self.frontend_module}")',)
        self.imports = ("from thunder_aot.runtime.nvfuser import Fusion, SizedFusions, contiguity, frontend",)

    def region_view(
        self, region: Region, dims: tuple[DimRange, ...] = (), known_sizes: tuple[dict[str, int], ...] = ()
    ) -> NvRegionView:
        names = sorted(
            set(region_dims(region))
            | {d.name for v in region.inputs for d in v.spec.shape if isinstance(d, SymDim)}
        )
        if self.specialize and names:
            known = tuple(sorted({tuple(env[n] for n in names) for env in known_sizes}))
            return self._view(region, sizes=(), dim_params=tuple(names), known_sizes=known)
        sizes = []
        for dim in region_dims(region):
            where = next(
                (
                    (v.name, axis)
                    for v in region.inputs
                    for axis, d in enumerate(v.spec.shape)
                    if d == SymDim(dim)
                ),
                None,
            )
            if where is None:
                raise ValueError(f"region {region.name}: no input tensor carries the dynamic size {dim}")
            sizes.append(Line(f"{dim} = {where[0]}.size({where[1]})"))
        return self._view(region, sizes=tuple(sizes), dim_params=())

    def _view(
        self, region: Region, sizes: tuple[Line, ...], dim_params: tuple[str, ...], known_sizes: tuple = ()
    ) -> NvRegionView:
        specialized = bool(dim_params)
        lines = []
        for op, comment in zip(region.ops, source_comments(region.ops)):
            targets = ", ".join(o.name for o in op.outputs)
            lines.append(Line(f"{targets} = {NV_PRIMS[op.prim](NvOp(op, specialized))}", comment))
        return NvRegionView(
            name=region.name,
            inputs=tuple(TensorDefinition(v.name, define_tensor(v, specialized)) for v in region.inputs),
            sizes=sizes,
            lines=tuple(lines),
            outputs=tuple(o.name for o in region.outputs),
            input_names=tuple(v.name for v in region.inputs),
            dim_params=dim_params,
            known_sizes=known_sizes,
            frontend=self.frontend,
            strided_outputs=strided_outputs(region),
            permuted_outputs=permuted_outputs(region),
        )
