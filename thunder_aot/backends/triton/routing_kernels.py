"""Lowering of a routing region (passes.fuse_moe_routing: the sort of a mixture of experts' ids and what
follows from it alone) as one program over whole 1-D tensors: every value of the sort's length is a
[BLOCK] vector of the one program (``offs``, masked at the run-time length N), every histogram a
[bins] vector.

:data:`ROUTING_OPS` maps each op to the method that writes it. A region with anything else, or
longer than MAX_BLOCK at its range's upper edge, raises
:class:`~thunder_aot.backends.triton.op_tables.Unsupported` (it runs as its source's torch calls).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from thunder_aot.backends.base import Line, source_comments
from thunder_aot.backends.triton.op_tables import TL_DTYPES, Unsupported
from thunder_aot.backends.triton.schedule import ROUTING_WARPS, next_pow2
from thunder_aot.ir import Const, DimRange, DType, PrimOp, Ref, Region

#: the longest sort one program takes (keys in registers: 32 per thread at 8 warps)
MAX_BLOCK = 8192


@dataclass(frozen=True)
class Vector:
    """A value of the program: its name and the lanes it lives on (``offs``: the sort's length;
    ``bins<k>``: a histogram's k bins)."""

    text: str
    lanes: str


class RoutingProgram:
    """Translates one routing region, or raises Unsupported."""

    def __init__(self, region: Region, dims: tuple[DimRange, ...] = ()) -> None:
        if len(region.inputs) != 1 or not region.ops or region.ops[0].prim != "sort_bounded":
            raise Unsupported("a routing region starts with the sort of its one input")
        self.region = region
        ranges = {d.name: d for d in dims}
        (self.length,) = region.inputs[0].spec.shape
        upper = (
            self.length
            if isinstance(self.length, int)
            else (
                self.length.at({self.length.name: ranges[self.length.name].hi})
                if self.length.name in ranges
                else None
            )
        )
        if upper is None or upper > MAX_BLOCK:
            raise Unsupported(f"a routing region longer than {MAX_BLOCK} (or without an upper edge)")
        self.block = next_pow2(max(upper, 2))
        # one program sorts every id: more warps share the sort's compare-and-swap stages
        self.num_warps = min(ROUTING_WARPS, max(4, self.block // 128))
        self.values: dict[str, Vector] = {}
        self.lines: list[Line] = [Line("offs = tl.arange(0, BLOCK)"), Line("m = offs < N")]
        self.bins: dict[int, str] = {}  # bin count -> its lanes' name
        self.stored: set[str] = set()  # outputs a scatter writes

    def lanes_of(self, shape: tuple) -> str:
        if shape == (self.length,):
            return "offs"
        if len(shape) == 1 and isinstance(shape[0], int) and shape[0] in self.bins:
            return self.bins[shape[0]]
        raise Unsupported(f"a value of shape {shape} in a routing program of length {self.length}")

    def mask(self, lanes: str) -> str:
        return "m" if lanes == "offs" else f"{lanes} < {lanes.removeprefix('bins')}"

    def arg(self, a) -> Vector:
        if not isinstance(a, Ref) or a.name not in self.values:
            raise Unsupported(f"a routing op's argument {a!r}")
        return self.values[a.name]

    def set(self, name: str, text: str, lanes: str, comment: str = "") -> None:
        self.lines.append(Line(f"{name} = {text}", comment))
        self.values[name] = Vector(name, lanes)

    def body(self) -> list[Line]:
        for op, comment in zip(self.region.ops, source_comments(self.region.ops)):
            lower = ROUTING_OPS.get(op.prim)
            if lower is None:
                raise Unsupported(f"prims.{op.prim} in a routing program")
            start = len(self.lines)
            lower(self, op)
            if comment and len(self.lines) > start:
                self.lines[start] = Line(self.lines[start].code, comment)
        for out in self.region.outputs:
            if out.name in self.stored:
                continue
            v = self.values.get(out.name)
            if v is None:
                raise Unsupported(f"an output {out.name} the routing program does not compute")
            self.lines.append(
                Line(f"tl.store({out.name}_out_ptr + {v.lanes}, {v.text}, mask={self.mask(v.lanes)})")
            )
        return self.lines

    # --- the ops ------------------------------------------------------------------------------

    def sort_bounded(self, op: PrimOp) -> None:
        """Ids in [0, E) sorted with their positions: keys ``id * BLOCK + position`` (ties in
        position order), lanes past N after every real key."""
        x, bound = op.args
        vals, perm = op.outputs
        name = self.region.inputs[0].name
        self.set(f"{name}_ids", f"tl.load({name}_ptr + offs, mask=m, other=0).to(tl.int64)", "offs")
        self.set(
            "keys", f"tl.sort(tl.where(m, {name}_ids * BLOCK + offs, {bound.value} * BLOCK + offs))", "offs"
        )
        self.set(vals.name, f"(keys // BLOCK).to({TL_DTYPES[vals.spec.dtype]})", "offs")
        self.set(perm.name, f"(keys % BLOCK).to({TL_DTYPES[perm.spec.dtype]})", "offs")

    def convert_element_type(self, op: PrimOp) -> None:
        a, dtype = self.arg(op.args[0]), op.args[1]
        assert isinstance(dtype, DType)
        self.set(op.outputs[0].name, f"({a.text}).to({TL_DTYPES[dtype.name]})", a.lanes)

    def shallow_copy(self, op: PrimOp) -> None:
        self.values[op.outputs[0].name] = self.arg(op.args[0])

    def iota(self, op: PrimOp) -> None:
        """``start + i * step`` along the sort's length (torch.arange)."""
        kwargs = dict(op.kwargs)
        start, step, dtype = kwargs["start"], kwargs["step"], kwargs["dtype"]
        if not (
            isinstance(start, Const)
            and isinstance(step, Const)
            and isinstance(start.value, int)
            and isinstance(step.value, int)
        ):
            raise Unsupported("iota with other than integer constant start and step")
        lanes = self.lanes_of(op.outputs[0].spec.shape)
        self.set(
            op.outputs[0].name, f"({start.value} + {lanes} * {step.value}).to({TL_DTYPES[dtype.name]})", lanes
        )

    def histc(self, op: PrimOp) -> None:
        """torch.histc: bin ``(x - min) * bins / (max - min)`` truncated, ``max`` itself in the last
        bin, values outside [min, max] (and NaN) counted nowhere."""
        a = self.arg(op.args[0])
        bins, lo, hi = (c.value for c in op.args[1:])
        if a.lanes != "offs" or not isinstance(bins, int) or bins < 1:
            raise Unsupported("histc of other than the sort's length")
        if bins not in self.bins:
            self.bins[bins] = f"bins{bins}"
            self.lines.append(Line(f"bins{bins} = tl.arange(0, {next_pow2(max(bins, 2))})"))
        lanes = self.bins[bins]
        out = op.outputs[0].name
        self.set(f"{out}_x", f"({a.text}).to(tl.float32)", "offs")
        self.set(f"{out}_in", f"m & ({out}_x >= {float(lo)!r}) & ({out}_x <= {float(hi)!r})", "offs")
        self.set(
            f"{out}_bin", f"(({out}_x - {float(lo)!r}) * {bins} / {float(hi - lo)!r}).to(tl.int32)", "offs"
        )
        self.set(f"{out}_bin", f"tl.where({out}_in, tl.minimum({out}_bin, {bins - 1}), 0)", "offs")
        counts = f"tl.histogram({out}_bin, {next_pow2(max(bins, 2))}, mask={out}_in)"
        self.set(out, f"{counts}.to({TL_DTYPES[op.outputs[0].spec.dtype]})", lanes)

    def cumsum(self, op: PrimOp) -> None:
        """The running sum along the value's lanes (its masked lanes hold 0, past the last)."""
        a, out = self.arg(op.args[0]), op.outputs[0]
        dtype = TL_DTYPES[out.spec.dtype]
        self.set(
            out.name, f"tl.cumsum(tl.where({self.mask(a.lanes)}, ({a.text}).to({dtype}), 0), axis=0)", a.lanes
        )

    def empty(self, op: PrimOp) -> None:
        """A fresh buffer: only ever a scatter's target (its elements no index names stay unset)."""

    def scatter(self, op: PrimOp) -> None:
        """``out = target; out[idx] = values`` into a fresh buffer of the sort's length: stored at
        the indices (a negative one counts from the end, one outside names nothing)."""
        target, idx, values = op.args
        out = op.outputs[0]
        if (
            out.spec.shape != (self.length,)
            or self.arg(idx).lanes != "offs"
            or self.arg(values).lanes != "offs"
        ):
            raise Unsupported("a scatter other than of the sort's length")
        i = self.arg(idx).text
        self.set(f"{out.name}_at", f"tl.where({i} < 0, {i} + N, {i})", "offs")
        self.lines.append(
            Line(
                f"tl.store({out.name}_out_ptr + {out.name}_at, "
                f"({self.arg(values).text}).to({TL_DTYPES[out.spec.dtype]}), "
                f"mask=m & ({out.name}_at >= 0) & ({out.name}_at < N))"
            )
        )
        self.stored.add(out.name)


#: op -> the method that writes it
ROUTING_OPS: dict[str, Callable[[RoutingProgram, PrimOp], None]] = {
    "sort_bounded": RoutingProgram.sort_bounded,
    "convert_element_type": RoutingProgram.convert_element_type,
    "shallow_copy": RoutingProgram.shallow_copy,
    "iota": RoutingProgram.iota,
    "histc": RoutingProgram.histc,
    "cumsum": RoutingProgram.cumsum,
    "empty": RoutingProgram.empty,
    "scatter": RoutingProgram.scatter,
}
