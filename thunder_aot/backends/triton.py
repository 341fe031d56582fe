"""Triton backend: a region of pointwise ops and reductions over the innermost dim becomes one
``@triton.jit`` kernel, one row per program (the whole row in registers: a persistent schedule).

Regions outside that class (other reductions, shape ops, rows wider than MAX_BLOCK, ops the table
lacks) are rendered by the torch backend instead, so correctness never depends on coverage.

Status: kernels are generated and checked numerically on CPU through Triton's interpreter
(``TRITON_INTERPRET=1``); the CUDA launch path (compile once, then ``CompiledKernel.run``) is
written but not yet proven on the GPU machine, and rows wider than MAX_BLOCK have no looped
schedule yet (issue 4).
"""

from __future__ import annotations

import enum
import os
from dataclasses import dataclass

from thunder_aot.backends.base import Backend, Line, PythonFunctionRegion, source_comments
from thunder_aot.backends.torch import TorchBackend
from thunder_aot.model import Const, DType, PrimOp, Ref, Region, TensorSpec, Value

#: widest row (elements) the one-row-per-program schedule keeps in registers
MAX_BLOCK = 16384

TL_DTYPES = {
    "bool": "tl.int1",
    "int8": "tl.int8",
    "int16": "tl.int16",
    "int32": "tl.int32",
    "int64": "tl.int64",
    "float16": "tl.float16",
    "bfloat16": "tl.bfloat16",
    "float32": "tl.float32",
    "float64": "tl.float64",
}


class Kind(enum.Enum):
    ROW = "row"  # varies along rows and along the innermost dim: a [BLOCK] vector per program
    ROW_SCALAR = "row scalar"  # one value per row (a reduction's result)
    COL = "col"  # the same [BLOCK] vector for every row (a weight of shape [N])
    CONST = "const"  # a Python number


class Unsupported(Exception):
    pass


@dataclass
class Expr:
    text: str
    kind: Kind


def _combine(*kinds: Kind) -> Kind:
    if Kind.ROW in kinds or (Kind.ROW_SCALAR in kinds and Kind.COL in kinds):
        return Kind.ROW
    if Kind.ROW_SCALAR in kinds:
        return Kind.ROW_SCALAR
    if Kind.COL in kinds:
        return Kind.COL
    return Kind.CONST


_UNARY = {
    "neg": "-({})",
    "exp": "tl.exp({})",
    "log": "tl.log({})",
    "sqrt": "tl.sqrt({})",
    "rsqrt": "tl.rsqrt({})",
    "reciprocal": "1.0 / ({})",
    "abs": "tl.abs({})",
    "erf": "tl.erf({})",
    "sin": "tl.sin({})",
    "cos": "tl.cos({})",
}
_BINARY = {"add": "+", "sub": "-", "mul": "*", "eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}
_REDUCE_IDENTITY = {"sum": ("tl.sum", "0.0"), "amax": ("tl.max", 'float("-inf")'), "amin": ("tl.min", 'float("inf")')}


class RowProgram:
    """Translates one region under the row model, or raises Unsupported."""

    def __init__(self, region: Region) -> None:
        self.region = region
        values = [*region.inputs, *(o for op in region.ops for o in op.outputs)]
        full = max((v.spec.shape for v in values), key=len)
        if not full or not isinstance(full[-1], int) or full[-1] > MAX_BLOCK:
            raise Unsupported("the innermost dim must be static and at most MAX_BLOCK")
        self.full = full
        self.n = full[-1]
        self.exprs: dict[str, Expr] = {}
        self.lines: list[Line] = []

    def kind_of(self, spec: TensorSpec) -> Kind:
        shape = spec.shape
        lead = self.full[:-1]
        if shape == self.full:
            return Kind.ROW
        if shape == (*lead, 1) or shape == lead:
            return Kind.ROW_SCALAR
        if shape[-1:] == (self.n,) and all(d == 1 for d in shape[:-1]):
            return Kind.COL
        raise Unsupported(f"a tensor of shape {shape} in rows of {self.full}")

    def arg(self, a) -> Expr:
        if isinstance(a, Ref):
            return self.exprs[a.name]
        if isinstance(a, Const) and isinstance(a.value, (int, float)) and not isinstance(a.value, bool):
            return Expr(repr(float(a.value)) if isinstance(a.value, float) else repr(a.value), Kind.CONST)
        raise Unsupported(f"argument {a!r}")

    def op(self, op: PrimOp) -> str:
        out = op.outputs[0]
        p = op.prim
        if p in _UNARY:
            x = self.arg(op.args[0])
            return self.set(out, _UNARY[p].format(x.text), x.kind)
        if p in _BINARY:
            a, b = self.arg(op.args[0]), self.arg(op.args[1])
            return self.set(out, f"{a.text} {_BINARY[p]} {b.text}", _combine(a.kind, b.kind))
        if p == "div":
            if out.spec.dtype not in ("float16", "bfloat16", "float32", "float64"):
                raise Unsupported("integer division")
            a, b = self.arg(op.args[0]), self.arg(op.args[1])
            return self.set(out, f"{a.text} / {b.text}", _combine(a.kind, b.kind))
        if p == "pow":
            a, b = self.arg(op.args[0]), op.args[1]
            if isinstance(b, Const) and b.value == 2.0:
                return self.set(out, f"{a.text} * {a.text}", a.kind)
            if isinstance(b, Const) and b.value == 0.5:
                return self.set(out, f"tl.sqrt({a.text})", a.kind)
            raise Unsupported("pow with an exponent other than 2 or 0.5")
        if p in ("maximum", "minimum"):
            a, b = self.arg(op.args[0]), self.arg(op.args[1])
            return self.set(out, f"tl.{p}({a.text}, {b.text})", _combine(a.kind, b.kind))
        if p == "where":
            c, a, b = (self.arg(x) for x in op.args)
            return self.set(out, f"tl.where({c.text}, {a.text}, {b.text})", _combine(c.kind, a.kind, b.kind))
        if p == "convert_element_type":
            a, dtype = self.arg(op.args[0]), op.args[1]
            assert isinstance(dtype, DType)
            return self.set(out, f"({a.text}).to({TL_DTYPES[dtype.name]})", a.kind)
        if p in ("shallow_copy", "broadcast_in_dim"):
            a = self.arg(op.args[0])
            kind = self.kind_of(out.spec)
            if a.kind == Kind.ROW and kind != Kind.ROW:
                raise Unsupported("broadcast that drops the row")
            self.exprs[out.name] = Expr(a.text, _combine(a.kind, kind) if kind == Kind.ROW else a.kind)
            return ""
        if p in _REDUCE_IDENTITY:
            a, dims = self.arg(op.args[0]), op.args[1]
            rank = len(self.full)
            if a.kind != Kind.ROW or [d.value for d in dims.items] != [rank - 1]:
                raise Unsupported("a reduction over other than the innermost dim")
            fn, identity = _REDUCE_IDENTITY[p]
            return self.set(out, f"{fn}(tl.where(mask, {a.text}, {identity}), axis=0)", Kind.ROW_SCALAR)
        if p == "var_mean":
            a, dims = self.arg(op.args[0]), op.args[1]
            correction = dict(op.kwargs)["correction"].value
            if a.kind != Kind.ROW or [d.value for d in dims.items] != [len(self.full) - 1]:
                raise Unsupported("var_mean over other than the innermost dim")
            var, mean = op.outputs
            self.set(mean, f"tl.sum(tl.where(mask, {a.text}, 0.0), axis=0) / {self.n}", Kind.ROW_SCALAR)
            centered = f"tl.where(mask, {a.text} - {mean.name}, 0.0)"
            return self.set(var, f"tl.sum({centered} * {centered}, axis=0) / {self.n - correction}", Kind.ROW_SCALAR)
        raise Unsupported(f"prims.{p}")

    def set(self, out: Value, text: str, kind: Kind) -> str:
        self.exprs[out.name] = Expr(out.name, kind)
        self.lines.append(Line(f"{out.name} = {text}"))
        return out.name


@dataclass(frozen=True)
class TritonRegionView(PythonFunctionRegion):
    template = "triton_region.py.jinja"
    uses_backend = True
    name: str
    params: tuple[str, ...]
    kernel_params: tuple[str, ...]
    loads: tuple[Line, ...]
    lines: tuple[Line, ...]
    stores: tuple[Line, ...]
    rows_expr: str
    allocations: tuple[Line, ...]
    launch_args: tuple[str, ...]
    n: int
    block: int
    num_warps: int
    returns: tuple[str, ...]

    @property
    def launch_tuple(self) -> str:
        return f"({', '.join(self.launch_args)})"


def _next_pow2(n: int) -> int:
    return 1 << (n - 1).bit_length()


def schedule(n: int) -> tuple[int, int]:
    """BLOCK (the row padded to a power of two) and num_warps: about 8 elements per thread, at
    least one warp, at most 16 (so a 2880-wide bf16 row gets BLOCK 4096 and 16 warps)."""
    block = _next_pow2(n)
    return block, max(1, min(16, block // 256))


class TritonBackend(Backend):
    name = "triton"
    prims = TorchBackend.prims  # regions form as for the other backends; the kernel decides per region
    stdlib_imports = ("os", "threading")
    imports = ("import triton", "import triton.language as tl")
    prelude_template = "triton_prelude.py.jinja"
    input_requirement = "{name}.is_contiguous() and ({name}.is_cuda or _INTERPRET)"
    input_requirement_text = "a contiguous CUDA tensor"
    supports_autograd = False

    def __init__(self) -> None:
        self.torch = TorchBackend()

    @property
    def verify_device(self) -> str:  # type: ignore[override]
        return "cpu" if os.environ.get("TRITON_INTERPRET") == "1" else "cuda"

    def unavailable_reason(self) -> str | None:
        import torch

        if os.environ.get("TRITON_INTERPRET") == "1":
            return None
        if not torch.cuda.is_available():
            return "no CUDA device (set TRITON_INTERPRET=1 to check kernels on CPU with Triton's interpreter)"
        return None

    def region_view(self, region: Region):
        try:
            return self._kernel_view(region)
        except Unsupported:
            return self.torch.region_view(region)

    def _kernel_view(self, region: Region) -> TritonRegionView:
        prog = RowProgram(region)
        loads, kernel_params, launch_args = [], [], []
        row_input = None
        for v in region.inputs:
            kind = prog.kind_of(v.spec)
            ptr = f"{v.name}_ptr"
            offset = {Kind.ROW: "row * N + cols", Kind.COL: "cols", Kind.ROW_SCALAR: "row"}[kind]
            masked = ", mask=mask, other=0.0" if kind != Kind.ROW_SCALAR else ""
            loads.append(Line(f"{v.name} = tl.load({ptr} + {offset}{masked})"))
            prog.exprs[v.name] = Expr(v.name, kind)
            kernel_params.append(ptr)
            launch_args.append(v.name)
            if kind == Kind.ROW and row_input is None:
                row_input = v
        if row_input is None:
            raise Unsupported("no input spans the rows")
        pending = ""  # a source comment waits for the first line an op emits (aliases emit none)
        for op, comment in zip(region.ops, source_comments(region.ops)):
            pending = comment or pending
            start = len(prog.lines)
            prog.op(op)
            if pending and len(prog.lines) > start:
                prog.lines[start] = Line(prog.lines[start].code, pending)
                pending = ""
        stores, allocations = [], []
        lead = f"{row_input.name}.shape[:-1]"
        for o in region.outputs:
            kind = prog.kind_of(o.spec)
            expr = prog.exprs[o.name]
            if kind == Kind.ROW and expr.kind != Kind.ROW:
                raise Unsupported("a row output computed as a per-row scalar")
            if kind == Kind.COL:
                raise Unsupported("an output that does not depend on the row")
            shape = f"(*{lead}, {prog.n})" if kind == Kind.ROW else (
                f"(*{lead}, 1)" if len(o.spec.shape) == len(prog.full) else lead
            )
            ptr = f"{o.name}_out_ptr"
            if kind == Kind.ROW:  # the row input's shape: empty_like is ~3x cheaper than torch.empty
                same = o.spec.dtype == row_input.spec.dtype
                alloc = f"torch.empty_like({row_input.name}{'' if same else f', dtype=torch.{o.spec.dtype}'})"
            else:
                alloc = f"torch.empty({shape}, dtype=torch.{o.spec.dtype}, device={row_input.name}.device)"
            allocations.append(Line(f"{o.name} = {alloc}"))
            offset, masked = ("row * N + cols", ", mask=mask") if kind == Kind.ROW else ("row", "")
            stores.append(Line(f"tl.store({ptr} + {offset}, {expr.text}{masked})"))
            kernel_params.append(ptr)
            launch_args.append(o.name)
        block, warps = schedule(prog.n)
        return TritonRegionView(
            name=region.name,
            params=tuple(v.name for v in region.inputs),
            kernel_params=tuple(kernel_params),
            loads=tuple(loads),
            lines=tuple(prog.lines),
            stores=tuple(stores),
            rows_expr=f"{row_input.name}.numel() // {prog.n}",
            allocations=tuple(allocations),
            launch_args=tuple(launch_args),
            n=prog.n,
            block=block,
            num_warps=warps,
            returns=tuple(o.name for o in region.outputs),
        )
