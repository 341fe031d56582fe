"""Issue 3's coverage: norms, softmax, gating, rotary, residual adds — every op lands in a fusion
region for both backends, and the torch backend matches the source at bucket edges and inside."""

from __future__ import annotations

import pytest
import torch

from tests.examples import FULLY_FUSED
from thunder_aot.ir import Region, TorchCall
from thunder_aot.pipeline import build_program, export
from thunder_aot.request import ExportRequest
from thunder_aot.shapes import parse_shapes
from thunder_aot.verify import bucket_inputs, load_module_from_text
from thunder_aot.verify.judge import check_call

#: every test here exports (traces with Thunder) or builds a wheel
pytestmark = pytest.mark.traces

IDS = [source.split(":")[1] for source, _ in FULLY_FUSED]


@pytest.mark.parametrize("source,shapes", FULLY_FUSED, ids=IDS)
@pytest.mark.parametrize("backend", ["nvfuser", "torch"])
def test_every_op_is_fused(source, shapes, backend):
    program, _, _ = build_program(ExportRequest(source, (shapes,), backend=backend), progress=lambda m: None)
    for bucket in program.programs:
        calls = [s.target for s in bucket.steps if isinstance(s, TorchCall)]
        assert not calls, f"not fused: {calls}"
        assert [s for s in bucket.steps if isinstance(s, Region)]


@pytest.mark.parametrize("source,shapes", FULLY_FUSED, ids=IDS)
def test_torch_backend_numerics(source, shapes):
    from thunder_aot.frontend.resolve import resolve_module

    text = export(ExportRequest(source, (shapes,), backend="torch"), verify=False)
    module = resolve_module(source).eval()
    gen = load_module_from_text(text, "coverage_gen")
    aot = getattr(gen, type(module).__name__).from_module(module)
    generator = torch.Generator().manual_seed(torch.seed() >> 1)
    with torch.no_grad():
        for bucket in parse_shapes(shapes):
            for env, inputs in bucket_inputs(bucket, "cpu", generator):
                check_call(module, aot, [*inputs], f"{source} at {env}")


def test_export_reports_what_stays_unfused():
    for merge, calls in ((False, 3), (True, 2)):
        messages: list[str] = []
        export(
            ExportRequest(
                "thunder_aot.examples.blocks:gated_mlp",
                ("[1..8]x256",),
                backend="torch",
                merge_projections=merge,
            ),
            verify=False,
            progress=messages.append,
        )
        assert f"not fused (run as torch calls): torch.nn.functional.linear x{calls}" in messages
    assert (
        "merged projections: gate_proj.weight, up_proj.weight -> "
        "one matmul on merged_gate_proj_up_proj_weight" in messages
    )


def _step_kinds(source: str, shapes: str, merge: bool = True) -> list[list[str]]:
    """Per bucket program, its steps in order: a torch call's target, or "region"."""
    request = ExportRequest(source, (shapes,), backend="torch", merge_projections=merge)
    program, _, _ = build_program(request, progress=lambda m: None)
    return [
        ["region" if isinstance(s, Region) else s.target for s in bucket.steps] for bucket in program.programs
    ]


def test_pointwise_work_on_both_sides_of_a_linear_is_one_region():
    """``silu(gate(x)) * up(x)``: Thunder's partitioner leaves silu and the product in two regions
    (the up projection stands between them); the exporter merges the earlier into the later. With
    the projections merged, the region slices both from the one matmul."""
    for steps in _step_kinds("thunder_aot.examples.blocks:gated_mlp", "[1..8]x256", merge=False):
        assert steps == ["torch.nn.functional.linear"] * 2 + ["region", "torch.nn.functional.linear"], steps
    for steps in _step_kinds("thunder_aot.examples.blocks:gated_mlp", "[1..8]x256"):
        assert steps == ["torch.nn.functional.linear", "region", "torch.nn.functional.linear"], steps


def test_views_of_a_projection_join_the_rotary_region_that_reads_them():
    """``q_proj(x).view(...).transpose(1, 2)`` feeding a rotary region: the views become part of the
    region (index arithmetic in a kernel) instead of torch views a kernel would first copy; merged,
    q/k/v are one matmul whose parts the region slices."""
    for merge, projections in ((False, 3), (True, 1)):
        for steps in _step_kinds(
            "thunder_aot.examples.hf:llama_decoder_layer", "1x[S=1..64]x256, 1x[S]x64, 1x[S]x64", merge
        ):
            attention = steps.index("torch.nn.functional.scaled_dot_product_attention")
            assert steps[:attention] == [
                "region",
                *["torch.nn.functional.linear"] * projections,
                "region",
            ], steps
            mlp = steps[attention:]
            assert mlp.count("region") == 3, steps  # residual add + norm, silu * up, residual add
            # o_proj, then gate and up (one matmul merged), down
            assert mlp.count("torch.nn.functional.linear") == (4 if not merge else 3), steps
