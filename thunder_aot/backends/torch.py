"""torch backend: every region as the user's own torch calls, the ones Thunder recorded before
decomposing them (eager's numerics and eager's kernels, without the modules' Python around them),
or, where those are unknown, as one torch call per prim. Runs anywhere torch runs (CI proves the
whole pipeline with it on CPU). The prim table serves that last case and the other backends'
regions that make no kernel and have no source calls."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from thunder_aot.backends.base import (
    Backend,
    Line,
    render_arg,
    render_dim,
    source_comments,
    torch_call_line,
)
from thunder_aot.ir import Const, DimRange, PrimOp, Ref, Region, Seq, TensorSpec

INTEGER_DTYPES = {"int8", "int16", "int32", "int64", "uint8", "bool"}


@dataclass
class OpContext:
    """What a table row may look at: the op, its rendered args, and the specs of values so far."""

    op: PrimOp
    args: list[str]
    kwargs: dict[str, str]
    specs: dict[str, TensorSpec]

    def spec(self, i: int) -> TensorSpec:
        arg = self.op.args[i]
        assert isinstance(arg, Ref)
        return self.specs[arg.name]

    def is_tensor(self, i: int) -> bool:
        return isinstance(self.op.args[i], Ref)

    @property
    def out_dtype(self) -> str:
        return self.op.outputs[0].spec.dtype


def _fn(name: str) -> Callable[[OpContext], str]:
    return lambda c: f"{name}({', '.join(c.args)})"


def _binary(operator: str | None, fn: str) -> Callable[[OpContext], str]:
    def row(c: OpContext) -> str:
        if operator is not None:
            return f"{c.args[0]} {operator} {c.args[1]}"
        return f"{fn}({c.args[0]}, {c.args[1]})"

    return row


def _div(c: OpContext) -> str:
    if c.out_dtype in INTEGER_DTYPES:
        return f'torch.div({c.args[0]}, {c.args[1]}, rounding_mode="trunc")'
    return f"{c.args[0]} / {c.args[1]}"


def _minmax(fn: str, clamp: str) -> Callable[[OpContext], str]:
    def row(c: OpContext) -> str:
        if c.is_tensor(0) and c.is_tensor(1):
            return f"{fn}({c.args[0]}, {c.args[1]})"
        tensor, scalar = (0, 1) if c.is_tensor(0) else (1, 0)
        return f"{c.args[tensor]}.clamp({clamp}={c.args[scalar]})"

    return row


def _broadcast_in_dim(c: OpContext) -> str:
    """``a`` placed at ``broadcast_dims`` of ``shape``: a view adding the size-1 dims, then expand."""
    in_shape = c.spec(0).shape
    shape_arg, bdims_arg = c.op.args[1], c.op.args[2]
    assert isinstance(shape_arg, Seq) and isinstance(bdims_arg, Seq)
    bdims = [int(b.value) for b in bdims_arg.items if isinstance(b, Const)]
    out = [render_arg(s) for s in shape_arg.items]
    view = ["1"] * len(out)
    for src, dst in enumerate(bdims):
        view[dst] = render_dim(in_shape[src])
    text = c.args[0]
    if len(in_shape) != len(out):
        text = f"{text}.view({', '.join(view)})"
    if view != out:
        text = f"{text}.expand({', '.join(out)})"
    return text


def _slice(c: OpContext) -> str:
    starts, ends = c.op.args[1], c.op.args[2]
    steps = c.op.args[3] if len(c.op.args) > 3 else Const(None)
    assert isinstance(starts, Seq) and isinstance(ends, Seq)
    step_items = steps.items if isinstance(steps, Seq) else [Const(1)] * len(starts.items)
    spec = c.spec(0)
    parts = []
    for start, end, step, size in zip(starts.items, ends.items, step_items, spec.shape):
        s, e, st = render_arg(start), render_arg(end), render_arg(step)
        full = s == "0" and e == render_dim(size) and st in ("1", "None")
        parts.append(":" if full else f"{s}:{e}" + ("" if st in ("1", "None") else f":{st}"))
    return f"{c.args[0]}[{', '.join(parts)}]"


def _iota(c: OpContext) -> str:
    length = c.args[0]
    start, step = c.kwargs["start"], c.kwargs["step"]
    return (
        f"torch.arange({start}, {start} + {step} * {length}, {step}, "
        f"device={c.kwargs['device']}, dtype={c.kwargs['dtype']})"
    )


def _take(c: OpContext) -> str:
    """``x[idx]`` at dim 0, ``x[:, idx]`` at dim 1, ... (negative indices count from the end)."""
    dim = c.op.args[2].value
    return f"{c.args[0]}[{':, ' * dim}{c.args[1]}]"


_UNARY = {
    name: _fn(f"torch.{name}")
    for name in (
        "abs acos acosh asin asinh atan atanh bitwise_not ceil cos cosh digamma erf erfc erfinv exp exp2 "
        "expm1 floor isfinite lgamma log log10 log1p log2 neg reciprocal round rsqrt sign signbit sin "
        "sinh sqrt tan tanh trunc"
    ).split()
}

#: prim name -> Python text for its result. One row per prim; a prim missing here is not fused.
TORCH_PRIMS: dict[str, Callable[[OpContext], str]] = {
    **_UNARY,
    "add": _binary("+", "torch.add"),
    "sub": _binary("-", "torch.sub"),
    "mul": _binary("*", "torch.mul"),
    "div": _div,
    "pow": _binary("**", "torch.pow"),
    "eq": _binary("==", "torch.eq"),
    "ne": _binary("!=", "torch.ne"),
    "lt": _binary("<", "torch.lt"),
    "le": _binary("<=", "torch.le"),
    "gt": _binary(">", "torch.gt"),
    "ge": _binary(">=", "torch.ge"),
    "bitwise_and": _binary("&", "torch.bitwise_and"),
    "bitwise_or": _binary("|", "torch.bitwise_or"),
    "bitwise_xor": _binary("^", "torch.bitwise_xor"),
    "fmod": _fn("torch.fmod"),
    "remainder": _fn("torch.remainder"),
    "atan2": _fn("torch.atan2"),
    "maximum": _minmax("torch.maximum", "min"),
    "minimum": _minmax("torch.minimum", "max"),
    "where": _fn("torch.where"),
    "convert_element_type": lambda c: f"{c.args[0]}.to({c.args[1]})",
    "shallow_copy": lambda c: c.args[0],
    "broadcast_in_dim": _broadcast_in_dim,
    "reshape": lambda c: f"{c.args[0]}.reshape({c.args[1]})",
    "transpose": lambda c: f"{c.args[0]}.permute({c.args[1]})",
    "squeeze": lambda c: f"{c.args[0]}.squeeze({c.args[1]})",
    "flip": lambda c: f"torch.flip({c.args[0]}, {c.args[1]})",
    "slice": _slice,
    "cat": lambda c: f"torch.cat({c.args[0]}, {c.args[1]})",
    "sum": lambda c: f"torch.sum({c.args[0]}, {c.args[1]})",
    "amax": lambda c: f"torch.amax({c.args[0]}, {c.args[1]})",
    "amin": lambda c: f"torch.amin({c.args[0]}, {c.args[1]})",
    "var": lambda c: f"torch.var({c.args[0]}, {c.args[1]}, correction={c.kwargs['correction']})",
    "var_mean": lambda c: f"torch.var_mean({c.args[0]}, {c.args[1]}, correction={c.kwargs['correction']})",
    "full": lambda c: (
        f"torch.full({c.args[0]}, {c.args[1]}, device={c.kwargs['device']}, dtype={c.kwargs['dtype']})"
    ),
    "iota": _iota,
    "take": _take,
    "topk": lambda c: f"torch.topk({c.args[0]}, {c.args[1]})",
}

#: prims the exporter's own passes put into regions (never a fusion's claim: Thunder's regions form
#: without them)
PASS_PRIMS = frozenset({"take", "topk"})


@dataclass(frozen=True)
class TorchRegionView:
    """A region run as torch calls, written inline in ``forward`` (nothing at module level)."""

    name: str
    steps: tuple[Line, ...]
    #: the user's source-level calls (a fallback), not the region's prims
    source_level: bool = False
    template = ""
    runs_kernel = False
    definition_key = None

    def sharing(self, name: str) -> TorchRegionView:
        return self


class TorchBackend(Backend):
    name = "torch"
    prims = frozenset(TORCH_PRIMS) - PASS_PRIMS
    slices_region_inputs = True

    def region_view(
        self, region: Region, dims: tuple[DimRange, ...] = (), known_sizes: tuple[dict[str, int], ...] = ()
    ) -> TorchRegionView:
        """The region as its source's torch calls; as its prims where those are unknown. (Its prims
        would round every intermediate to the region's dtype: a bf16 GELU written as Thunder's prims
        rounds ten times where eager rounds once.)"""
        return self.source_view(region, dims)

    def prim_view(self, region: Region, dims: tuple[DimRange, ...] = ()) -> TorchRegionView:
        """The region as one torch call per prim."""
        specs = {v.name: v.spec for v in region.inputs}
        lines = []
        for op, comment in zip(region.ops, source_comments(region.ops)):
            ctx = OpContext(
                op=op,
                args=[render_arg(a) for a in op.args],
                kwargs={k: render_arg(v) for k, v in op.kwargs},
                specs=specs,
            )
            targets = ", ".join(o.name for o in op.outputs)
            lines.append(Line(f"{targets} = {TORCH_PRIMS[op.prim](ctx)}", comment))
            for o in op.outputs:
                specs[o.name] = o.spec
        return TorchRegionView(name=region.name, steps=tuple(lines))  # `device`: the program's (codegen)

    def source_view(self, region: Region, dims: tuple[DimRange, ...] = ()) -> TorchRegionView:
        """The region as the torch calls it came from (as many as the user's code makes, never one
        per prim), for a backend that cannot make it a kernel; as its prims where those are unknown."""
        if not region.source_calls:
            return self.prim_view(region, dims)
        comments = source_comments(region.source_calls)
        lines = [torch_call_line(call, comment) for call, comment in zip(region.source_calls, comments)]
        return TorchRegionView(name=region.name, steps=tuple(lines), source_level=True)
