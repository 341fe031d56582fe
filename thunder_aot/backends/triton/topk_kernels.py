"""Lowering of a ``topk`` region (passes.topk_as_regions) as one kernel: each program takes a tile of rows
of the input's last dim, and picks k times the largest value left in each row.

torch.topk's order: NaN above every number; among equal values (-0.0 and 0.0 apart) the lowest
index first, one of the orders torch's unstable selection may give, which export's verification
judges as it judges any pick (``verify.judge``: against the float64 run that picks as the module
did). Each float is compared as an integer key that orders as the floats do (its bits, the lower
31 flipped where the sign is set; every NaN the largest key), so that a pass is two integer
reductions: the row's largest key, then the lowest lane holding it. The value stored is the key's
float, NaNs and signed zeros as they were.
"""

from __future__ import annotations

from thunder_aot.backends.base import Line, render_dim
from thunder_aot.backends.triton.launch import TritonRegionView, numel_text
from thunder_aot.backends.triton.op_tables import TL_DTYPES, Unsupported
from thunder_aot.backends.triton.schedule import schedule
from thunder_aot.ir import Const, DimRange, Ref, Region

#: the floats whose values compare exactly as float32 bits (a 16-bit float widens exactly)
_FLOATS = frozenset({"float32", "bfloat16", "float16"})


def topk_view(region: Region, dims: tuple[DimRange, ...], allocation) -> TritonRegionView:
    """The kernel of a region of one ``topk`` prim (``allocation``: the backend's output allocation line)."""
    if len(region.ops) != 1 or region.ops[0].prim != "topk" or len(region.inputs) != 1:
        raise Unsupported("a topk region is one topk")
    op = region.ops[0]
    (source,) = region.inputs
    x, k = op.args
    assert isinstance(x, Ref) and isinstance(k, Const)
    values, indices = op.outputs
    width = source.spec.shape[-1]
    if not isinstance(width, int) or source.spec.dtype not in _FLOATS:
        raise Unsupported("a topk over a dynamic or non-float row")
    ranges = {d.name: d for d in dims}
    rows_upper = 1
    for d in source.spec.shape[:-1]:
        if isinstance(d, int):
            rows_upper *= d
        elif d.name in ranges:
            rows_upper *= d.at({d.name: ranges[d.name].hi})
        else:
            rows_upper = None
            break
    plan = schedule(width, rows_upper)
    if plan.looped:
        raise Unsupported("a topk over a row wider than a tile")
    r = plan.rows
    body = [
        Line(f"row = tl.program_id(0).to(tl.int64) * {r} + tl.arange(0, {r})[:, None]"),
        Line("cols = tl.arange(0, BLOCK)[None, :]"),
        Line("inside = (row < _rows) & (cols < N)"),
        Line(
            f"x = tl.load({source.name}_ptr + row * N + cols, mask=inside, other=0).to(tl.float32)",
            op.source.comment() if op.source else "",
        ),
        Line("bits = x.to(tl.int32, bitcast=True)"),
        Line(
            "# an integer key per float that orders as the floats do, every NaN the largest; "
            "-(2**31 - 1) none"
        ),
        Line("key = tl.where(x != x, 0x7FFFFFFF, tl.where(bits < 0, bits ^ 0x7FFFFFFF, bits))"),
        Line("key = tl.where(inside, key, -0x7FFFFFFF)"),
        Line(f"for j in tl.static_range({k.value}):"),
        Line("    best = tl.max(key, axis=1, keep_dims=True)"),
        Line("    at = tl.min(tl.where(key == best, cols, BLOCK), axis=1, keep_dims=True)"),
        Line("    value = tl.where(best < 0, best ^ 0x7FFFFFFF, best).to(tl.float32, bitcast=True)"),
        Line(
            f"    tl.store({values.name}_out_ptr + row * {k.value} + j, "
            f"value.to({TL_DTYPES[values.spec.dtype]}), mask=row < _rows)"
        ),
        Line(
            f"    tl.store({indices.name}_out_ptr + row * {k.value} + j, at.to(tl.int64), mask=row < _rows)"
        ),
        Line("    key = tl.where(cols == at, -0x7FFFFFFF, key)"),
    ]
    lead = [render_dim(d) for d in source.spec.shape[:-1]]
    allocations = tuple(
        allocation(o.name, [*lead, str(k.value)], o.spec.dtype, source.name) for o in (values, indices)
    )
    return TritonRegionView(
        name=region.name,
        decorator='@triton.jit(do_not_specialize=["_rows"])',
        params=(source.name,),
        kernel_params=(f"{source.name}_ptr", f"{values.name}_out_ptr", f"{indices.name}_out_ptr", "_rows"),
        n_param="N: tl.constexpr",
        body=tuple(body),
        schedule_note=plan.note(width).replace("persistent", f"top {k.value}", 1),
        programs=f"(_rows + {r - 1}) // {r}" if r > 1 else "_rows",
        row_count=(Line(f"_rows = {numel_text(source.spec.shape[:-1])}"),),
        allocations=allocations,
        launch_args=(source.name, values.name, indices.name, "_rows"),
        n=str(width),
        block=plan.block,
        num_warps=plan.num_warps,
        recorded=(indices.name,),
    )
