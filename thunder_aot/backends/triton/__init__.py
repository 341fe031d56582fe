"""Triton backend: a region of pointwise ops and reductions over the innermost dim becomes one
``@triton.jit`` kernel over rows of the innermost dim (narrow rows several to a program).

Regions outside that class (other reductions, shape ops, ops the table lacks) are rendered by the
torch backend instead, so correctness never depends on coverage. Rows up to MAX_BLOCK lanes stay in
registers (persistent schedule); wider rows are walked in chunks (looped schedule): ``schedule()``.

Checked on CPU through Triton's interpreter (``TRITON_INTERPRET=1``) and on the GPU machine
(tests/test_gpu.py: numerics with poisoned outputs, CUDA graphs, compute-sanitizer memcheck).

The backend (:class:`TritonBackend`, here) picks a kernel per region from its modules: ``row_kernels``
(:class:`RowProgram`), ``index_kernels`` (:class:`PointwiseProgram`, with the mask and index
arithmetic of ``index_math``), ``routing_kernels`` and ``topk_kernels``; ``op_tables`` holds the
translation tables they share, ``schedule`` the launch shapes, ``launch`` the region as codegen sees
it, ``interpreter`` the CPU checks' patch of Triton's interpreter.
"""

from __future__ import annotations

import os

import torch

from thunder_aot.backends.base import Backend, Line, render_dim, source_comments, tuple_text
from thunder_aot.backends.torch import TorchBackend, TorchRegionView
from thunder_aot.backends.triton.index_kernels import BLOCK as POINTWISE_BLOCK
from thunder_aot.backends.triton.index_kernels import NUM_WARPS as POINTWISE_WARPS
from thunder_aot.backends.triton.index_kernels import PointwiseProgram
from thunder_aot.backends.triton.interpreter import interpreter_rounds_like_the_gpu
from thunder_aot.backends.triton.launch import TritonRegionView, contiguous_strides, numel_text
from thunder_aot.backends.triton.op_tables import MOVES, TL_DTYPES, Unsupported
from thunder_aot.backends.triton.routing_kernels import RoutingProgram
from thunder_aot.backends.triton.row_kernels import Expr, Kind, RowProgram
from thunder_aot.backends.triton.schedule import MOVE_WARPS
from thunder_aot.backends.triton.topk_kernels import topk_view
from thunder_aot.ir import DimRange, DType, Region


class TritonBackend(Backend):
    name = "triton"
    prims = TorchBackend.prims  # regions form as for the other backends; the kernel decides per region
    # the runtime first: without Triton its import error says what to install
    #: runtime.triton's names every module with kernels reads, and the helpers its kernels may call
    #: (imported where one does)
    runtime_names = (
        "INTERPRET",
        "Kernel",
        "current_device",
        "eager_device",
        "empty_strided_cuda",
        "raw_stream",
    )
    kernel_helpers = (
        "math_expm1",
        "math_log1p",
        "math_round",
        "math_sign",
        "math_tanh",
        "math_trunc",
        "nan_max",
        "nan_min",
    )
    imports = (
        f"from thunder_aot.runtime.triton import {', '.join(sorted(runtime_names + kernel_helpers))}",
        "import triton",
        "import triton.language as tl",
    )
    input_requirement = "{name}.is_contiguous() and ({name}.is_cuda or INTERPRET)"
    input_requirement_text = "a contiguous CUDA tensor"
    supports_autograd = False
    device_per_call = True
    # its kernels load a slice of an input's rows at an offset; a region whose slice they cannot
    # lower runs as its source's torch calls (with a view of the part)
    slices_region_inputs = True
    # its pointwise kernels load an input at the rows an index input names (passes.move_gathers_into_kernels)
    gathers_region_inputs = True
    joins_regions = True
    # its one-program kernels sort bounded ids and count them (passes.fuse_moe_routing)
    fuses_routing = True
    # its kernels write the outputs they allocate, so a copy of a permuted view is a kernel
    # (passes.copies_as_kernels)
    copies_as_kernels = True
    # its kernels store a transposed key as computed; the matmul reads a view
    # (passes.transposed_outputs_as_views)
    views_for_strided_readers = True
    # a router's top-k is one kernel (passes.topk_as_regions, backends/triton/topk_kernels.py)
    fuses_topk = True

    def __init__(self) -> None:
        self.torch = TorchBackend()

    def imports_for(self, definitions) -> tuple[str, ...]:
        called = {
            h for d in definitions for line in d.body for h in self.kernel_helpers if f"{h}(" in line.code
        }
        return (
            f"from thunder_aot.runtime.triton import {', '.join(sorted({*self.runtime_names, *called}))}",
            *self.imports[1:],
        )

    @property
    def verify_device(self) -> str:
        if os.environ.get("TRITON_INTERPRET") == "1":
            interpreter_rounds_like_the_gpu()
            return "cpu"
        return "cuda"

    def unavailable_reason(self) -> str | None:
        if os.environ.get("TRITON_INTERPRET") == "1":
            return None
        if not torch.cuda.is_available():
            return "no CUDA device (set TRITON_INTERPRET=1 to check kernels on CPU with Triton's interpreter)"
        return None

    def region_view(
        self, region: Region, dims: tuple[DimRange, ...] = (), known_sizes: tuple[dict[str, int], ...] = ()
    ) -> TritonRegionView | TorchRegionView:
        """A row kernel where the region fits rows of its innermost dim; else a pointwise kernel
        over its outputs' elements (views inside); else the torch calls it came from."""
        if not _has_triton_types(region):
            return self.torch.source_view(region, dims)
        if region.ops and region.ops[0].prim == "sort_bounded":  # passes.fuse_moe_routing's region
            try:
                return self._routing_view(region, dims)
            except Unsupported:
                return self.torch.source_view(region, dims)
        if region.ops and region.ops[0].prim == "topk":  # passes.topk_as_regions's region
            try:
                return topk_view(region, dims, _allocation)
            except Unsupported:
                return self.torch.source_view(region, dims)
        try:
            return self._kernel_view(region, dims)
        except Unsupported:
            pass
        try:
            return self._pointwise_view(region, dims)
        except Unsupported:
            return self.torch.source_view(region, dims)

    @staticmethod
    def _pointwise_program(region: Region, dims: tuple[DimRange, ...]):
        """The first of the region's lane dims (PointwiseProgram.lane_dims) that makes a kernel."""
        first_error = None
        for lane_dim in PointwiseProgram.lane_dims(region):
            try:
                prog = PointwiseProgram(region, dims, lane_dim)
                return (prog, *prog.body())
            except Unsupported as e:
                first_error = first_error or e
        raise first_error

    def _pointwise_view(self, region: Region, dims: tuple[DimRange, ...]) -> TritonRegionView:
        prog, body, outputs = self._pointwise_program(region, dims)
        # a region without inputs (torch.arange) allocates on the program's device (codegen defines
        # ``device`` where a region's ops take one)
        first = region.inputs[0].name if region.inputs else None
        kernel_params = [f"{v.name}_ptr" for v in region.inputs] + [
            f"{o.value.name}_out_ptr" for o in outputs
        ]
        launch_args = [v.name for v in region.inputs] + [o.value.name for o in outputs]
        allocations = [
            _allocation(o.value.name, [render_dim(d) for d in o.value.spec.shape], o.value.spec.dtype, first)
            for o in outputs
        ]
        size_params = list(prog.size_params)
        if prog.tiled:  # whole rows of the outputs' innermost dim, several to a program
            plan = prog.plan
            rows = _largest([numel_text(prog.row_shape(o.value.spec.shape)) for o in outputs])
            programs = (
                str(-(-int(rows) // plan.rows)) if rows.isdigit() else f"triton.cdiv({rows}, {plan.rows})"
            )
            n_expr, static, block, warps = str(prog.widest), True, plan.block, plan.num_warps
            note = plan.note(prog.widest) + (
                "" if prog.lane_dim is not None else ", one output element per row"
            )
            if prog.tail:
                note += (
                    f", the reductions' rows {max(prog.tails.values())} longer in a tail of {prog.tail} lanes"
                )
        else:  # a flat range of elements per program
            n_expr = _largest([numel_text(o.value.spec.shape) for o in outputs])
            moves = all(op.prim in MOVES for op in region.ops)
            static, block, warps = n_expr.isdigit(), POINTWISE_BLOCK, MOVE_WARPS if moves else POINTWISE_WARPS
            programs = str(-(-int(n_expr) // block)) if static else f"triton.cdiv({n_expr}, {block})"
            note = f"pointwise: BLOCK={block} elements per program, {warps} warps"
        runtime = [*size_params, *([] if static else ["N"])]
        return TritonRegionView(
            name=region.name,
            decorator=f"@triton.jit(do_not_specialize={runtime!r})" if runtime else "@triton.jit",
            params=tuple(v.name for v in region.inputs),
            kernel_params=(*kernel_params, *size_params),
            n_param="N: tl.constexpr" if static else "N",
            body=tuple(body),
            schedule_note=note,
            programs=programs,
            row_count=(),
            allocations=tuple(allocations),
            launch_args=(*launch_args, *size_params),
            n=n_expr,
            block=block,
            num_warps=warps,
        )

    def _routing_view(self, region: Region, dims: tuple[DimRange, ...]) -> TritonRegionView:
        """One program over the routing region's whole 1-D tensors (backends/triton/routing_kernels.py)."""
        prog = RoutingProgram(region, dims)
        body = prog.body()
        (source,) = region.inputs
        outputs = [o.name for o in region.outputs]
        return TritonRegionView(
            name=region.name,
            decorator='@triton.jit(do_not_specialize=["N"])',
            params=(source.name,),
            kernel_params=(f"{source.name}_ptr", *(f"{o}_out_ptr" for o in outputs)),
            n_param="N",
            body=tuple(body),
            schedule_note=(
                f"one program: the whole sort of N <= {prog.block} in BLOCK={prog.block} lanes, "
                f"{prog.num_warps} warps"
            ),
            programs="1",
            row_count=(),
            allocations=tuple(
                _allocation(o.name, [render_dim(d) for d in o.spec.shape], o.spec.dtype, source.name)
                for o in region.outputs
            ),
            launch_args=(source.name, *outputs),
            n=render_dim(prog.length),
            block=prog.block,
            num_warps=prog.num_warps,
        )

    def _kernel_view(self, region: Region, dims: tuple[DimRange, ...]) -> TritonRegionView:
        prog = RowProgram(region, dims)
        loads, scalar_loads, kernel_params, launch_args = [], [], [], []
        # the rows: an input of the full shape (its shape is the outputs', its numel / N the grid)
        row_input = next(
            (v for v in region.inputs if v.spec.shape == prog.full and v.name not in prog.sliced), None
        )
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
                loads.append(
                    Line(f"{v.name} = tl.load({ptr} + {broadcast or 'row'} * N + cols, mask=mask, other=0.0)")
                )
            prog.exprs[v.name] = Expr(v.name, kind)
            kernel_params.append(ptr)
            launch_args.append(v.name)
        if row_input is None:  # a sliced input: rows of its own width
            row_input = next((v for v in region.inputs if v.name in prog.sliced), None)
        if row_input is None:
            raise Unsupported("no input spans the rows")
        n_expr = str(prog.n) if prog.n is not None else render_dim(row_input.spec.shape[-1])
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
                sizes_text = [
                    *lead,
                    prog.n_text() if prog.n is not None else render_dim(row_input.spec.shape[-1]),
                ]
            else:
                sizes_text = [*lead, "1"] if len(o.spec.shape) == len(prog.full) else list(lead)
            ptr = f"{o.name}_out_ptr"
            allocations.append(_allocation(o.name, sizes_text, o.spec.dtype, row_input.name))
            offset, masked = ("row * N + cols", ", mask=mask") if kind == Kind.ROW else ("row", prog.row_mask)
            stores.append(Line(f"tl.store({ptr} + {offset}, {expr.text}{masked})"))
            kernel_params.append(ptr)
            launch_args.append(o.name)
        plan = prog.plan
        body = (prog.looped_body if plan.looped else prog.persistent_body)(scalar_loads, loads, stores)
        # run-time sizes, passed after the tensors (never specialised on): the bucket's dynamic dims,
        # which the bucket's branch binds from the input shapes before its steps; several rows per
        # program: also the number of rows (the last program's tile runs past it)
        programs = numel_text(row_input.spec.shape[:-1])  # the rows, in the bucket's sizes
        size_params, row_count = list(prog.size_params), ()
        if plan.rows > 1:
            row_count = (Line(f"_rows = {programs}"),)
            size_params.append("_rows")
            programs = f"(_rows + {plan.rows - 1}) // {plan.rows}"
        # a run-time row width N is passed as N_units = N / N_UNIT with the constant N_UNIT, its
        # largest power-of-two divisor up to 16 (runtime.triton.width_unit): the kernel knows N's
        # divisibility, so its rows load and store in vectors; one compiled kernel per unit
        width_units = prog.n is None
        runtime = [*size_params, *(["N_units"] if width_units else [])]
        if width_units:
            body = [
                Line(
                    "N = N_units * N_UNIT", "the row width, a multiple of N_UNIT (aligned rows, vector loads)"
                ),
                *body,
            ]
        return TritonRegionView(
            name=region.name,
            decorator=f"@triton.jit(do_not_specialize={runtime!r})" if runtime else "@triton.jit",
            params=tuple(v.name for v in region.inputs),
            kernel_params=(*kernel_params, *size_params),
            n_param="N: tl.constexpr" if prog.n is not None else "N_units",
            body=tuple(body),
            schedule_note=plan.note(prog.n if prog.n is not None else f"N <= {prog.n_max}"),
            programs=programs,
            row_count=row_count,
            allocations=tuple(allocations),
            launch_args=(*launch_args, *size_params),
            n=n_expr,
            block=plan.block,
            num_warps=plan.num_warps,
            width_units=width_units,
        )


def _allocation(name: str, sizes_text: list[str], dtype: str, like: str | None) -> Line:
    """An output's contiguous allocation: torch's C allocator where forward launches directly
    (``_device >= 0``), else ``torch.empty`` on the device of input ``like`` (None: the program's
    ``device``)."""
    sizes, torch_dtype = tuple_text(sizes_text), f"torch.{dtype}"
    on = "device" if like is None else f"{like}.device"
    return Line(
        f"{name} = empty_strided_cuda({sizes}, {tuple_text(contiguous_strides(sizes_text))}, {torch_dtype}) "
        f"if _device >= 0 else torch.empty({sizes}, dtype={torch_dtype}, device={on})"
    )


def _largest(counts: list[str]) -> str:
    """Python text of the largest of these counts (folded where all are numbers)."""
    if all(c.isdigit() for c in counts):
        return str(max(int(c) for c in counts))
    return counts[0] if len(set(counts)) == 1 else f"max({', '.join(dict.fromkeys(counts))})"


def _has_triton_types(region: Region) -> bool:
    """Whether every tensor the region reads or makes, and every dtype it converts to, has a Triton
    type (:data:`TL_DTYPES`; float8 and uint8 do not)."""
    values = [*region.inputs, *(v for op in region.ops for v in op.outputs)]
    args = [a for op in region.ops for a in (*op.args, *(v for _, v in op.kwargs))]
    dtypes = {v.spec.dtype for v in values} | {a.name for a in args if isinstance(a, DType)}
    return dtypes <= TL_DTYPES.keys()
