"""The export pipeline: the frontend's program (resolve, trace per bucket, lower, generalise), the
passes in order (:data:`PASSES`, then ``merge_projections``), rendering, and verification with the
fallback to source calls for regions verification refuses."""

from __future__ import annotations

import dataclasses
from collections import Counter

import torch

from thunder_aot.backends import Backend, get_backend, resolve_auto
from thunder_aot.codegen.header import versions
from thunder_aot.codegen.render import render
from thunder_aot.errors import ExportError
from thunder_aot.frontend.program import module_to_trace, traced_program
from thunder_aot.ir import Program, TorchCall
from thunder_aot.passes import (
    copies_as_kernels,
    drop_identity_calls,
    drop_no_op_calls,
    drop_round_trip_casts,
    drop_unobserved_write_backs,
    fills_as_concatenations,
    fuse_moe_routing,
    group_queries_instead_of_repeating_kv,
    index_writes_in_place,
    join_regions,
    move_gathers_into_kernels,
    move_slices_into_kernels,
    split_regions,
    topk_as_regions,
    transposed_outputs_as_views,
)
from thunder_aot.passes.base import Kernels
from thunder_aot.passes.merge_projections import merge_projections
from thunder_aot.passes.refused_regions_as_source_calls import verified_with_source_calls
from thunder_aot.request import ExportRequest, Progress
from thunder_aot.verify import new_seed
from thunder_aot.verify import verify as run_verify

#: the passes over each bucket's program, in the order they run; each runs where its backend has
#: the capability it requires (``Pass.requires``)
PASSES = (
    drop_identity_calls.PASS,
    drop_unobserved_write_backs.PASS,
    index_writes_in_place.PASS,
    group_queries_instead_of_repeating_kv.PASS,
    split_regions.PASS,
    fills_as_concatenations.PASS,
    copies_as_kernels.PASS,
    drop_no_op_calls.PASS,
    fuse_moe_routing.PASS,
    move_gathers_into_kernels.PASS,
    move_slices_into_kernels.PASS,
    join_regions.PASS,
    transposed_outputs_as_views.PASS,
    topk_as_regions.PASS,
    drop_round_trip_casts.PASS,
)


def build_program(request: ExportRequest, progress: Progress) -> tuple[Program, torch.nn.Module, Backend]:
    """The request's module, resolved and put where tracing reads it, traced into a program for its
    backend (``trace_program``)."""
    backend = get_backend(
        request.backend, nvfuser_dynamic=request.nvfuser_dynamic, nvfuser_frontend=request.nvfuser_frontend
    )
    module = module_to_trace(request, progress)
    return trace_program(request, module, backend, progress), module, backend


def trace_program(
    request: ExportRequest, module: torch.nn.Module, backend: Backend, progress: Progress
) -> Program:
    """``module`` traced by the frontend, then put through the backend's passes."""
    program = traced_program(request, module, backend, progress)
    passes = [p for p in PASSES if p.applies_to(backend)]
    programs = []
    for bp in program.programs:
        kernels = Kernels(backend, bp.bucket.dims)
        for p in passes:
            bp = p.run(bp, kernels)
        programs.append(bp)
    inputs, merged = list(program.inputs), ()
    if request.merge_projections and backend.slices_region_inputs:
        programs, inputs, merged = merge_projections(programs, inputs)
        for m in merged:
            progress(f"merged projections: {', '.join(m.members)} -> one matmul on {m.key}")
    return dataclasses.replace(program, programs=tuple(programs), inputs=tuple(inputs), merged=merged)


def regions_without_kernels(program: Program, backend) -> list[str]:
    """One line per region the backend runs as torch calls, not as a kernel: what it holds, and what
    it runs as instead (the user's source-level calls, or one call per prim)."""
    if backend.name == "torch":
        return []
    lines = []
    for bp in program.programs:
        for region in bp.regions():
            view = backend.region_view(region, bp.bucket.dims)
            if view.runs_kernel:
                continue
            where = f"program {bp.index}, " if len(program.programs) > 1 else ""
            if getattr(view, "source_level", False):
                calls = Counter(c.target for c in region.source_calls)
                instead = "its source's torch calls: " + ", ".join(
                    f"{t} x{n}" for t, n in sorted(calls.items())
                )
            else:
                instead = f"one torch call per prim ({len(region.ops)})"
            prims = sorted({op.prim for op in region.ops})
            lines.append(
                f"no {backend.name} kernel for {where}region {region.name} ({', '.join(prims)}): "
                f"runs as {instead}"
            )
    return lines


def export(request: ExportRequest, *, verify: bool = True, progress: Progress | None = None) -> str:
    """Generate the module's text (``request.out`` only goes into its header; callers write)."""
    progress = progress or (lambda msg: None)
    if request.backend == "auto":
        name, why = resolve_auto()
        progress(f"backend auto: {name} ({why})")
        request = dataclasses.replace(request, backend=name)
    verify = verify and request.verify
    if verify:  # before any tracing: a module that cannot be verified here is not written unasked
        reason = get_backend(
            request.backend,
            nvfuser_dynamic=request.nvfuser_dynamic,
            nvfuser_frontend=request.nvfuser_frontend,
        ).unavailable_reason()
        if reason is not None:
            raise ExportError(
                f"cannot verify a {request.backend} module on this machine ({reason}); "
                "pass --no-verify (Python: verify=False) to write it unverified"
            )
    program, module, backend = build_program(request, progress)
    unfused = Counter(s.target for bp in program.programs for s in bp.steps if isinstance(s, TorchCall))
    if unfused:
        listed = ", ".join(f"{target} x{count}" for target, count in sorted(unfused.items()))
        progress(f"not fused (run as torch calls): {listed}")
    for line in regions_without_kernels(program, backend):
        progress(line)
    progress(
        f"rendering {len(program.dispatch)} bucket(s) as {len(program.programs)} program(s) "
        f"with the {backend.name} backend"
    )
    text = render(program, backend, request.command(), versions(), checks=request.checks)
    if verify:
        buckets = [bucket for bucket, _ in program.dispatch]
        seed = request.verify_seed if request.verify_seed is not None else new_seed()

        def verified(text: str) -> tuple[int, list[str]]:
            eager_only: list[str] = []
            checked = run_verify(
                text,
                module,
                buckets,
                program.class_name,
                device=backend.verify_device,
                seed=seed,
                without_float64=eager_only,
            )
            return checked, eager_only

        try:
            checked, eager_only = verified(text)
        except ExportError as refusal:
            text, (checked, eager_only) = verified_with_source_calls(
                program,
                backend,
                refusal,
                lambda demoted: render(
                    demoted, backend, request.command(), versions(), checks=request.checks
                ),
                verified,
                progress,
            )
        against = (
            "float64"
            if not eager_only
            else (
                f"float64; {len(eager_only)} of them against eager alone: "
                "the source module cannot run in float64"
            )
        )
        progress(f"verified: {checked} calls match the source module (against {against}; seed {seed})")
    else:
        progress("not verified (--no-verify)")
    return text
