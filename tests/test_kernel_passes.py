"""The passes the Triton backend's kernels decide: gathers into kernels (passes.move_gathers_into_kernels:
``x[idx]``
that only regions read becomes a ``take`` in each of them, one kernel less per gather), joined
regions (passes.join_regions: a region into the region that first reads it, where one kernel does both)
and copies (passes.copies_as_kernels: a copy of a permuted view a kernel, calls that copy nothing dropped);
the modules still compute what their sources do (under Triton's interpreter, outputs poisoned, at
every bucket's edges and inside, non-finite inputs included)."""

from __future__ import annotations

import re

import pytest
import torch

from tests.helpers import interpreted_check
from tests.kernel_pass_modules import COPIES, GATHERS, JOINS, ROUTINGS, TOPKS, VIEWS
from thunder_aot.backends.torch import TORCH_PRIMS, OpContext
from thunder_aot.ir import TensorSpec, Value
from thunder_aot.passes.move_gathers_into_kernels import take_op

IDS = [g[0].split(":")[1] for g in GATHERS]
#: a gather left to torch: ``x[idx]`` by a tensor (not ``x[(slice(...), 0)]``)
_GATHER = re.compile(r"torch\.Tensor\.__getitem__\(\w+, \w+\)")


def _text(source: str, shapes: str, backend: str) -> str:
    from thunder_aot.pipeline import export
    from thunder_aot.request import ExportRequest

    return export(ExportRequest(source, (shapes,), backend=backend), verify=False)


def _forward(text: str) -> str:
    return text[text.index("\ndef forward(") :]


def _code(text: str) -> str:
    """The lines of generated code, without its comments (which quote the source's calls)."""
    return "\n".join(line for line in text.splitlines() if not line.strip().startswith("#"))


@pytest.mark.traces
@pytest.mark.parametrize("source,shapes,left", GATHERS, ids=IDS)
def test_gathers_only_regions_read_load_inside_their_kernels(source, shapes, left):
    triton = _text(source, shapes, "triton")
    assert len(_GATHER.findall(_forward(triton))) == left
    if left == 0:
        assert "tl.where(" in triton and " < 0, " in triton  # the kernel wraps negative indices as torch does
    # the torch backend keeps its gathers (its regions are torch calls already)
    assert len(_GATHER.findall(_forward(_text(source, shapes, "torch")))) >= 1


@pytest.mark.traces
@pytest.mark.parametrize("source,shapes,joined,apart", JOINS, ids=[j[0].split(":")[1] for j in JOINS])
def test_a_region_joins_the_region_that_first_reads_it_unless_that_recomputes_a_reduction(
    source, shapes, joined, apart, monkeypatch
):
    from thunder_aot.backends.triton import TritonBackend

    assert _text(source, shapes, "triton").count("@triton.jit") == joined
    monkeypatch.setattr(TritonBackend, "joins_regions", False)
    assert _text(source, shapes, "triton").count("@triton.jit") == apart


@pytest.mark.traces
def test_the_reduction_rule_is_what_keeps_a_gathered_reduction_apart(monkeypatch):
    """norm_through_gather's regions stay apart because its reader gathers a reduction's rows: the
    backend could make one kernel of them (recomputing each row's sum per gathered row)."""
    import thunder_aot.passes.join_regions as join

    source, shapes, joined, _ = next(j for j in JOINS if "norm_through_gather" in j[0])
    monkeypatch.setattr(join, "REDUCTIONS", frozenset())
    assert _text(source, shapes, "triton").count("@triton.jit") == joined - 1


@pytest.mark.traces
@pytest.mark.parametrize(
    "source,shapes",
    [g[:2] for g in GATHERS + JOINS + COPIES + VIEWS + TOPKS],
    ids=IDS + [j[0].split(":")[1] for j in JOINS + COPIES + VIEWS + TOPKS],
)
def test_the_passes_kernels_match_their_source_under_the_interpreter(source, shapes):
    result = interpreted_check(source, shapes)
    assert result.returncode == 0, result.stderr[-3000:]
    messages = [line for line in result.stdout.splitlines() if line.startswith("export: ")]
    assert not [m for m in messages if "no triton kernel" in m], messages
    assert result.stdout.splitlines()[-1].startswith("ok ")


@pytest.mark.parametrize("dim", [0, 1])
def test_the_torch_row_of_take_indexes_like_getitem(dim):
    """A region with a take that runs as one torch call per prim (no source calls) gathers as ``x[idx]``
    does, negative indices included."""
    x = torch.randn(5, 6, generator=torch.Generator().manual_seed(0))
    idx = torch.tensor([4, -1, 0, 2, -5])
    out = Value("out", TensorSpec((5, 6), "float32"))
    op = take_op(out, "x", "idx")
    op = type(op)(op.prim, op.outputs, (*op.args[:2], type(op.args[2])(dim)))
    text = TORCH_PRIMS["take"](OpContext(op=op, args=["x", "idx"], kwargs={}, specs={}))
    expected = x[idx] if dim == 0 else x[:, idx]
    torch.testing.assert_close(eval(text, {"x": x, "idx": idx}), expected, rtol=0, atol=0)


def test_a_slice_argument_of_a_torch_call_generalises_and_renders_as_python():
    """``x[:, :k]`` left to torch: its slice is an argument whose bounds follow the dynamic dims as
    any integer argument does, written back as ``slice(...)``."""
    from thunder_aot.backends.base import render_arg
    from thunder_aot.frontend.generalize import _unify
    from thunder_aot.ir import Const, Ref, Seq, SizeArg, SliceArg, SymDim, TorchCall

    def call(stop: int) -> TorchCall:
        key = Seq((SliceArg(Const(None), Const(stop - 1), Const(None)), Const(0)))
        return TorchCall("torch.Tensor.__getitem__", (), (Ref("x"), key))

    general = _unify([call(5), call(9)], [{"S": 5}, {"S": 9}], "test")
    key = general.args[1]
    assert key.items[0] == SliceArg(Const(None), SizeArg(SymDim("S", 1, -1)), Const(None))
    x = torch.arange(40.0).reshape(8, 5)
    assert eval(render_arg(key), {"S": 8}) == (slice(None, 7, None), 0)
    torch.testing.assert_close(x[eval(render_arg(key), {"S": 8})], x[:7, 0])


@pytest.mark.traces
@pytest.mark.parametrize("source,shapes,sorts", ROUTINGS, ids=["fits", "too_long", "written_after_topk"])
def test_routing_bookkeeping_is_one_program_where_the_sort_fits(source, shapes, sorts):
    """The sort of top-k ids, histc, cumsum and the inverse permutation: one kernel of one program
    (the ids bounded by the expert count: keys id * BLOCK + position); past 8192 ids, or with the
    ids written in place after topk, torch's calls. The torch backend keeps torch's calls."""
    forward = _code(_forward(_text(source, shapes, "triton")))
    assert forward.count("torch.sort(") == sorts
    for call in ("torch.histc(", "torch.cumsum("):
        assert (call in forward) == bool(sorts), call
    if not sorts:
        assert "torch.index_put(" not in forward
    assert ("_routing.launch(" in forward) == (not sorts)
    assert "torch.sort(" in _code(_forward(_text(source, shapes, "torch")))


@pytest.mark.traces
def test_routing_matches_its_source_under_the_interpreter():
    """The routing program's outputs (offsets, counts, the rows put back by the inverse
    permutation) match the source at every bucket edge and inside, outputs poisoned."""
    source, shapes, _ = ROUTINGS[0]
    result = interpreted_check(source, shapes)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.splitlines()[-1].startswith("ok ")


@pytest.mark.traces
@pytest.mark.parametrize("source,shapes,kernels,calls", COPIES, ids=[c[0].split(":")[1] for c in COPIES])
def test_copies_of_permuted_views_are_kernels_and_copies_of_nothing_go(source, shapes, kernels, calls):
    """Eager attention's ``transpose(1, 2).contiguous()`` of a matmul's result is a kernel and its
    ``reshape(...).contiguous()`` goes; a copy that a norm reads is in the norm's kernel; sdpa's
    output (laid out so that on the GPU the copy copies nothing) keeps its torch calls. The torch
    backend keeps each real copy as a call, and drops the one that copies nothing."""
    from thunder_aot.backends import get_backend
    from thunder_aot.ir import Region, TorchCall
    from thunder_aot.pipeline import build_program, regions_without_kernels
    from thunder_aot.request import ExportRequest

    program, _, _ = build_program(ExportRequest(source, (shapes,), backend="triton"), progress=lambda m: None)
    assert not regions_without_kernels(program, get_backend("triton"))
    for bp in program.programs:
        assert [s.target for s in bp.steps if isinstance(s, TorchCall)] == calls
        assert len([s for s in bp.steps if isinstance(s, Region)]) == kernels
    program, _, _ = build_program(ExportRequest(source, (shapes,), backend="torch"), progress=lambda m: None)
    copies = [
        s.target
        for s in program.programs[0].steps
        if isinstance(s, TorchCall) and s.target.endswith("contiguous")
    ]
    assert len(copies) == 1, copies


@pytest.mark.traces
@pytest.mark.parametrize("source,shapes,returned", VIEWS, ids=[v[0].split(":")[1] for v in VIEWS])
def test_a_transposed_output_only_matmuls_read_is_stored_untransposed(source, shapes, returned, monkeypatch):
    """The rotary region's transposed keys, which only the scores' matmul reads, are stored in the
    order the kernel computes them (tokens, then dims: loads and stores walk the same dims) and the
    matmul reads a ``torch.permute`` view of them, as eager reads ``k.transpose(2, 3)``; where the
    module also returns the rotated keys, the kernel writes them once, for both."""
    from thunder_aot.backends.triton import TritonBackend
    from thunder_aot.ir import Region, TorchCall
    from thunder_aot.pipeline import build_program
    from thunder_aot.request import ExportRequest

    def built():  # the bucket's program
        program, _, _ = build_program(
            ExportRequest(source, (shapes,), backend="triton"), progress=lambda m: None
        )
        return program.programs[0]

    program = built()
    (region,) = [s for s in program.steps if isinstance(s, Region) and any(op.prim == "cat" for op in s.ops)]
    calls = [s for s in program.steps if isinstance(s, TorchCall)]
    (view,) = [c for c in calls if c.target == "torch.permute"]
    made = {o.name: o for o in region.outputs}
    assert view.args[0].name in made and len(region.outputs) == 1  # the keys, once
    assert (view.args[0].name in program.outputs) == returned
    assert [d if isinstance(d, int) else d.name for d in made[view.args[0].name].spec.shape] == [
        1,
        2,
        "S",
        32,
    ]
    matmul = next(c for c in calls if c.target == "torch.matmul")
    assert view.outputs[0].name in {a.name for a in matmul.args if hasattr(a, "name")}
    monkeypatch.setattr(TritonBackend, "views_for_strided_readers", False)
    assert "torch.permute" not in {s.target for s in built().steps if isinstance(s, TorchCall)}


@pytest.mark.traces
@pytest.mark.parametrize("source,shapes,kernel", TOPKS, ids=[t[0].split(":")[1] for t in TOPKS])
def test_a_routers_top_k_is_a_kernel_unless_the_module_returns_its_picks(source, shapes, kernel):
    """``torch.topk`` over the experts' logits is a region of one ``topk`` (passes.topk_as_regions) that the
    Triton backend makes one kernel, handing its picks to a watching verification; a module that
    returns its picks keeps torch's call (their order among ties is torch's own); the torch backend
    keeps the call."""
    from thunder_aot.ir import Region, TorchCall
    from thunder_aot.pipeline import build_program
    from thunder_aot.request import ExportRequest

    def steps(backend):
        program, _, _ = build_program(
            ExportRequest(source, (shapes,), backend=backend), progress=lambda m: None
        )
        return program.programs[0].steps

    triton = steps("triton")
    calls = {s.target for s in triton if isinstance(s, TorchCall)}
    regions = [s for s in triton if isinstance(s, Region) and s.ops[0].prim == "topk"]
    assert ("torch.topk" not in calls and len(regions) == 1) == kernel, calls
    text = _text(source, shapes, "triton")
    assert ("CHOICES[-1].append(" in text) == kernel and ("torch.topk(" in _forward(_code(text))) != kernel
    assert "torch.topk" in {s.target for s in steps("torch") if isinstance(s, TorchCall)}


def _call(target: str, out: str, out_dtype: str, *args, **kwargs):
    from thunder_aot.ir import TorchCall

    return TorchCall(target, (Value(out, TensorSpec((4, 8), out_dtype)),), args, tuple(kwargs.items()))


def test_calls_that_copy_nothing_are_dropped_and_their_readers_read_the_argument():
    """``x.to(its own dtype)`` goes, a cast, ``copy=True`` and a device move stay; ``contiguous()``
    goes after ``contiguous()`` (or a reshape of one) and stays on an input, whose layout the
    caller decides; a call whose value the program returns stays."""
    from thunder_aot.ir import Bucket, BucketProgram, Const, DeviceArg, DType, Ref, TorchName
    from thunder_aot.passes.drop_no_op_calls import drop_no_op_calls

    fmt = TorchName("torch.contiguous_format")
    steps = (
        _call("torch.Tensor.to", "a", "float32", Ref("x"), dtype=DType("float32"), copy=Const(False)),
        _call("torch.Tensor.to", "b", "float32", Ref("a"), DType("float32")),
        _call("torch.Tensor.to", "c", "bfloat16", Ref("b"), dtype=DType("bfloat16")),
        _call("torch.Tensor.to", "d", "float32", Ref("b"), dtype=DType("float32"), copy=Const(True)),
        _call("torch.Tensor.to", "e", "float32", Ref("d"), DeviceArg(), dtype=DType("float32")),
        _call("torch.Tensor.contiguous", "f", "float32", Ref("x"), memory_format=fmt),
        _call("torch.reshape", "g", "float32", Ref("f"), Const((4, 8))),
        _call("torch.Tensor.contiguous", "h", "float32", Ref("g"), memory_format=fmt),
        _call("torch.Tensor.contiguous", "i", "float32", Ref("h")),
        _call("torch.add", "j", "float32", Ref("b"), Ref("i")),
        _call("torch.Tensor.to", "k", "float32", Ref("j"), dtype=DType("float32")),
    )
    x = Value("x", TensorSpec((4, 8), "float32"))
    program = BucketProgram(0, Bucket((x.spec,)), (x,), steps, ("c", "e", "k"))
    kept = drop_no_op_calls(program, lambda region: set())
    assert [s.outputs[0].name for s in kept.steps] == ["c", "d", "e", "f", "g", "j", "k"]
    by_name = {s.outputs[0].name: s for s in kept.steps}
    assert by_name["c"].args[0] == Ref("x") and by_name["d"].args[0] == Ref("x")
    assert by_name["j"].args == (Ref("x"), Ref("g"))
    assert kept.outputs == ("c", "e", "k")
