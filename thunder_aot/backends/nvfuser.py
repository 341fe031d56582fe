"""nvFuser backend: each region becomes the nvFuser FusionDefinition Thunder would build, written
out as readable Python for the ``nvfuser`` frontend of nvFuser 0.2.35 (what Thunder 0.2.6 uses),
and is called with ``fd.execute`` and nothing else on the hot path.

Everything frontend-specific lives in this file (the ``NV_PRIMS`` table, the dtype names, the
tensor definitions), so a backend for the newer ``nvfuser_direct`` frontend would be one more
file beside it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from thunder_aot.backends.base import Backend, Line, region_dims, render_const, source_comments
from thunder_aot.model import Arg, Const, DeviceArg, DType, PrimOp, Ref, Region, Seq, SizeArg, SymDim, Value

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


def _scalar(value: object) -> str:
    if isinstance(value, bool):
        return f"fd.define_scalar({value!r}, dtype=DataType.Bool)"
    if isinstance(value, int):
        return f"fd.define_scalar({value!r}, dtype=DataType.Int)"
    if isinstance(value, float):
        return f"fd.define_scalar({render_const(value)}, dtype=DataType.Double)"
    raise TypeError(f"no nvFuser scalar for {value!r}")


def nv_arg(arg: Arg, *, inline: bool = False) -> str:
    """nvFuser frontend text for an argument. ``inline`` keeps plain Python ints (dims, sizes)."""
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
            return str(dim) if inline else _scalar(dim)
        return dim.name if dim.coeff == 1 else f"fd.ops.mul({dim.name}, {_scalar(dim.coeff)})"
    if isinstance(arg, Seq):
        symbolic = any(isinstance(i, SizeArg) for i in arg.items)
        # a shape with a dynamic size is a vector of nvFuser scalars; a static one stays Python ints
        return "[" + ", ".join(nv_arg(i, inline=not symbolic) for i in arg.items) + "]"
    if isinstance(arg, DeviceArg):
        return "None"
    raise TypeError(f"cannot render {arg!r} for nvFuser")


@dataclass
class NvOp:
    op: PrimOp

    def a(self, i: int, *, inline: bool = False) -> str:
        return nv_arg(self.op.args[i], inline=inline)

    def kw(self, name: str, *, inline: bool = False) -> str:
        return nv_arg(dict(self.op.kwargs)[name], inline=inline)

    def is_int(self, i: int) -> bool:
        return self.op.outputs[0].spec.dtype in INTEGER_DTYPES


def _ops(name: str, arity: int) -> Callable[[NvOp], str]:
    return lambda c: f"fd.ops.{name}({', '.join(c.a(i) for i in range(arity))})"


def _div(c: NvOp) -> str:
    if c.op.outputs[0].spec.dtype in INTEGER_DTYPES:
        return f"fd.ops.div({c.a(0)}, {c.a(1)})"
    return f"fd.ops.mul({c.a(0)}, fd.ops.reciprocal({c.a(1)}))"  # as Thunder's nvFuser executor does


def _where(c: NvOp) -> str:
    out = NV_DTYPES[c.op.outputs[0].spec.dtype]
    return f"fd.ops.cast(fd.ops.where({c.a(0)}, {c.a(1)}, {c.a(2)}), DataType.{out})"


def _reduction(name: str) -> Callable[[NvOp], str]:
    return lambda c: f"fd.ops.{name}({c.a(0)}, {c.a(1, inline=True)})"


_UNARY = (
    "abs acos acosh asin asinh atan atanh bitwise_not ceil cos cosh erf erfc erfinv exp exp2 expm1 floor "
    "isfinite lgamma log log10 log1p log2 neg reciprocal round rsqrt sign signbit sin sinh sqrt tan tanh trunc"
).split()
_BINARY = (
    "add sub mul pow eq ne lt le gt ge maximum minimum fmod remainder atan2 bitwise_and bitwise_or bitwise_xor"
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
    "slice": lambda c: f"fd.ops.slice({c.a(0)}, {c.a(1)}, {c.a(2)}, {c.a(3)})",
    "cat": lambda c: f"fd.ops.cat({c.a(0)}, {c.a(1, inline=True)})",
    "sum": _reduction("sum"),
    "amax": _reduction("max"),
    "amin": _reduction("min"),
    "var_mean": lambda c: f"fd.ops.var_mean({c.a(0)}, {c.a(1, inline=True)}, {c.kw('correction', inline=True)})",
    "full": lambda c: f"fd.ops.full({c.a(0)}, {c.a(1)}, {c.kw('dtype')})",
    "iota": lambda c: f"fd.ops.iota({c.a(0)}, {c.kw('start')}, {c.kw('step')}, {c.kw('dtype')})",
}


@dataclass(frozen=True)
class TensorDefinition:
    name: str
    code: str


@dataclass(frozen=True)
class NvRegionView:
    name: str
    inputs: tuple[TensorDefinition, ...]
    sizes: tuple[Line, ...]  # dynamic sizes read off the input tensors
    lines: tuple[Line, ...]
    outputs: tuple[str, ...]
    input_names: tuple[str, ...]

    @property
    def call_args(self) -> tuple[str, ...]:
        return self.input_names

    @property
    def call_expr(self) -> str:
        return f"{self.name}.execute([{', '.join(self.input_names)}])"


def define_tensor(value: Value) -> str:
    shape = [-1 if isinstance(d, SymDim) else d for d in value.spec.shape]
    # inputs are checked to be contiguous: nvFuser's contiguity is None for size-1 (broadcast) dims
    contiguity = [None if d == 1 else True for d in shape]
    stride_order = list(range(len(shape) - 1, -1, -1))
    return (
        f"fd.define_tensor(shape={shape}, contiguity={contiguity}, "
        f"dtype=DataType.{NV_DTYPES[value.spec.dtype]}, is_cpu=False, stride_order={stride_order})"
    )


class NvFuserBackend(Backend):
    name = "nvfuser"
    prims = frozenset(NV_PRIMS)
    imports = ("from nvfuser import DataType, FusionDefinition",)
    region_template = "nvfuser_region.py.jinja"
    prelude_template = "nvfuser_prelude.py.jinja"
    verify_device = "cuda"
    input_requirement = "{name}.is_cuda and {name}.is_contiguous()"
    input_requirement_text = "a contiguous CUDA tensor"

    def unavailable_reason(self) -> str | None:
        import importlib.util

        import torch

        if not torch.cuda.is_available():
            return "no CUDA device"
        if importlib.util.find_spec("nvfuser") is None:
            return "nvFuser is not installed"
        return None

    def region_view(self, region: Region) -> NvRegionView:
        sizes = []
        for dim in region_dims(region):
            where = next(
                ((v.name, axis) for v in region.inputs for axis, d in enumerate(v.spec.shape) if d == SymDim(dim)), None
            )
            if where is None:
                raise ValueError(f"region {region.name}: no input tensor carries the dynamic size {dim}")
            sizes.append(Line(f"{dim} = {where[0]}.size({where[1]})"))
        lines = []
        for op, comment in zip(region.ops, source_comments(region.ops)):
            targets = ", ".join(o.name for o in op.outputs)
            lines.append(Line(f"{targets} = {NV_PRIMS[op.prim](NvOp(op))}", comment))
        return NvRegionView(
            name=region.name,
            inputs=tuple(TensorDefinition(v.name, define_tensor(v)) for v in region.inputs),
            sizes=tuple(sizes),
            lines=tuple(lines),
            outputs=tuple(o.name for o in region.outputs),
            input_names=tuple(v.name for v in region.inputs),
        )
