"""Index kernels: regions with shape ops in them (reshape, transpose, broadcast, slice, cat, squeeze),
as Thunder forms for rotary embeddings of ``q_proj(x).view(...).transpose(1, 2)`` or Qwen3's
per-head RMSNorm of ``q_proj(x).view(...)``: one ``@triton.jit`` kernel over the elements of the
region's outputs.

Without reductions (*flat*), each program takes BLOCK consecutive elements of the largest output.
With reductions (*tiled*), each program takes a tile of whole rows of the outputs' innermost dim
(``row`` a column of row numbers, ``cols`` the lanes), and every reduction must reduce, for each
output row, over one dim that the lanes walk; where one reduces over an outer dim, the lanes walk
that dim of the outputs instead (:meth:`PointwiseProgram.lane_dims`) and every other dim is a row.

Every output's index is split into its dims; a value's index is carried back through the ops that
made it (a transpose permutes the index, a broadcast drops the broadcast dims, a reshape re-splits
the flat index, a slice shifts and strides it, a cat picks its piece by the index along the cat dim,
a reduction puts the lanes at the reduced dim) down to the region's inputs, which are loaded at the
index they end at. Values are computed where they are needed, once per distinct index (outputs of
different shapes recompute what they share at their own index).

:data:`POINTWISE_OPS` maps each prim to its lowering; a prim missing here raises
:class:`~thunder_aot.backends.triton.op_tables.Unsupported`. The arithmetic of masks and indices is
in :mod:`~thunder_aot.backends.triton.index_math`, the expression templates in
:mod:`~thunder_aot.backends.triton.op_tables`.

It is one file of over 500 lines because :class:`PointwiseProgram` and the op table whose rows call
its methods are one unit.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from dataclasses import dataclass

from thunder_aot.backends.base import Line, render_const, source_comments
from thunder_aot.backends.triton.index_math import (
    Mask,
    conjuncts,
    empty,
    gathered,
    implies,
    is_literal,
    is_name,
    reshape_groups,
    simplest,
)
from thunder_aot.backends.triton.op_tables import (
    BINARY,
    BITS,
    COMPARISONS,
    FLOAT_DTYPES,
    REDUCE_COMBINE,
    REDUCE_IDENTITY,
    REDUCTIONS,
    TL_DTYPES,
    UNARY,
    Unsupported,
    half_literal,
    pow_text,
)
from thunder_aot.backends.triton.schedule import MAX_BLOCK, Schedule, dense, next_pow2, schedule
from thunder_aot.ir import Const, Dim, DimRange, DType, PrimOp, Ref, Region, Seq, SizeArg, SymDim, Value

#: elements per program and warps: a flat pointwise kernel's usual tile (1024 lanes, as TILE_LANES)
BLOCK = 1024
NUM_WARPS = 4
#: 32-bit index arithmetic below this many elements per tensor: half of 2**31, so that the
#: masked lanes past a tensor's end (the last program's, a cat's other pieces) stay in range too
INDEX32_LIMIT = 2**30
#: one output element per row: the most output elements per reduction result (each recomputes the
#: reductions it reads; a sum over top-k experts per hidden element is one)
RECOMPUTE_LIMIT = 8

Index = tuple[str, ...]  # one Triton integer expression per dim of a value


@dataclass(frozen=True)
class Output:
    """One output of the kernel: its value and its number of elements (kernel text)."""

    value: Value
    numel: str


class PointwiseProgram:
    """Translates one region of pointwise and shape ops, or raises Unsupported."""

    @staticmethod
    def lane_dims(region: Region) -> tuple[int, ...]:
        """The dims of the outputs the lanes may walk, in the order to try: the innermost (rows of
        contiguous elements), then, where the region reduces and its outputs have one rank, each
        outer dim (a reduction over a leading dim: every other dim is a row)."""
        ranks = {len(v.spec.shape) for v in region.outputs}
        if not any(op.prim in REDUCTIONS for op in region.ops):
            return (-1,)
        rank = ranks.pop() if len(ranks) == 1 else 0
        # an outer dim of size 1 in every output has nothing for the lanes to walk
        outer = tuple(d for d in range(rank - 2, -1, -1) if any(v.spec.shape[d] != 1 for v in region.outputs))
        # None: no output keeps the reduced dim (x.sum(1)): each output element is a row, the
        # lanes walk the reduced dim of the reduction's operand only
        return (-1, *outer, None)

    def __init__(self, region: Region, dims: tuple[DimRange, ...] = (), lane_dim: int | None = -1) -> None:
        self.region = region
        self.ranges = {d.name: d for d in dims}
        self.inputs = {v.name: v for v in region.inputs}
        self.producers: dict[str, PrimOp] = {o.name: op for op in region.ops for o in op.outputs}
        self.specs = {v.name: v.spec for v in [*region.inputs, *(o for op in region.ops for o in op.outputs)]}
        self.comments = dict(zip((id(op) for op in region.ops), source_comments(region.ops)))
        for op in region.ops:
            if op.prim not in POINTWISE_OPS:
                raise Unsupported(f"prims.{op.prim} in a pointwise kernel")
        if any(not v.spec.shape for v in region.outputs):
            raise Unsupported("a scalar output")
        #: dynamic sizes the kernel takes at run time, by name
        self.size_params: list[str] = []
        self.tails: dict[int, int] = {}
        self.tail = 0
        #: tiles of whole rows where the region reduces; else a flat range of elements
        self.tiled = any(op.prim in REDUCTIONS for op in region.ops)
        self.plan: Schedule | None = None
        #: the outputs' dim the lanes walk in a tile (the innermost, or an outer one: see lane_dims)
        self.lane_dim = lane_dim
        reductions = [op for op in region.ops if op.prim in REDUCTIONS]
        #: the widest row a reduction reduces (its range's upper edge where dynamic; None: unbounded)
        reduced = [self._upper_size(_reduced_dim(self, op)[2]) for op in reductions]
        if self.tiled and lane_dim is None:
            widest = max(MAX_BLOCK + 1 if w is None else w for w in reduced)
            if widest > MAX_BLOCK:
                raise Unsupported("a reduction wider than a tile's lanes")
            self._refuse_recomputed_rows(reductions)
            self.width, self.widest = None, widest
            plan = schedule(widest, self._max_rows())
            # each lane of such a tile computes a whole output element (GPT-OSS's expert combine:
            # three gathers, a bias, a weight): at 32 lanes per thread its values spill
            self.plan = dataclasses.replace(
                plan, num_warps=max(plan.num_warps, min(4, plan.rows * plan.block // 256))
            )
        elif self.tiled:
            if lane_dim != -1 and len({len(v.spec.shape) for v in region.outputs}) != 1:
                raise Unsupported("lanes along an outer dim of outputs of different ranks")
            widths = {v.spec.shape[lane_dim] for v in region.outputs}
            width = widths.pop()
            # a dynamic lane dim takes a tile as wide as its range's upper edge, masked at its
            # run-time size; the lanes also hold every reduction's row, which may be wider than the
            # outputs' (a softmax over [logits, sink] whose output drops the sink column)
            widest = self._upper_size(width)
            if widths or widest is None or any(w is None for w in reduced):
                raise Unsupported("outputs of different or unbounded rows in a tiled kernel")
            #: reductions over a row a few elements longer than the outputs' (GPT-OSS's sink column)
            #: -> that excess: they reduce the tile's lanes, then a tail of lanes past the row
            self.tails = {
                id(op): e for op in reductions if (e := _excess(width, _reduced_dim(self, op)[2])) is not None
            }
            if any(op.prim not in REDUCE_IDENTITY for op in reductions if id(op) in self.tails):
                self.tails = {}
            #: the tail's lanes (a power of two), 0 without one
            self.tail = next_pow2(max(self.tails.values())) if self.tails else 0
            widest = max([widest, *(w for op, w in zip(reductions, reduced) if id(op) not in self.tails)])
            if widest > MAX_BLOCK:
                raise Unsupported("rows wider than a tile's lanes in a tiled kernel")
            #: the lanes' count in kernel text, and at most
            self.width, self.widest = self.size(width), widest
            self.plan = schedule(widest, self._max_rows())
        #: (value, index) -> the masks it was asked for under in the first of body's two passes
        self._requests: dict[tuple[str, Index], set[Mask]] | None = None
        #: each condition's place in the order conditions first appeared (masks render in it)
        self._order: dict[str, int] = {}
        self._start()

    def _start(self) -> None:
        """Empty kernel text and its names (body writes the kernel twice)."""
        self.lines: list[Line] = []
        self._memo: dict[tuple[str, Index, Mask], str] = {}
        #: each expression written so far -> its name (the kernel is straight-line code)
        self._texts: dict[str, str] = {}
        #: each named mask's conditions -> its name, and back
        self._masks: dict[Mask, str] = {}
        self._atoms: dict[str, Mask] = {}
        #: a gather's run-time index expression -> its name (``j<k>``)
        self._indices: dict[str, str] = {}
        #: each named mask's or index's program axes (``row``, ``cols``, ``offs``)
        self._mask_axes: dict[str, set[str]] = {}
        self._commented: set[int] = set()

    # --- sizes and indices ------------------------------------------------------------------

    def size(self, d: Dim) -> str:
        """A size in kernel code: a literal, or a run-time argument (``coeff * name``)."""
        if isinstance(d, int):
            return str(d)
        if d.name not in self.ranges:
            raise Unsupported(f"no range for the dynamic dim {d.name}")
        if d.name not in self.size_params:
            self.size_params.append(d.name)
        return d.expr

    def _product(self, dims) -> str:
        static = 1
        symbolic = []
        for d in dims:
            if isinstance(d, int):
                static *= d
            else:
                symbolic.append(self.size(d))
        parts = ([str(static)] if static != 1 or not symbolic else []) + symbolic
        return " * ".join(parts)

    def split(self, flat: str, shape: tuple) -> Index:
        """A flat (row-major) index over ``shape`` as one index per dim (size-1 dims: 0)."""
        index = []
        for k, d in enumerate(shape):
            if d == 1:
                index.append("0")
                continue
            inner = [x for x in shape[k + 1 :] if x != 1]
            text = flat if not inner else f"({flat} // ({self._product(inner)}))"
            outer = [x for x in shape[:k] if x != 1]
            index.append(text if not outer else f"({text} % {self.size(d)})")
        return tuple(index)

    def flatten(self, index: Index, shape: tuple) -> str:
        """The row-major flat index of ``index`` over ``shape`` (size-1 dims skipped)."""
        terms = []
        for k, (i, d) in enumerate(zip(index, shape)):
            if d == 1 or i == "0":
                continue
            inner = [x for x in shape[k + 1 :] if x != 1]
            terms.append(i if not inner else f"{i} * ({self._product(inner)})")
        return " + ".join(terms) or "0"

    def mask_name(self, condition: str) -> str:
        """A named mask (``m<k> = condition``, written once) for a conjunction of conditions and
        named masks: masks of the same conditions, less those another implies (``cols < S`` implies
        ``cols < S + 1``), share one name, so that loads and values under them are computed once."""
        atoms: set[str] = set()
        for part in conjuncts(condition):
            if part in self._atoms:
                atoms |= self._atoms[part]
            else:
                atoms.add(part)
                self._order.setdefault(part, len(self._order))
        return self._named(simplest(atoms))

    def _named(self, atoms: Mask) -> str:
        """The name of the mask of ``atoms``, written (on the largest named mask it narrows) where new."""
        if atoms in self._masks:
            return self._masks[atoms]
        name = f"m{len(self._masks)}"
        base = max((m for m in self._masks if m < atoms), key=len, default=frozenset())
        rest = sorted(atoms - base, key=self._order.__getitem__)
        parts = ([self._masks[base]] if base else []) + [
            c if len(rest) + bool(base) == 1 else f"({c})" for c in rest
        ]
        self._masks[atoms], self._atoms[name] = name, atoms
        self._mask_axes[name] = set().union(*(self._axes(c) for c in atoms)) if atoms else set()
        self.lines.append(Line(f"{name} = {' & '.join(parts) or 'True'}"))
        return name

    def _widest(self, name: str, index: Index, atoms: Mask) -> Mask:
        """The mask to compute ``name`` at ``index`` under where it is asked for under ``atoms``: of
        the masks the first pass asked it for under, one that ``atoms`` implies and none implies
        strictly (each was asked for by the lowering, so its lanes load in bounds; every lane
        ``atoms`` holds at, it holds at too). A softmax's output and its reductions' operands
        then share their values where the reductions' rows are wider (a sink column)."""
        asked = (self._requests or {}).get((name, index), ())
        if gathered(" ".join(index)) or any(gathered(c) for c in atoms):
            return atoms  # a gather's index names (j<k>) may differ between the passes
        wider = [m for m in asked if not any(gathered(c) for c in m) and implies(atoms, m)]
        widest = [m for m in wider if not any(o != m and implies(m, o) for o in wider)]
        return min(widest, key=lambda m: (len(m), sorted(m)), default=atoms)

    def _upper(self, d: Dim) -> int | None:
        """A dynamic size's largest value in the bucket (None without a range)."""
        r = self.ranges.get(d.name)
        return None if r is None else d.at({d.name: r.hi})

    def _upper_size(self, d: Dim) -> int | None:
        """A size's largest value in the bucket: itself where static (None: a dynamic one without a range)."""
        return d if isinstance(d, int) else self._upper(d)

    def _numel_upper(self, shape: tuple) -> int | None:
        """A shape's number of elements at the bucket's upper edges (None: a dim without a range)."""
        total = 1
        for d in shape:
            size = self._upper_size(d)
            if size is None:
                return None
            total *= size
        return total

    def _refuse_recomputed_rows(self, reductions: list[PrimOp]) -> None:
        """One output element per row computes each reduction it reads over the whole reduced row: an
        output with many elements per reduced row (a softmax's, which keeps the row) would do a
        row's work per element, quadratic in the row's width (torch's own kernels are not)."""
        outputs = [self._numel_upper(v.spec.shape) for v in self.region.outputs]
        results = [self._numel_upper(op.outputs[0].spec.shape) for op in reductions]
        if None in outputs or None in results:
            raise Unsupported("one output element per row without an upper edge for every size")
        if max(outputs) > RECOMPUTE_LIMIT * min(results):
            raise Unsupported(
                f"one output element per row would reduce each row {max(outputs) // min(results)} times "
                f"(at most {RECOMPUTE_LIMIT})"
            )

    def row_shape(self, shape: tuple) -> tuple:
        """An output's shape without the dim the lanes walk: its rows."""
        if self.lane_dim is None:
            return shape
        d = self.lane_dim % len(shape)
        return (*shape[:d], *shape[d + 1 :])

    def _max_rows(self) -> int | None:
        """The most rows (elements / lane dim's size) an output has at the bucket's upper edges."""
        rows = [self._numel_upper(self.row_shape(v.spec.shape)) for v in self.region.outputs]
        return None if None in rows else max(rows)

    # --- values -----------------------------------------------------------------------------

    def value(self, name: str, index: Index, mask: str) -> str:
        """The Triton name (or literal) holding value ``name`` at ``index``, computed once (under the
        widest mask it is asked for under: :meth:`_widest`)."""
        atoms = self._atoms[mask]
        if self._requests is None:
            self._asked.setdefault((name, index), set()).add(atoms)
        else:
            wider = self._widest(name, index, atoms)
            if wider != atoms:
                mask, atoms = self._named(wider), wider
        key = (name, index, atoms)
        if key in self._memo:
            return self._memo[key]
        if name in self.inputs:
            spec = self.inputs[name].spec
            text = self._load(name, self.flatten(index, spec.shape), mask)
            comment = ""
        else:
            op = self.producers.get(name)
            if op is None:
                raise Unsupported(f"a value {name} no op of the region makes")
            text = POINTWISE_OPS[op.prim](self, op, name, index, mask)
            comment = self.comments.get(id(op), "") if id(op) not in self._commented else ""
            self._commented.add(id(op))
        if is_name(text) or is_literal(text):
            self._memo[key] = text
            return text
        if text in self._texts:  # the same expression reached under another mask: computed once
            self._memo[key] = self._texts[text]
            return self._texts[text]
        var = f"v{len(self._memo)}"
        self._memo[key] = self._texts[text] = var
        self.lines.append(Line(f"{var} = {text}", comment))
        return var

    def _load(self, name: str, offset: str, mask: str) -> str:
        """``tl.load`` of input ``name`` at ``offset`` under ``mask``, with a pointer at least as
        wide as the mask (Triton before 3.4 broadcasts the mask to the pointer, never back): an
        address that varies along fewer axes than the program's tile takes the matching part of a
        tile mask, else the pointer is broadcast to the tile."""
        lanes = "tail" if "tail" in self._axes(offset) | self._axes(mask) else "cols"
        axes = ("row", lanes) if self.tiled else ("offs",)
        used = self._axes(offset)
        pointer = f"{name}_ptr + {offset}"
        if len(used) < len(axes) and not self._axes(mask) <= used:  # a mask wider than the pointer
            # the conditions along only the axes the address does not vary along are dropped (the
            # address is the same there); else the pointer is broadcast to the mask
            kept = frozenset(
                c for c in self._atoms[mask] if not (self._axes(c) and self._axes(c).isdisjoint(used))
            )
            if used and kept and set().union(*(self._axes(c) for c in kept)) <= used:
                mask = self._named(kept)
            else:
                width = self.tail if lanes == "tail" else "BLOCK"
                shape = f"({self.plan.rows}, {width})" if self.tiled else "(BLOCK,)"
                pointer = f"tl.broadcast_to({pointer}, {shape})"
        return f"tl.load({pointer}, mask={mask}, other=0)"

    def _axes(self, text: str) -> set[str]:
        """The program axes an index or mask expression varies along."""
        axes = {axis for axis in ("row", "cols", "tail", "offs") if re.search(rf"\b{axis}\b", text)}
        for name in re.findall(r"\b[mj]\d+\b", text):
            axes |= self._mask_axes.get(name, set())
        return axes

    def named_index(self, expression: str, along: str) -> str:
        """An index read at run time (a gather's), named ``j<k>`` once; it varies along the program
        axes of the index ``along`` it was read at."""
        if expression not in self._indices:
            name = f"j{len(self._indices)}"
            self._indices[expression] = name
            self._mask_axes[name] = self._axes(along)
            self.lines.append(Line(f"{name} = {expression}"))
        return self._indices[expression]

    def tile_mask(self, lanes: str) -> str:
        """The mask of the tile's valid rows and the lanes where ``lanes`` holds."""
        return self.mask_name(f"{self.row_mask} & ({lanes})")

    def operand(self, arg, index: Index, mask: str) -> str:
        """An op's operand at ``index``: a value of the region (same shape as the op's output), or a
        number."""
        if isinstance(arg, Ref):
            spec = self.specs[arg.name]
            return self.value(arg.name, index if spec.shape else (), mask)
        if isinstance(arg, Const) and isinstance(arg.value, (int, float)) and not isinstance(arg.value, bool):
            return render_const(arg.value)
        if isinstance(arg, Const) and isinstance(arg.value, bool):
            return "True" if arg.value else "False"
        if isinstance(arg, SizeArg) and arg.real:  # a mean over a dynamic dim divides by its size
            return f"({self.size(arg.dim)} * 1.0)"
        raise Unsupported(f"argument {arg!r}")

    # --- the kernel -------------------------------------------------------------------------

    @property
    def program_id(self) -> str:
        """The program's number, as the index arithmetic's integer type: 32-bit where every tensor of
        the region has fewer than INDEX32_LIMIT elements at the bucket's upper edges (every flat
        index, and every partial sum of one, is below its tensor's size; a 64-bit division costs
        several times a 32-bit one), else 64-bit. Indices read from tensors stay 64-bit."""
        sizes = [self._numel_upper(spec.shape) for spec in self.specs.values()]
        if all(n is not None and n < INDEX32_LIMIT for n in sizes):
            return "tl.program_id(0)"
        return "tl.program_id(0).to(tl.int64)"

    def outputs(self) -> list[Output]:
        return [Output(v, self._product(v.spec.shape)) for v in self.region.outputs]

    def body(self) -> tuple[list[Line], list[Output]]:
        """The kernel's statements: the program's elements (flat) or rows and lanes (tiled), then per
        output its index, the values it needs and its store. Written twice: the first pass records
        the masks each value is asked for under, the second computes each under the widest of them."""
        self._asked: dict[tuple[str, Index], set[Mask]] = {}
        self._requests = None
        self._write()
        self._requests = self._asked
        self._start()
        lines, outs = self._write()
        lines = _live(lines)
        if self.tiled:
            self.plan = dense(self.plan, sum(1 for line in lines if re.match(r"v\d+ = ", line.code)))
        return lines, outs

    def _write(self) -> tuple[list[Line], list[Output]]:
        outs = self.outputs()
        if not self.tiled:
            self.lines = [Line(f"offs = {self.program_id} * BLOCK + tl.arange(0, BLOCK)")]
        else:
            assert self.plan is not None
            self.lines = [
                Line(f"row = {self.program_id} * {self.plan.rows} + tl.arange(0, {self.plan.rows})[:, None]"),
                Line("cols = tl.arange(0, BLOCK)[None, :]"),
                *([Line(f"tail = tl.arange(0, {self.tail})[None, :]")] if self.tail else []),
            ]
        for out in outs:
            shape = out.value.spec.shape
            if not self.tiled:
                mask = self.mask_name(f"offs < {out.numel}" if len(outs) > 1 else "offs < N")
                index, offset = self.split("offs", shape), "offs"
            elif self.lane_dim is None:  # one element per row, stored from the tile's [rows, 1] column
                self.row_mask = mask = self.mask_name(f"row < {self._product(shape) or 1}")
                index = self.split("row", shape)
                offset = self.flatten(index, shape)
            else:
                rows = self.row_shape(shape)
                self.row_mask = self.mask_name(f"row < {self._product(rows) or 1}")
                mask = self.tile_mask(f"cols < {self.width}")
                d = self.lane_dim % len(shape)
                row_index = self.split("row", rows)
                index = (*row_index[:d], "cols", *row_index[d:])
                # rows of the innermost dim are a row's width apart; lanes along an outer dim are strided
                offset = f"row * {self.width} + cols" if d == len(shape) - 1 else self.flatten(index, shape)
            result = self.value(out.value.name, index, mask)
            self.lines.append(Line(f"tl.store({out.value.name}_out_ptr + {offset}, {result}, mask={mask})"))
        return self.lines, outs

    def lanes(self, op: PrimOp, index: Index, dim: int, size) -> list[tuple[Index, str]]:
        """For reduction ``op`` over ``dim`` at a per-row ``index`` (without that dim): per part of
        the reduced row, the operand's index with that part's lanes at ``dim`` and the mask of its
        valid lanes. One part, the tile's lanes; or, for a row a few elements longer than the
        outputs' (``self.tails``), the tile's lanes over the outputs' width, then the tail's lanes
        (``tail``, TAIL of them) past it."""
        if not self.tiled or any("cols" in i or "tail" in i for i in index):
            raise Unsupported("a reduction whose rows are not the output's rows")
        if id(op) in self.tails:
            main = (*index[:dim], "cols", *index[dim:]), self.tile_mask(f"cols < {self.width}")
            past = f"({self.width} + tail)"
            rest = (*index[:dim], past, *index[dim:]), self.tile_mask(f"tail < {self.tails[id(op)]}")
            return [main, rest]
        widest = size if isinstance(size, int) else self._upper(size)
        if widest is None or widest > self.plan.block:
            raise Unsupported("a reduction over a dim wider than the tile's lanes")
        return [((*index[:dim], "cols", *index[dim:]), self.tile_mask(f"cols < {self.size(size)}"))]


def _live(lines: list[Line]) -> list[Line]:
    """``lines`` less the masks and values no later line reads (a mask written for a value then
    computed under a wider one); a dropped line's source comment moves to the next line kept."""
    kept: list[Line] = []
    read: set[str] = set()
    for line in reversed(lines):
        defined = re.match(r"([mvj]\d+) = ", line.code)
        if defined and defined.group(1) not in read:
            if line.comment and kept and not kept[-1].comment:
                kept[-1] = Line(kept[-1].code, line.comment)
            continue
        read |= set(re.findall(r"\b[mvj]\d+\b", line.code))
        kept.append(line)
    return kept[::-1]


def _static(arg) -> int:
    if isinstance(arg, Const) and isinstance(arg.value, int):
        return arg.value
    raise Unsupported(f"a shape argument {arg!r} known only at run time")


def _dim_of(p: PointwiseProgram, arg) -> str:
    """A bound of a slice or a size: a number, or a dynamic size."""
    if isinstance(arg, Const) and isinstance(arg.value, int):
        return str(arg.value)
    if isinstance(arg, SizeArg):
        return p.size(arg.dim)
    raise Unsupported(f"a bound {arg!r}")


# --- the op table: prim -> the function that writes its value at an index -----------------------

Lower = Callable[[PointwiseProgram, PrimOp, str, Index, str], str]


def _unary(template: str) -> Lower:
    return lambda p, op, name, index, mask: template.format(p.operand(op.args[0], index, mask))


def _binary(template: str) -> Lower:
    return lambda p, op, name, index, mask: template.format(*(p.operand(a, index, mask) for a in op.args[:2]))


def _compare(operator: str) -> Lower:
    """16-bit floats compared in float32 (as the GPU does; the interpreter would compare bits)."""

    def lower(p: PointwiseProgram, op: PrimOp, name: str, index: Index, mask: str) -> str:
        texts = []
        for arg in op.args[:2]:
            text = p.operand(arg, index, mask)
            wide = isinstance(arg, Ref) and p.specs[arg.name].dtype in ("float16", "bfloat16")
            texts.append(f"({text}).to(tl.float32)" if wide else text)
        return f"{texts[0]} {operator} {texts[1]}"

    return lower


def _int_const(arg) -> int | None:
    """The value of an integer constant argument (not a bool), else None."""
    if isinstance(arg, Const) and isinstance(arg.value, int) and not isinstance(arg.value, bool):
        return arg.value
    return None


def _integer_divisor(op: PrimOp) -> str:
    """The divisor of an integer div or fmod: a nonzero constant (a tensor divisor may hold zeros,
    where torch raises and a kernel would not)."""
    divisor = _int_const(op.args[1])
    if not divisor:
        raise Unsupported(f"integer {op.prim} by other than a nonzero constant")
    return str(divisor)


def _div(p: PointwiseProgram, op: PrimOp, name: str, index: Index, mask: str) -> str:
    """Floats: true division. Integers (Thunder's floor_divide divides, then corrects the sign):
    division truncated toward zero, which Triton's ``//`` of signed integers is (LLVM's sdiv)."""
    if op.outputs[0].spec.dtype not in FLOAT_DTYPES:
        return f"{p.operand(op.args[0], index, mask)} // {_integer_divisor(op)}"
    return _binary("{} / {}")(p, op, name, index, mask)


def _fmod(p: PointwiseProgram, op: PrimOp, name: str, index: Index, mask: str) -> str:
    """The remainder with the dividend's sign (C's fmod): Triton's ``%`` (LLVM's srem and frem)."""
    if op.outputs[0].spec.dtype not in FLOAT_DTYPES:
        return f"{p.operand(op.args[0], index, mask)} % {_integer_divisor(op)}"
    return _binary("{} % {}")(p, op, name, index, mask)


def _signbit(p: PointwiseProgram, op: PrimOp, name: str, index: Index, mask: str) -> str:
    """Integers: below zero. Floats: the sign bit (set for -0.0 and negative NaNs too)."""
    a = op.args[0]
    if not isinstance(a, Ref):
        raise Unsupported("signbit of a constant")
    dtype = p.specs[a.name].dtype
    text = p.operand(a, index, mask)
    return f"({text}).to({BITS[dtype]}, bitcast=True) < 0" if dtype in BITS else f"{text} < 0"


def _iota(p: PointwiseProgram, op: PrimOp, name: str, index: Index, mask: str) -> str:
    """``start + i * step`` at element i of the 1-D output (torch.arange)."""
    kwargs = dict(op.kwargs)
    start, step, dtype = _int_const(kwargs["start"]), _int_const(kwargs["step"]), kwargs["dtype"]
    if start is None or step is None:
        raise Unsupported("iota with other than integer constant start and step")
    assert isinstance(dtype, DType)
    scaled = index[0] if step == 1 else f"{index[0]} * {step}"
    shifted = scaled if start == 0 else f"{start} + {scaled}"
    return _cast(shifted, TL_DTYPES[dtype.name])


def _cast(text: str, tl_dtype: str) -> str:
    """``text`` as ``tl_dtype``: a literal (an index the simplifier made constant, e.g. the only
    element of a one-element arange) becomes a typed scalar, which has no ``.to``."""
    if text.lstrip("-").isdigit():
        return f"tl.full([], {text}, {tl_dtype})"
    return f"({text}).to({tl_dtype})"


def _pow(p: PointwiseProgram, op: PrimOp, name: str, index: Index, mask: str) -> str:
    return pow_text(p.operand(op.args[0], index, mask), op.args[1])


def _where(p: PointwiseProgram, op: PrimOp, name: str, index: Index, mask: str) -> str:
    c, a, b = (p.operand(x, index, mask) for x in op.args[:3])
    dtype = op.outputs[0].spec.dtype
    return f"tl.where({c}, {half_literal(a, dtype)}, {half_literal(b, dtype)})"


def _convert(p: PointwiseProgram, op: PrimOp, name: str, index: Index, mask: str) -> str:
    dtype = op.args[1]
    assert isinstance(dtype, DType)
    return _cast(p.operand(op.args[0], index, mask), TL_DTYPES[dtype.name])


def _same(p: PointwiseProgram, op: PrimOp, name: str, index: Index, mask: str) -> str:
    """shallow_copy: the same value at the same index."""
    return p.operand(op.args[0], index, mask)


def _broadcast_in_dim(p: PointwiseProgram, op: PrimOp, name: str, index: Index, mask: str) -> str:
    """Input dim k sits at output dim broadcast_dims[k]; a size-1 input dim reads its only element."""
    a, bdims = op.args[0], op.args[2]
    assert isinstance(a, Ref) and isinstance(bdims, Seq)
    shape = p.specs[a.name].shape
    inner = tuple("0" if shape[k] == 1 else index[_static(d)] for k, d in enumerate(bdims.items))
    return p.value(a.name, inner, mask)


def _transpose(p: PointwiseProgram, op: PrimOp, name: str, index: Index, mask: str) -> str:
    """Output dim k is input dim perm[k]."""
    a, perm = op.args[0], op.args[1]
    assert isinstance(a, Ref) and isinstance(perm, Seq)
    inner = [""] * len(index)
    for k, d in enumerate(perm.items):
        inner[_static(d)] = index[k]
    return p.value(a.name, tuple(inner), mask)


def _reshape(p: PointwiseProgram, op: PrimOp, name: str, index: Index, mask: str) -> str:
    """The same elements in row-major order. Each run of output dims that makes up a run of input
    dims (:func:`reshape_groups`) is flattened and re-split over those input dims alone: a merge
    of dims is a sum of strided indices, a split divides one index (no division of a sum).
    Shapes without such runs: the whole output index flattened, re-split over the input's shape."""
    a = op.args[0]
    assert isinstance(a, Ref)
    shape, out_shape = p.specs[a.name].shape, op.outputs[0].spec.shape
    groups = reshape_groups(shape, out_shape)
    if groups is None:
        flat = p.flatten(index, out_shape)
        return p.value(a.name, p.split(f"({flat})", shape), mask)
    inner = [""] * len(shape)
    for dims_in, dims_out in groups:
        sub_in = tuple(shape[k] for k in dims_in)
        sub_out = tuple(out_shape[k] for k in dims_out)
        kept_out = [(index[k], out_shape[k]) for k in dims_out if out_shape[k] != 1]
        kept_in = [k for k in dims_in if shape[k] != 1]
        if len(kept_in) <= 1 and len(kept_out) <= 1:  # one dim each side (or none): the index carries over
            carried = kept_out[0][0] if kept_out else "0"
            for k in dims_in:
                inner[k] = carried if k in kept_in else "0"
            continue
        flat = p.flatten(tuple(index[k] for k in dims_out), sub_out)
        split = p.split(flat if is_name(flat) else f"({flat})", sub_in)
        for k, i in zip(dims_in, split):
            inner[k] = i
    return p.value(a.name, tuple(inner), mask)


def _squeeze(p: PointwiseProgram, op: PrimOp, name: str, index: Index, mask: str) -> str:
    a, dims = op.args[0], op.args[1]
    assert isinstance(a, Ref) and isinstance(dims, Seq)
    rank = len(p.specs[a.name].shape)
    removed = {_static(d) % rank for d in dims.items}
    carried = iter(index)
    return p.value(a.name, tuple("0" if k in removed else next(carried) for k in range(rank)), mask)


def _slice(p: PointwiseProgram, op: PrimOp, name: str, index: Index, mask: str) -> str:
    """Output index i along a dim reads start + i * step of the input."""
    a, starts = op.args[0], op.args[1]
    steps = op.args[3] if len(op.args) > 3 and isinstance(op.args[3], Seq) else None
    assert isinstance(a, Ref) and isinstance(starts, Seq)
    inner = []
    for k, i in enumerate(index):
        start = _dim_of(p, starts.items[k])
        step = _dim_of(p, steps.items[k]) if steps is not None else "1"
        scaled = i if step == "1" else f"{i} * {step}"
        inner.append(scaled if start == "0" else f"({start} + {scaled})")
    return p.value(a.name, tuple(inner), mask)


def _cat(p: PointwiseProgram, op: PrimOp, name: str, index: Index, mask: str) -> str:
    """Pieces side by side along ``dim``: each piece read at the index shifted into it, under a mask
    of its own lanes; one ``tl.where`` per boundary picks the piece."""
    pieces, dim = op.args
    assert isinstance(pieces, Seq) and isinstance(dim, Const)
    rank = len(op.outputs[0].spec.shape)
    d = dim.value % rank
    at = index[d]
    placed, offset = [], "0"
    for piece in pieces.items:
        assert isinstance(piece, Ref)
        width = p.size(p.specs[piece.name].shape[d])
        end = width if offset == "0" else f"{offset} + {width}"
        lanes = f"({at} < {end})" if offset == "0" else f"({at} >= {offset}) & ({at} < {end})"
        if not empty(p._atoms[mask] | set(conjuncts(lanes))):  # no lane of the mask reads this piece
            piece_mask = p.mask_name(f"{mask} & {lanes}")
            shifted = at if offset == "0" else f"({at} - ({offset}))"
            placed.append((end, p.value(piece.name, (*index[:d], shifted, *index[d + 1 :]), piece_mask)))
        offset = end
    if not placed:
        raise Unsupported("a cat read where none of its pieces lies")
    expression = placed[-1][1]
    for end, text in reversed(placed[:-1]):
        expression = f"tl.where({at} < {end}, {text}, {expression})"
    return expression


def _take(p: PointwiseProgram, op: PrimOp, name: str, index: Index, mask: str) -> str:
    """``x[idx]`` along ``dim``: the index read from ``idx`` at the output's index there (a negative
    one counts from the end, as torch's); an index outside ``x``, which torch reports as a
    device-side assertion, loads nothing and reads 0."""
    a, idx, dim = op.args
    assert isinstance(a, Ref) and isinstance(idx, Ref)
    shape = p.specs[a.name].shape
    d = _static(dim) % len(shape)
    raw = p.value(idx.name, (index[d],), mask)
    size = p.size(shape[d])
    at = p.named_index(f"tl.where({raw} < 0, {raw} + {size}, {raw}).to(tl.int64)", index[d])
    inside = p.mask_name(f"{mask} & ({at} >= 0) & ({at} < {size})")
    return p.value(a.name, (*index[:d], at, *index[d + 1 :]), inside)


#: the most elements a reduced row may exceed the outputs' row by and still reduce in a tail
TAIL_LIMIT = 16


def _excess(width, size) -> int | None:
    """How many elements longer than ``width`` a reduced row of ``size`` is, where that is a
    constant from 1 to TAIL_LIMIT whatever the bucket's sizes (``S + 1`` against ``S``), else None."""
    if isinstance(width, int) and isinstance(size, int):
        excess = size - width
    elif (
        isinstance(width, SymDim)
        and isinstance(size, SymDim)
        and (width.name, width.coeff) == (size.name, size.coeff)
    ):
        excess = size.offset - width.offset
    else:
        return None
    return excess if 0 < excess <= TAIL_LIMIT else None


def _reduced_dim(p: PointwiseProgram, op: PrimOp) -> tuple[Ref, int, object]:
    a, dims = op.args[0], op.args[1]
    assert isinstance(a, Ref) and isinstance(dims, Seq)
    if len(dims.items) != 1:
        raise Unsupported("a reduction over several dims")
    shape = p.specs[a.name].shape
    dim = _static(dims.items[0]) % len(shape)
    return a, dim, shape[dim]


def _reduce(p: PointwiseProgram, op: PrimOp, name: str, index: Index, mask: str) -> str:
    """sum / amax / amin over one dim: the operand across the row's lanes, reduced to a [rows, 1]
    column (the tile's lanes and a tail's, each reduced, then combined: PointwiseProgram.lanes)."""
    a, dim, size = _reduced_dim(p, op)
    fn, identity = REDUCE_IDENTITY[op.prim]
    parts = [
        f"{fn}(tl.where({lanes}, {p.value(a.name, inner, lanes)}, {identity}), axis=1, keep_dims=True)"
        for inner, lanes in p.lanes(op, index, dim, size)
    ]
    text = parts[0]
    for part in parts[1:]:
        text = REDUCE_COMBINE[fn].format(text, part)
    return text


def _var_mean(p: PointwiseProgram, op: PrimOp, name: str, index: Index, mask: str) -> str:
    """(var, mean) over one dim, two passes over the lanes (as the row kernel)."""
    a, dim, size = _reduced_dim(p, op)
    ((inner, lanes),) = p.lanes(op, index, dim, size)
    var, mean = op.outputs
    x = p.value(a.name, inner, lanes)
    if name == mean.name:
        return f"tl.sum(tl.where({lanes}, {x}, 0.0), axis=1, keep_dims=True) / {size}"
    correction = dict(op.kwargs)["correction"].value
    centered = p.value(mean.name, index, mask)
    return (
        f"tl.sum(tl.where({lanes}, ({x} - {centered}) * ({x} - {centered}), 0.0), axis=1, keep_dims=True)"
        f" / {size - correction}"
    )


#: prim name -> the function that writes its value at an index. A prim missing here keeps its
#: region out of this kernel.
POINTWISE_OPS: dict[str, Lower] = {
    **{name: _unary(template) for name, template in UNARY.items()},
    **{name: _binary(f"{{}} {operator} {{}}") for name, operator in BINARY.items()},
    **{name: _compare(operator) for name, operator in COMPARISONS.items()},
    "div": _div,
    "fmod": _fmod,
    "signbit": _signbit,
    "iota": _iota,
    "pow": _pow,
    # torch.maximum / minimum propagate NaN (tl.maximum's default does not)
    "maximum": _binary("tl.maximum({}, {}, propagate_nan=tl.PropagateNan.ALL)"),
    "minimum": _binary("tl.minimum({}, {}, propagate_nan=tl.PropagateNan.ALL)"),
    "where": _where,
    "convert_element_type": _convert,
    "shallow_copy": _same,
    "broadcast_in_dim": _broadcast_in_dim,
    "transpose": _transpose,
    "reshape": _reshape,
    "squeeze": _squeeze,
    "slice": _slice,
    "cat": _cat,
    "take": _take,
    **{name: _reduce for name in REDUCE_IDENTITY},
    "var_mean": _var_mean,
}
