"""Row kernels: a region of pointwise ops and reductions over the innermost dim as the body of one
``@triton.jit`` kernel over rows of the innermost dim (narrow rows several to a program).

:class:`RowProgram` walks the region's prims; :data:`ROW_OPS` maps each prim to the function that
writes its Triton expression (from the templates of :mod:`~thunder_aot.backends.triton.op_tables`).
A region outside that class raises :class:`~thunder_aot.backends.triton.op_tables.Unsupported`, and
the backend renders it as torch calls instead, so correctness never depends on coverage.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass

from thunder_aot.backends.base import Line, nested, render_const
from thunder_aot.backends.triton.op_tables import (
    BINARY,
    COMPARISONS,
    FLOAT_DTYPES,
    REDUCE_COMBINE,
    REDUCE_IDENTITY,
    TL_DTYPES,
    UNARY,
    Unsupported,
    half_literal,
    pow_text,
)
from thunder_aot.backends.triton.schedule import schedule
from thunder_aot.ir import Const, DimRange, DType, PrimOp, Ref, Region, SizeArg, SymDim, TensorSpec, Value


class Kind(enum.Enum):
    ROW = "row"  # varies along rows and along the innermost dim: a [BLOCK] vector per program
    ROW_SCALAR = "row scalar"  # one value per row (a reduction's result)
    COL = "col"  # the same [BLOCK] vector for every row (a weight of shape [N])
    CONST = "const"  # a Python number
    PART = "part"  # a slice narrower than the row, with ops on it: inline text, placed by a cat


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


@dataclass(frozen=True)
class Reduction:
    """``out = fn(where(mask, operand, identity)) + suffix`` over the row, in parts for the looped
    schedule."""

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
            if (
                uses := [
                    op for op in region.ops if any(isinstance(a, Ref) and a.name == v.name for a in op.args)
                ]
            )
            and all(op.prim == "slice" for op in uses)
        }
        values = [
            *(v for v in region.inputs if v.name not in self.sliced),
            *(o for op in region.ops for o in op.outputs),
        ]
        #: every value's dtype (comparisons of 16-bit floats are written in float32)
        self.dtypes = {
            v.name: v.spec.dtype for v in [*region.inputs, *(o for op in region.ops for o in op.outputs)]
        }
        # the row: the widest shape of the highest rank (a dynamic width counts as the widest)
        full = max(
            (v.spec.shape for v in values),
            key=lambda s: (len(s), s[-1] if s and isinstance(s[-1], int) else float("inf")),
        )
        if not full:
            raise Unsupported("a region of scalars")
        self.full = full
        self.ranges = {d.name: d for d in dims}
        last = full[-1]
        if isinstance(last, SymDim):  # a dynamic row width: N is a run-time argument of the kernel
            if last.name not in self.ranges:
                raise Unsupported(f"no range for the innermost dim {last.name}")
            self.n: int | None = None
            self.n_max = last.at({last.name: self.ranges[last.name].hi})
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
        # per line: what it defines, the reduction it computes
        self.line_info: list[tuple[str, Reduction | None]] = []
        #: BLOCK, num_warps, rows per program. One row per program writes each value as a [BLOCK]
        #: vector; more, as a [rows, BLOCK] tile (``row`` a [rows, 1] column of row indices,
        #: ``cols`` [1, BLOCK])
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
                d = d.at({d.name: self.ranges[d.name].hi})
            total *= d
        return total

    def reduce(self, fn: str, operand: str) -> str:
        """A reduction over each row's lanes: a per-row scalar ([rows, 1] in a tile)."""
        return (
            f"{fn}({operand}, axis=0)" if self.plan.rows == 1 else f"{fn}({operand}, axis=1, keep_dims=True)"
        )

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
        return d.expr

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
            return Expr(render_const(a.value), Kind.CONST)
        if isinstance(a, SizeArg) and a.real:  # a mean over a dynamic dim divides by its size
            return Expr(f"({self.size_text(a.dim)} * 1.0)", Kind.CONST)
        raise Unsupported(f"argument {a!r}")

    def op(self, op: PrimOp) -> str:
        """Write the prim's Triton expression (its row in :data:`ROW_OPS`), or raise Unsupported."""
        lower = ROW_OPS.get(op.prim)
        if lower is None:
            raise Unsupported(f"prims.{op.prim}")
        return lower(self, op)

    def slice(self, op: PrimOp) -> str:
        """A contiguous part of an input's innermost dim. As wide as a row: a load at an offset. Narrower
        (``x[..., :32]`` of a 64-wide row): a part, placed in the row by the ``cat`` that uses it."""
        source, starts, ends, strides = op.args
        inputs = {v.name: v.spec for v in self.region.inputs}
        spec = inputs.get(source.name) if isinstance(source, Ref) else None
        out = op.outputs[0]
        if spec is None or not isinstance(spec.shape[-1], int) or self.n is None:
            raise Unsupported("a slice of other than an input's static innermost dim")
        if spec.shape[:-1] != self.full[:-1] or any(
            not (isinstance(x, Const) and x.value == 1) for x in strides.items
        ):
            raise Unsupported("a strided slice, or one across rows")
        if any(not (isinstance(x, Const) and x.value == 0) for x in starts.items[:-1]):
            raise Unsupported("a slice that does not keep whole rows")
        start, end = starts.items[-1], ends.items[-1]
        if not (isinstance(start, Const) and isinstance(end, Const)):
            raise Unsupported("a slice with dynamic bounds")
        width, row_width = end.value - start.value, spec.shape[-1]
        if width == self.n and source.name in self.sliced:
            load = (
                f"tl.load({source.name}_ptr + row * {row_width} + {start.value} + cols, mask=mask, other=0.0)"
            )
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
        if (
            not (isinstance(dim, Const) and dim.value in (-1, len(self.full) - 1))
            or self.kind_of(out.spec) != Kind.ROW
        ):
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

    def set(self, out: Value, text: str, kind: Kind, reduction: Reduction | None = None) -> str:
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
            lanes = [
                Line("cols = tl.arange(0, BLOCK)[None, :]"),
                Line("lanes = cols < N"),
                Line("mask = in_rows & lanes"),
            ]
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
            chunk = [
                Line("cols = start + tl.arange(0, BLOCK)"),
                Line("mask = cols < N"),
                *loads,
                *vector,
                *last,
            ]
            return [nested("for start in range(0, N, BLOCK):", chunk)]

        for line, (name, reduction) in zip(self.lines, self.line_info):
            if reduction is not None:
                acc = f"{reduction.out}_acc"
                body.append(
                    Line(f"{acc} = tl.full([BLOCK], {reduction.identity}, {reduction.dtype})", line.comment)
                )
                masked = f"tl.where(mask, {reduction.operand}, {reduction.identity})"
                body += loop([Line(f"{acc} = {reduction.combine.format(acc, masked)}")])
                body.append(Line(f"{reduction.out} = {reduction.fn}({acc}, axis=0){reduction.suffix}"))
            elif self.exprs[name].kind in (Kind.ROW, Kind.COL):
                vector.append(line)
            else:  # per-row scalars and constants: once, between the loops
                body.append(line)
        return body + loop(stores)


# --- the op table: prim -> the function that writes its expression --------------------------


def _unary(template: str) -> Callable[[RowProgram, PrimOp], str]:
    def lower(p: RowProgram, op: PrimOp) -> str:
        x = p.arg(op.args[0])
        return p.set(op.outputs[0], template.format(x.text), x.kind)

    return lower


def _binary(template: str) -> Callable[[RowProgram, PrimOp], str]:
    def lower(p: RowProgram, op: PrimOp) -> str:
        a, b = p.arg(op.args[0]), p.arg(op.args[1])
        return p.set(op.outputs[0], template.format(a.text, b.text), _combine(a.kind, b.kind))

    return lower


def _compare(operator: str) -> Callable[[RowProgram, PrimOp], str]:
    """A comparison; 16-bit float operands compared in float32 (as the GPU does; Triton's interpreter
    would compare a 16-bit NaN's bits)."""

    def lower(p: RowProgram, op: PrimOp) -> str:
        texts, kinds = [], []
        for arg in op.args[:2]:
            e = p.arg(arg)
            wide = isinstance(arg, Ref) and p.dtypes.get(arg.name) in ("float16", "bfloat16")
            texts.append(f"({e.text}).to(tl.float32)" if wide else e.text)
            kinds.append(e.kind)
        return p.set(op.outputs[0], f"{texts[0]} {operator} {texts[1]}", _combine(*kinds))

    return lower


def _div(p: RowProgram, op: PrimOp) -> str:
    if op.outputs[0].spec.dtype not in FLOAT_DTYPES:
        raise Unsupported("integer division")
    return _binary("{} / {}")(p, op)


def _pow(p: RowProgram, op: PrimOp) -> str:
    a, out = p.arg(op.args[0]), op.outputs[0]
    return p.set(out, pow_text(a.text, op.args[1]), a.kind)


def _where(p: RowProgram, op: PrimOp) -> str:
    c, a, b = (p.arg(x) for x in op.args)
    dtype = op.outputs[0].spec.dtype
    return p.set(
        op.outputs[0],
        f"tl.where({c.text}, {half_literal(a.text, dtype)}, {half_literal(b.text, dtype)})",
        _combine(c.kind, a.kind, b.kind),
    )


def _convert(p: RowProgram, op: PrimOp) -> str:
    a, dtype = p.arg(op.args[0]), op.args[1]
    assert isinstance(dtype, DType)
    return p.set(op.outputs[0], f"({a.text}).to({TL_DTYPES[dtype.name]})", a.kind)


def _alias(p: RowProgram, op: PrimOp) -> str:
    """shallow_copy and broadcast_in_dim: the same values (a row's vector, a per-row scalar, a part)."""
    a, out = p.arg(op.args[0]), op.outputs[0]
    if a.kind == Kind.PART:
        if op.prim == "broadcast_in_dim" and out.spec.shape != p.part_shapes[a.text]:
            raise Unsupported("a broadcast of a slice")
        p.exprs[out.name] = a
        p.part_shapes[a.text] = out.spec.shape
        return ""
    kind = p.kind_of(out.spec)
    if a.kind == Kind.ROW and kind != Kind.ROW:
        raise Unsupported("broadcast that drops the row")
    p.exprs[out.name] = Expr(a.text, _combine(a.kind, kind) if kind == Kind.ROW else a.kind)
    return ""


def _innermost(p: RowProgram, op: PrimOp) -> Expr:
    a, dims = p.arg(op.args[0]), op.args[1]
    if a.kind != Kind.ROW or [d.value for d in dims.items] != [len(p.full) - 1]:
        raise Unsupported(f"{op.prim} over other than the innermost dim")
    return a


def _reduce(p: RowProgram, op: PrimOp) -> str:
    a, out = _innermost(p, op), op.outputs[0]
    fn, identity = REDUCE_IDENTITY[op.prim]
    reduction = Reduction(out.name, fn, identity, a.text, TL_DTYPES[out.spec.dtype], REDUCE_COMBINE[fn])
    return p.set(out, p.reduce(fn, f"tl.where(mask, {a.text}, {identity})"), Kind.ROW_SCALAR, reduction)


def _var_mean(p: RowProgram, op: PrimOp) -> str:
    a = _innermost(p, op)
    correction = dict(op.kwargs)["correction"].value
    var, mean = op.outputs
    dtype = TL_DTYPES[mean.spec.dtype]
    n, m = p.n_text(), (p.n - correction if p.n is not None else f"(N - {correction})")
    mean_sum = Reduction(mean.name, "tl.sum", "0.0", a.text, dtype, REDUCE_COMBINE["tl.sum"], f" / {n}")
    p.set(mean, p.reduce("tl.sum", f"tl.where(mask, {a.text}, 0.0)") + f" / {n}", Kind.ROW_SCALAR, mean_sum)
    centered = f"tl.where(mask, {a.text} - {mean.name}, 0.0)"
    squares = f"({a.text} - {mean.name}) * ({a.text} - {mean.name})"
    var_sum = Reduction(var.name, "tl.sum", "0.0", squares, dtype, REDUCE_COMBINE["tl.sum"], f" / {m}")
    return p.set(var, p.reduce("tl.sum", f"{centered} * {centered}") + f" / {m}", Kind.ROW_SCALAR, var_sum)


#: prim name -> the function that writes its Triton expression. One row per prim; a prim missing
#: here makes its region run as torch calls.
ROW_OPS: dict[str, Callable[[RowProgram, PrimOp], str]] = {
    **{name: _unary(template) for name, template in UNARY.items()},
    **{name: _binary(f"{{}} {operator} {{}}") for name, operator in BINARY.items()},
    **{name: _compare(operator) for name, operator in COMPARISONS.items()},
    "div": _div,
    "pow": _pow,
    # torch.maximum / minimum propagate NaN (tl.maximum's default does not)
    "maximum": _binary("tl.maximum({}, {}, propagate_nan=tl.PropagateNan.ALL)"),
    "minimum": _binary("tl.minimum({}, {}, propagate_nan=tl.PropagateNan.ALL)"),
    "where": _where,
    "convert_element_type": _convert,
    "shallow_copy": _alias,
    "broadcast_in_dim": _alias,
    "slice": RowProgram.slice,
    "cat": RowProgram.cat,
    **{name: _reduce for name in REDUCE_IDENTITY},
    "var_mean": _var_mean,
}
