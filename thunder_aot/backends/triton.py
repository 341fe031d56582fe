"""Triton backend: a region of pointwise ops and reductions over the innermost dim becomes one
``@triton.jit`` kernel over rows of the innermost dim (narrow rows several to a program).

Regions outside that class (other reductions, shape ops, ops the table lacks) are rendered by the
torch backend instead, so correctness never depends on coverage. Rows up to MAX_BLOCK lanes stay in
registers (persistent schedule); wider rows are walked in chunks (looped schedule): ``schedule()``.

Checked on CPU through Triton's interpreter (``TRITON_INTERPRET=1``) and on the GPU machine
(tests/test_gpu.py: numerics with poisoned outputs, CUDA graphs, compute-sanitizer memcheck).
"""

from __future__ import annotations

import enum
import os
from dataclasses import dataclass, replace

from thunder_aot.backends.base import Backend, Line, render_dim, source_comments, tuple_text
from thunder_aot.backends.torch import TorchBackend
from thunder_aot.model import Const, DimRange, DType, PrimOp, Ref, Region, SymDim, TensorSpec, Value

#: widest row (lanes, a power of two) the persistent schedule keeps in registers
MAX_BLOCK = 8192
#: chunk (lanes) of the looped schedule for wider rows
LOOP_BLOCK = 8192
#: lanes one program of the persistent schedule works on: rows narrower than this are taken several
#: to a program (rows per program = TILE_LANES // BLOCK, at most the bucket's rows); the best or
#: tied best setting at every module of the sweep (bench/results/triton_tiles.md)
TILE_LANES = 1024

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
    PART = "part"  # a slice narrower than the row, with ops on it: inline text, placed by a cat


class Unsupported(Exception):
    pass


@dataclass
class Expr:
    text: str
    kind: Kind


def _combine(*kinds: Kind) -> Kind:
    if Kind.PART in kinds:  # lanes of a part line up only with constants and per-row scalars
        if any(k not in (Kind.PART, Kind.CONST, Kind.ROW_SCALAR) for k in kinds):
            raise Unsupported("a slice narrower than the row combined with a whole row")
        return Kind.PART
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
    # tanh(x) = 2 sigmoid(2x) - 1 (Triton's core language has no tanh; absolute error ~1e-7 in fp32)
    "tanh": "2.0 * tl.sigmoid(2.0 * ({})) - 1.0",
}
_BINARY = {"add": "+", "sub": "-", "mul": "*", "eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}
_REDUCE_IDENTITY = {"sum": ("tl.sum", "0.0"), "amax": ("tl.max", 'float("-inf")'), "amin": ("tl.min", 'float("inf")')}


#: how a chunk's partial values join a reduction's [BLOCK] accumulator (looped schedule)
_COMBINE = {"tl.sum": "{} + {}", "tl.max": "tl.maximum({}, {})", "tl.min": "tl.minimum({}, {})"}


@dataclass(frozen=True)
class Reduction:
    """``out = fn(where(mask, operand, identity)) + suffix`` over the row, in parts for the looped schedule."""

    out: str
    fn: str
    identity: str
    operand: str
    dtype: str
    combine: str
    suffix: str = ""


class RowProgram:
    """Translates one region under the row model, or raises Unsupported."""

    def __init__(self, region: Region, dims: tuple[DimRange, ...] = ()) -> None:
        self.region = region
        #: inputs read only through slices of their innermost dim (``gate_up.chunk(2, -1)``): no
        #: vector of their own, each slice loads its part of the row
        self.sliced = {
            v.name: v.spec
            for v in region.inputs
            if (uses := [op for op in region.ops if any(isinstance(a, Ref) and a.name == v.name for a in op.args)])
            and all(op.prim == "slice" for op in uses)
        }
        values = [*(v for v in region.inputs if v.name not in self.sliced), *(o for op in region.ops for o in op.outputs)]
        # the row: the widest shape of the highest rank (a dynamic width counts as the widest)
        full = max((v.spec.shape for v in values), key=lambda s: (len(s), s[-1] if s and isinstance(s[-1], int) else float("inf")))
        if not full:
            raise Unsupported("a region of scalars")
        self.full = full
        self.ranges = {d.name: d for d in dims}
        last = full[-1]
        if isinstance(last, SymDim):  # a dynamic row width: N is a run-time argument of the kernel
            if last.name not in self.ranges:
                raise Unsupported(f"no range for the innermost dim {last.name}")
            self.n: int | None = None
            self.n_max = last.coeff * self.ranges[last.name].hi
        else:
            self.n = last
            self.n_max = last
        #: dynamic sizes the kernel needs at run time (besides N), by name
        self.size_params: list[str] = []
        #: narrow slices by placeholder: (input, its row width, start, width); parts' shapes by text
        self.parts: dict[str, tuple[str, int, int, int]] = {}
        self.part_shapes: dict[str, tuple] = {}
        self.exprs: dict[str, Expr] = {}
        self.lines: list[Line] = []
        self.line_info: list[tuple[str, Reduction | None]] = []  # per line: what it defines, the reduction it computes
        #: BLOCK, num_warps, rows per program. One row per program writes each value as a [BLOCK]
        #: vector; more, as a [rows, BLOCK] tile (``row`` a [rows, 1] column of row indices, ``cols`` [1, BLOCK])
        self.plan = schedule(self.n_max, self.max_rows)

    @property
    def max_rows(self) -> int | None:
        """The most rows a call of this bucket has (its dynamic dims at their upper edges); None
        where a lead dim has no range."""
        total = 1
        for d in self.full[:-1]:
            if isinstance(d, SymDim):
                if d.name not in self.ranges:
                    return None
                d = d.coeff * self.ranges[d.name].hi
            total *= d
        return total

    def reduce(self, fn: str, operand: str) -> str:
        """A reduction over each row's lanes: a per-row scalar ([rows, 1] in a tile)."""
        return f"{fn}({operand}, axis=0)" if self.plan.rows == 1 else f"{fn}({operand}, axis=1, keep_dims=True)"

    @property
    def row_mask(self) -> str:
        """The mask argument of a per-row load or store ("" for one row per program: always in range)."""
        return "" if self.plan.rows == 1 else ", mask=in_rows"

    @property
    def col_mask(self) -> str:
        """The mask of a load the same for every row (a weight of shape [N])."""
        return "mask" if self.plan.rows == 1 else "lanes"

    def head(self) -> list[Line]:
        """The program's rows and lanes, and the mask of the valid ones."""
        if self.plan.rows == 1:
            return [Line("row = tl.program_id(0).to(tl.int64)")]
        r = self.plan.rows
        return [
            Line(f"row = tl.program_id(0).to(tl.int64) * {r} + tl.arange(0, {r})[:, None]"),
            Line("in_rows = row < _rows"),
        ]

    def kind_of(self, spec: TensorSpec) -> Kind:
        shape = spec.shape
        lead = self.full[:-1]
        if shape == self.full:
            return Kind.ROW
        if shape == (*lead, 1) or shape == lead:
            return Kind.ROW_SCALAR
        if shape[-1:] == self.full[-1:] and all(d == 1 for d in shape[:-1]):
            return Kind.COL
        if self.broadcast_row(shape) is not None:
            return Kind.ROW
        raise Unsupported(f"a tensor of shape {shape} in rows of {self.full}")

    def n_text(self) -> str:
        return "N" if self.n is None else str(self.n)

    def size_text(self, d) -> str:
        """A lead dim's size in kernel code: a literal, or a run-time argument (coeff * name)."""
        if isinstance(d, int):
            return str(d)
        if d.name not in self.size_params:
            self.size_params.append(d.name)
        return d.name if d.coeff == 1 else f"({d.coeff} * {d.name})"

    def broadcast_row(self, shape: tuple) -> str | None:
        """For an input whose rows repeat along some lead dims (size 1 there, e.g. an attention mask
        [1, 1, S, S] in rows of [1, H, S, S]): the expression of its row for the program's ``row``.
        None when the shape is not such a broadcast."""
        lead, own = self.full[:-1], shape[:-1]
        if shape[-1:] != self.full[-1:] or len(own) != len(lead) or own == lead:
            return None
        if any(o != d and o != 1 for o, d in zip(own, lead)):
            return None
        terms, inner, stride = [], [], []
        for o, d in reversed(list(zip(own, lead))):
            if o == d and d != 1:
                index = "row" if not inner else f"(row // ({' * '.join(inner)}))"
                index = f"({index} % {self.size_text(d)})"
                terms.append(index if not stride else f"{index} * ({' * '.join(stride)})")
                stride.append(self.size_text(o))
            if d != 1:
                inner.append(self.size_text(d))
        return " + ".join(reversed(terms)) if terms else "0"

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
        if p == "slice":
            return self.slice(op)
        if p == "where":
            c, a, b = (self.arg(x) for x in op.args)
            return self.set(out, f"tl.where({c.text}, {a.text}, {b.text})", _combine(c.kind, a.kind, b.kind))
        if p == "convert_element_type":
            a, dtype = self.arg(op.args[0]), op.args[1]
            assert isinstance(dtype, DType)
            return self.set(out, f"({a.text}).to({TL_DTYPES[dtype.name]})", a.kind)
        if p == "cat":
            return self.cat(op)
        if p in ("shallow_copy", "broadcast_in_dim"):
            a = self.arg(op.args[0])
            if a.kind == Kind.PART:
                if p == "broadcast_in_dim" and out.spec.shape != self.part_shapes[a.text]:
                    raise Unsupported("a broadcast of a slice")
                self.exprs[out.name] = a
                self.part_shapes[a.text] = out.spec.shape
                return ""
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
            reduction = Reduction(out.name, fn, identity, a.text, TL_DTYPES[out.spec.dtype], _COMBINE[fn])
            return self.set(out, self.reduce(fn, f"tl.where(mask, {a.text}, {identity})"), Kind.ROW_SCALAR, reduction)
        if p == "var_mean":
            a, dims = self.arg(op.args[0]), op.args[1]
            correction = dict(op.kwargs)["correction"].value
            if a.kind != Kind.ROW or [d.value for d in dims.items] != [len(self.full) - 1]:
                raise Unsupported("var_mean over other than the innermost dim")
            var, mean = op.outputs
            dtype = TL_DTYPES[mean.spec.dtype]
            n, m = self.n_text(), (self.n - correction if self.n is not None else f"(N - {correction})")
            mean_sum = Reduction(mean.name, "tl.sum", "0.0", a.text, dtype, _COMBINE["tl.sum"], f" / {n}")
            self.set(mean, self.reduce("tl.sum", f"tl.where(mask, {a.text}, 0.0)") + f" / {n}", Kind.ROW_SCALAR, mean_sum)
            centered = f"tl.where(mask, {a.text} - {mean.name}, 0.0)"
            squares = f"({a.text} - {mean.name}) * ({a.text} - {mean.name})"
            var_sum = Reduction(var.name, "tl.sum", "0.0", squares, dtype, _COMBINE["tl.sum"], f" / {m}")
            return self.set(var, self.reduce("tl.sum", f"{centered} * {centered}") + f" / {m}", Kind.ROW_SCALAR, var_sum)
        raise Unsupported(f"prims.{p}")

    def slice(self, op: PrimOp) -> str:
        """A contiguous part of an input's innermost dim. As wide as a row: a load at an offset. Narrower
        (``x[..., :32]`` of a 64-wide row): a part, placed in the row by the ``cat`` that uses it."""
        source, starts, ends, strides = op.args
        inputs = {v.name: v.spec for v in self.region.inputs}
        spec = inputs.get(source.name) if isinstance(source, Ref) else None
        out = op.outputs[0]
        if spec is None or not isinstance(spec.shape[-1], int) or self.n is None:
            raise Unsupported("a slice of other than an input's static innermost dim")
        if spec.shape[:-1] != self.full[:-1] or any(not (isinstance(x, Const) and x.value == 1) for x in strides.items):
            raise Unsupported("a strided slice, or one across rows")
        if any(not (isinstance(x, Const) and x.value == 0) for x in starts.items[:-1]):
            raise Unsupported("a slice that does not keep whole rows")
        start, end = starts.items[-1], ends.items[-1]
        if not (isinstance(start, Const) and isinstance(end, Const)):
            raise Unsupported("a slice with dynamic bounds")
        width, row_width = end.value - start.value, spec.shape[-1]
        if width == self.n and source.name in self.sliced:
            load = f"tl.load({source.name}_ptr + row * {row_width} + {start.value} + cols, mask=mask, other=0.0)"
            return self.set(out, load, Kind.ROW)
        if not 0 < width < self.n:
            raise Unsupported("a slice wider than the row")
        placeholder = f"__part{len(self.parts)}__"
        self.parts[placeholder] = (source.name, row_width, start.value, width)
        self.part_shapes[placeholder] = out.spec.shape
        self.exprs[out.name] = Expr(placeholder, Kind.PART)
        return ""

    def cat(self, op: PrimOp) -> str:
        """Parts side by side along the innermost dim, filling the row: each part's loads are
        shifted to the lanes it lands in (masked outside them), then one ``tl.where`` picks by lane."""
        pieces, dim = op.args
        out = op.outputs[0]
        if not (isinstance(dim, Const) and dim.value in (-1, len(self.full) - 1)) or self.kind_of(out.spec) != Kind.ROW:
            raise Unsupported("a cat along other than the innermost dim")
        exprs = [self.arg(p) for p in pieces.items]
        if any(e.kind != Kind.PART for e in exprs):
            raise Unsupported("a cat of other than slices")
        placed, lane = [], 0
        for k, e in enumerate(exprs):
            text = e.text
            used = [p for p in self.parts if p in text]
            widths = {self.parts[p][3] for p in used}
            if len(widths) != 1:
                raise Unsupported("a cat piece mixing slices of different widths")
            (width,) = widths
            for p in used:
                source, row_width, start, _ = self.parts[p]
                name = f"{out.name}_{k}_{p.strip('_')}"
                lanes = f"mask{f' & (cols >= {lane})' if lane else ''} & (cols < {lane + width})"
                shift = start - lane
                offset = f"row * {row_width} {'+' if shift >= 0 else '-'} {abs(shift)} + cols"
                load = f"tl.load({source}_ptr + {offset}, mask={lanes}, other=0.0)"
                self.set(Value(name, out.spec), load, Kind.ROW)
                text = text.replace(p, name)
            placed.append((lane + width, text))
            lane += width
        if lane != self.n:
            raise Unsupported("a cat that does not fill the row")
        expression = placed[-1][1]
        for end, text in reversed(placed[:-1]):
            expression = f"tl.where(cols < {end}, {text}, {expression})"
        return self.set(out, expression, Kind.ROW)

    def set(self, out: Value, text: str, kind: Kind, reduction: "Reduction | None" = None) -> str:
        if kind == Kind.PART:  # no line: the cat that places the part writes it out, shifted
            self.exprs[out.name] = Expr(f"({text})", kind)
            self.part_shapes[f"({text})"] = out.spec.shape
            return ""
        self.exprs[out.name] = Expr(out.name, kind)
        self.lines.append(Line(f"{out.name} = {text}"))
        self.line_info.append((out.name, reduction))
        return out.name

    def persistent_body(self, scalar_loads: list[Line], loads: list[Line], stores: list[Line]) -> list[Line]:
        """The whole row in one [BLOCK] vector per value (a [rows, BLOCK] tile for several rows per
        program): loads, ops, stores."""
        if self.plan.rows == 1:
            lanes = [Line("cols = tl.arange(0, BLOCK)"), Line("mask = cols < N")]
        else:
            lanes = [Line("cols = tl.arange(0, BLOCK)[None, :]"), Line("lanes = cols < N"), Line("mask = in_rows & lanes")]
        return [*self.head(), *lanes, *scalar_loads, *loads, *self.lines, *stores]

    def looped_body(self, scalar_loads: list[Line], loads: list[Line], stores: list[Line]) -> list[Line]:
        """The row in chunks of BLOCK: one loop per reduction, accumulating into a [BLOCK] vector
        and reducing it after the loop, then one loop that computes and stores the outputs. Each
        loop recomputes the row values it needs from the loads (Triton drops what a loop does not
        use), so no row value is kept across loops."""
        assert self.plan.rows == 1, "the looped schedule takes one row per program"
        body: list[Line] = [*self.head(), *scalar_loads]
        vector: list[Line] = []  # the row ops so far

        def loop(last: list[Line]) -> list[Line]:
            head = [Line("for start in range(0, N, BLOCK):"), Line("cols = start + tl.arange(0, BLOCK)", indent=1),
                    Line("mask = cols < N", indent=1)]
            return head + [Line(x.code, x.comment, 1) for x in [*loads, *vector, *last]]

        for line, (name, reduction) in zip(self.lines, self.line_info):
            if reduction is not None:
                acc = f"{reduction.out}_acc"
                body.append(Line(f"{acc} = tl.full([BLOCK], {reduction.identity}, {reduction.dtype})", line.comment))
                body += loop([Line(f"{acc} = {reduction.combine.format(acc, f'tl.where(mask, {reduction.operand}, {reduction.identity})')}")])
                body.append(Line(f"{reduction.out} = {reduction.fn}({acc}, axis=0){reduction.suffix}"))
            elif self.exprs[name].kind in (Kind.ROW, Kind.COL):
                vector.append(line)
            else:  # per-row scalars and constants: once, between the loops
                body.append(line)
        return body + loop(stores)


@dataclass(frozen=True)
class TritonRegionView:
    template = "triton_region.py.jinja"
    uses_backend = True
    name: str
    decorator: str
    kernel: str  # the kernel's base name: <kernel>_kernel, <kernel>_compiled
    emits_kernel: bool  # False where an earlier region of the module has the same kernel
    params: tuple[str, ...]
    kernel_params: tuple[str, ...]
    n_param: str  # "N: tl.constexpr", or "N" for a row width known only at run time
    body: tuple[Line, ...]  # the kernel after ``row = ...``
    schedule_note: str
    rows_expr: str
    row_count: tuple[Line, ...]  # `_rows = ...` where a program takes several rows, else empty
    allocations: tuple[Line, ...]
    launch_args: tuple[str, ...]
    n: str
    block: int
    num_warps: int

    @property
    def launch_tuple(self) -> str:
        return f"({', '.join(self.launch_args)})"

    @property
    def kernel_key(self) -> tuple:
        """What makes the compiled kernel: its text and its compile-time arguments. Regions with the
        same key (one per bucket, often) share one kernel and one compile."""
        return (self.decorator, self.kernel_params, self.n_param, self.schedule_note, self.body, self.n, self.block, self.num_warps)

    def sharing(self, kernel: str) -> "TritonRegionView":
        return replace(self, kernel=kernel, emits_kernel=False)

    @property
    def tensor_names(self) -> tuple[str, ...]:
        """The kernel's tensor arguments (inputs, then outputs); the rest of launch_args are sizes."""
        return tuple(a for a in self.launch_args if a not in self.size_names)

    @property
    def size_names(self) -> tuple[str, ...]:
        return tuple(p for p in self.kernel_params if not p.endswith("_ptr"))

    @property
    def inline_lines(self) -> tuple[Line, ...]:
        """Run-time sizes, output allocations, the kernel's arguments as the launcher takes them
        (pointers as ints, then sizes), then the launch of one program per row (or tile of rows):
        where the kernel is compiled for ``_device`` (forward's direct-launch device, -1 for none)
        and the inputs' alignment, its C launch function alone, on the current stream; otherwise
        ``_launch`` (compiles, or runs it as the interpreter or torch.compile needs). An input off a
        16-byte boundary gets its own compiled kernel (outputs come from torch's allocator, which
        aligns far more)."""
        tensors = self.tensor_names
        raw = [f"{t}.data_ptr()" for t in tensors] + list(self.size_names)
        inputs = [i for i, t in enumerate(tensors) if t in self.params]
        misaligned = "(" + " | ".join(f"_raw[{i}]" for i in inputs) + ") & 15 != 0"
        general = (
            f"_launch({self.kernel}_kernel, {self.kernel}_compiled, {self.rows_expr}, {self.launch_tuple}, _raw, "
            f"_misaligned, {self.n}, {self.block}, {self.num_warps})"
        )
        direct = f"_kernel[1]({self.rows_expr}, 1, 1, _raw_stream(_device), *_kernel[2], *_raw, {self.n}, {self.block})"
        return (
            *self.row_count,
            *self.allocations,
            Line(f"_raw = {tuple_text(raw)}"),
            Line(f"_misaligned = {misaligned}"),
            Line(f"_kernel = {self.kernel}_compiled.get(_device + _device + _misaligned)"),
            Line("if _kernel is not None:", "compiled for _device and this alignment: the C launch alone"),
            Line(direct, indent=1),
            Line("else:"),
            Line(general, indent=1, comment="the first call (compiles), another device, the interpreter, tracing"),
        )


def _contiguous_strides(sizes: list[str]) -> list[str]:
    """Python text of a contiguous tensor's strides from its sizes' text (products of ints folded)."""
    strides, step = [], "1"
    for size in reversed(sizes):
        strides.append(step)
        if step.isdigit() and size.isdigit():
            step = str(int(step) * int(size))
        else:
            step = size if step == "1" else step if size == "1" else f"{step} * {size}"
    return strides[::-1]


def _next_pow2(n: int) -> int:
    return 1 << (n - 1).bit_length()


@dataclass(frozen=True)
class Schedule:
    block: int  # lanes per row (a power of two)
    num_warps: int
    looped: bool  # the row in chunks of BLOCK, or all of it at once
    rows: int = 1  # rows per program (a power of two)

    def note(self, n: int | str) -> str:
        if self.looped:
            return f"looped: one row of {n} per program, in chunks of BLOCK={self.block}, {self.num_warps} warps"
        rows = "one row" if self.rows == 1 else f"{self.rows} rows"
        warps = "1 warp" if self.num_warps == 1 else f"{self.num_warps} warps"
        return f"persistent: {rows} of {n} per program in BLOCK={self.block} lanes, {warps}"


def schedule(n: int, max_rows: int | None = None) -> Schedule:
    """For rows of (at most) ``n`` lanes, in a bucket of at most ``max_rows`` rows (None: unknown).

    A row that fits — padded to a power of two, at most MAX_BLOCK lanes — stays in registers
    (persistent: one read, one write). Rows narrower than TILE_LANES are taken several to a program,
    TILE_LANES // BLOCK of them (never more than the bucket's rows, rounded up to a power of two);
    wider rows take one program each. A row wider than MAX_BLOCK is walked in chunks of LOOP_BLOCK
    (looped: each reduction and the output take one pass over the row), one row per program.

    From sweeps on the H200. Rows per program (bench/results/triton_tiles.md): 1024-lane tiles run
    262144 rotary rows of 64 in 24 µs against 163 µs at one row per program, and 65536 rows of 256
    in 30 µs against 45 µs; larger tiles are slower (a 1024-wide softmax: 61 µs at one row, 79 µs
    at four). num_warps (bench/results/triton_schedule.md): persistent, about 32 lanes of the
    program's tile per thread, 1 to 8 warps (a 2880-wide row: BLOCK 4096 and 4 warps reach 97% of a
    device-to-device copy's bandwidth at 65536 rows, against 79% with 16 warps); looped, chunks of
    8192 lanes with 16 warps (the best of 2048/4096/8192 x 4/8/16 for rows of 16384 and 32000)."""
    if n <= MAX_BLOCK:
        block = _next_pow2(n)
        rows = max(1, TILE_LANES // block)
        if max_rows is not None:
            rows = min(rows, _next_pow2(max_rows))
        return Schedule(block, max(1, min(8, rows * block // 1024)), looped=False, rows=rows)
    return Schedule(LOOP_BLOCK, 16, looped=True)


def interpreter_rounds_like_the_gpu() -> None:
    """Triton 3.6's interpreter converts float32 to bfloat16 by truncation where the GPU rounds to
    nearest even; a kernel that rounds many intermediates (Thunder's gelu: eight) then drifts ~1%
    on CPU only. Checks on CPU (export's verification, tests) patch the interpreter's conversion to
    round as the GPU does. Only under TRITON_INTERPRET=1; idempotent."""
    if os.environ.get("TRITON_INTERPRET") != "1":
        return
    import numpy as np
    import torch
    import triton.language as tl
    from triton.runtime import interpreter

    builder = interpreter.InterpreterBuilder
    if getattr(builder, "_thunder_aot_rtne", False):
        return
    truncating = builder.cast_impl

    def cast_impl(self, src, dst_type):
        if src.dtype.scalar == tl.float32 and dst_type.scalar == tl.bfloat16:
            rounded = torch.from_numpy(np.ascontiguousarray(src.data, dtype=np.float32)).to(torch.bfloat16)
            return interpreter.TensorHandle(rounded.view(torch.int16).numpy().view(np.uint16), dst_type.scalar)
        return truncating(self, src, dst_type)

    builder.cast_impl = cast_impl  # the builder's create_fp_trunc & co. call cast_impl
    builder._thunder_aot_rtne = True


class TritonBackend(Backend):
    name = "triton"
    prims = TorchBackend.prims  # regions form as for the other backends; the kernel decides per region
    stdlib_imports = ("os", "threading")
    imports = ("import triton", "import triton.language as tl")
    prelude_template = "triton_prelude.py.jinja"
    input_requirement = "{name}.is_contiguous() and ({name}.is_cuda or _INTERPRET)"
    input_requirement_text = "a contiguous CUDA tensor"
    supports_autograd = False
    device_per_call = True

    def __init__(self) -> None:
        self.torch = TorchBackend()

    @property
    def verify_device(self) -> str:  # type: ignore[override]
        if os.environ.get("TRITON_INTERPRET") == "1":
            interpreter_rounds_like_the_gpu()
            return "cpu"
        return "cuda"

    def unavailable_reason(self) -> str | None:
        import torch

        if os.environ.get("TRITON_INTERPRET") == "1":
            return None
        if not torch.cuda.is_available():
            return "no CUDA device (set TRITON_INTERPRET=1 to check kernels on CPU with Triton's interpreter)"
        return None

    def region_view(self, region: Region, dims: tuple[DimRange, ...] = ()):
        try:
            return self._kernel_view(region, dims)
        except Unsupported:
            return self.torch.region_view(region, dims)

    def _kernel_view(self, region: Region, dims: tuple[DimRange, ...]) -> TritonRegionView:
        prog = RowProgram(region, dims)
        loads, scalar_loads, kernel_params, launch_args = [], [], [], []
        # the rows: an input of the full shape (its shape is the outputs', its numel / N the grid)
        row_input = next((v for v in region.inputs if v.spec.shape == prog.full and v.name not in prog.sliced), None)
        for v in region.inputs:
            ptr = f"{v.name}_ptr"
            if v.name in prog.sliced:  # its slices load their parts of each row
                kernel_params.append(ptr)
                launch_args.append(v.name)
                continue
            kind = prog.kind_of(v.spec)
            if kind == Kind.ROW_SCALAR:
                scalar_loads.append(Line(f"{v.name} = tl.load({ptr} + row{prog.row_mask})"))
            elif kind == Kind.COL:
                loads.append(Line(f"{v.name} = tl.load({ptr} + cols, mask={prog.col_mask}, other=0.0)"))
            else:
                broadcast = prog.broadcast_row(v.spec.shape)
                loads.append(Line(f"{v.name} = tl.load({ptr} + {broadcast or 'row'} * N + cols, mask=mask, other=0.0)"))
            prog.exprs[v.name] = Expr(v.name, kind)
            kernel_params.append(ptr)
            launch_args.append(v.name)
        if row_input is None:  # a sliced input: rows of its own width
            row_input = next((v for v in region.inputs if v.name in prog.sliced), None)
        if row_input is None:
            raise Unsupported("no input spans the rows")
        row_width = row_input.spec.shape[-1] if prog.n is not None or row_input.name in prog.sliced else None
        n_expr = str(prog.n) if prog.n is not None else f"{row_input.name}.shape[-1]"
        pending = ""  # a source comment waits for the first line an op emits (aliases emit none)
        for op, comment in zip(region.ops, source_comments(region.ops)):
            pending = comment or pending
            start = len(prog.lines)
            prog.op(op)
            if pending and len(prog.lines) > start:
                prog.lines[start] = Line(prog.lines[start].code, pending)
                pending = ""
        stores, allocations = [], []
        lead = [render_dim(d) for d in row_input.spec.shape[:-1]]  # the rows' sizes, as the bucket binds them
        for o in region.outputs:
            kind = prog.kind_of(o.spec)
            expr = prog.exprs[o.name]
            if kind == Kind.ROW and expr.kind != Kind.ROW:
                raise Unsupported("a row output computed as a per-row scalar")
            if kind == Kind.COL:
                raise Unsupported("an output that does not depend on the row")
            if kind == Kind.ROW:
                sizes_text = [*lead, prog.n_text() if prog.n is not None else render_dim(row_input.spec.shape[-1])]
            else:
                sizes_text = [*lead, "1"] if len(o.spec.shape) == len(prog.full) else list(lead)
            ptr = f"{o.name}_out_ptr"
            sizes, dtype = tuple_text(sizes_text), f"torch.{o.spec.dtype}"
            allocations.append(
                Line(f"{o.name} = _empty_strided_cuda({sizes}, {tuple_text(_contiguous_strides(sizes_text))}, {dtype}) "
                     f"if _device >= 0 else torch.empty({sizes}, dtype={dtype}, device={row_input.name}.device)")
            )
            offset, masked = ("row * N + cols", ", mask=mask") if kind == Kind.ROW else ("row", prog.row_mask)
            stores.append(Line(f"tl.store({ptr} + {offset}, {expr.text}{masked})"))
            kernel_params.append(ptr)
            launch_args.append(o.name)
        plan = prog.plan
        body = (prog.looped_body if plan.looped else prog.persistent_body)(scalar_loads, loads, stores)
        # run-time sizes, passed after the tensors (never specialised on): the bucket's dynamic dims,
        # which the bucket's branch binds from the input shapes before its steps; several rows per
        # program: also the number of rows (the last program's tile runs past it)
        rows_expr = f"{row_input.name}.numel() // {row_width or n_expr}"
        size_params, row_count = list(prog.size_params), ()
        if plan.rows > 1:
            row_count = (Line(f"_rows = {rows_expr}"),)
            size_params.append("_rows")
            rows_expr = f"(_rows + {plan.rows - 1}) // {plan.rows}"
        runtime = [*size_params, *(["N"] if prog.n is None else [])]
        return TritonRegionView(
            name=region.name,
            kernel=region.name,
            emits_kernel=True,
            decorator=f"@triton.jit(do_not_specialize={runtime!r})" if runtime else "@triton.jit",
            params=tuple(v.name for v in region.inputs),
            kernel_params=(*kernel_params, *size_params),
            n_param="N: tl.constexpr" if prog.n is not None else "N",
            body=tuple(body),
            schedule_note=plan.note(prog.n if prog.n is not None else f"N <= {prog.n_max}"),
            rows_expr=rows_expr,
            row_count=row_count,
            allocations=tuple(allocations),
            launch_args=(*launch_args, *size_params),
            n=n_expr,
            block=plan.block,
            num_warps=plan.num_warps,
        )
