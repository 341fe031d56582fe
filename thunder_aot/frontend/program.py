"""The frontend's product: the request's module, traced at each of its buckets (split where sizes
trace differently) and generalised, as one :class:`~thunder_aot.ir.Program` before any pass."""

from __future__ import annotations

import copy
import dataclasses
import inspect
import itertools

import torch

from thunder_aot.backends import Backend
from thunder_aot.errors import ExportError
from thunder_aot.frontend import trace
from thunder_aot.frontend.buckets import (
    MAX_EDGE_SPLITS,
    EdgeMismatch,
    SizeSplit,
    Traces,
    sample_args,
    split_at_edge,
    trace_bucket,
)
from thunder_aot.frontend.generalize import share_programs
from thunder_aot.frontend.repeatable import check_repeatable
from thunder_aot.frontend.resolve import resolve_module
from thunder_aot.ir import Bucket, BucketProgram, Program, ProgramInput
from thunder_aot.request import ExportRequest, Progress
from thunder_aot.shapes import contains, dispatch_order, format_bucket, parse_shapes


def forward_input_names(module: torch.nn.Module, count: int) -> list[str]:
    params = list(inspect.signature(module.forward).parameters.values())
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    required = [p for p in positional if p.default is p.empty]
    if any(p.kind == p.VAR_POSITIONAL for p in params):
        return [f"arg{i}" for i in range(count)]
    if not (len(required) <= count <= len(positional)):
        names = ", ".join(p.name for p in positional)
        raise ExportError(
            f"{type(module).__name__}.forward({names}) takes {len(required)}"
            + (f" to {len(positional)}" if len(positional) != len(required) else "")
            + f" tensor inputs; the bucket gives {count}"
        )
    return [p.name for p in positional[:count]]


def module_to_trace(request: ExportRequest, progress: Progress) -> torch.nn.Module:
    """The request's module in eval mode, on the CPU (a copy where its tensors are elsewhere)."""
    module = request.instance if request.instance is not None else resolve_module(request.source)
    module.eval()
    devices = {
        str(t.device)
        for t in itertools.chain(module.parameters(), module.buffers())
        if t.device.type != "cpu"
    }
    if "meta" in devices:
        raise ExportError(
            "the module's tensors are on the meta device: export traces and verifies with their values; "
            "load its weights first (e.g. to_empty() then load_state_dict)"
        )
    if devices:  # Thunder traces with CPU example inputs; the module itself is left where it is
        progress(f"the module's tensors are on {', '.join(sorted(devices))}: export traces a copy on the CPU")
        module = copy.deepcopy(module).cpu()
    return module


def traced_program(
    request: ExportRequest, module: torch.nn.Module, backend: Backend, progress: Progress
) -> Program:
    """``module`` traced with Thunder at each of the request's buckets (split where their sizes trace
    differently), lowered, and generalised over their dynamic sizes: one program per group of
    buckets that trace alike, with Thunder's fusion regions for the prims ``backend`` claims."""
    buckets = parse_shapes(list(request.shapes))
    input_names = forward_input_names(module, len(buckets[0].inputs))
    for b in buckets:
        if len(b.inputs) != len(input_names):
            raise ExportError(
                f"bucket {format_bucket(b)} gives {len(b.inputs)} inputs; the others give {len(input_names)}"
            )
    first = buckets[dispatch_order(buckets)[0]]
    check_repeatable(module, sample_args(first, {r.name: r.lo for r in first.dims}))
    traced: list[tuple[Bucket, BucketProgram]] = []
    program_inputs: list[ProgramInput] | None = None
    returns_tuple = False
    attributes: dict[str, object] = {}
    pending = [buckets[i] for i in dispatch_order(buckets)]
    splits = 0
    traces = Traces(module, input_names, [p for p in trace.prims.PrimIDs if p.name.lower() in backend.prims])
    while pending:
        bucket = pending.pop(0)
        try:
            program, inputs, returns_tuple, read = trace_bucket(traces, bucket, len(traced), progress)
        except SizeSplit as e:
            splits += 1
            if splits > MAX_EDGE_SPLITS:
                raise ExportError(
                    f"{e}; too many splits: give the bucket's pieces buckets of their own"
                ) from None
            parts = [p for p in e.parts if not any(contains(b, p) and contains(p, b) for b in buckets)]
            progress(f"{e}: split into " + " and ".join(format_bucket(p) for p in parts))
            pending[:0] = parts
            continue
        except EdgeMismatch as e:
            parts = split_at_edge(bucket, e.env)
            splits += 1
            if parts is None or splits > MAX_EDGE_SPLITS:
                raise
            parts = [p for p in parts if not any(contains(b, p) and contains(p, b) for b in buckets)]
            progress(
                f"{e.env} traces differently from the rest of {format_bucket(bucket)}: split into "
                + " and ".join(format_bucket(p) for p in parts)
            )
            pending[:0] = parts
            continue
        if program_inputs is not None and [p.source_name for p in inputs] != [
            p.source_name for p in program_inputs
        ]:
            raise ExportError(f"bucket {format_bucket(bucket)} uses other parameters than bucket 0")
        program_inputs = inputs
        attributes.update(read)
        traced.append((bucket, program))
    assert program_inputs is not None
    order = dispatch_order([b for b, _ in traced])
    programs, dispatch = share_programs([traced[i] for i in order])
    _refuse_shadowing_dims(programs)
    program_inputs = [_with_persistence(p, module) for p in program_inputs]
    return Program(
        source=request.source,
        class_name=type(module).__name__,
        inputs=tuple(program_inputs),
        programs=tuple(programs),
        dispatch=tuple(dispatch),
        returns_tuple=returns_tuple,
        fallback=request.fallback,
        attributes=tuple(sorted(attributes.items())),
    )


def _refuse_shadowing_dims(programs: list[BucketProgram]) -> None:
    """A dynamic dim becomes a local of the generated forward: it must not share a value's name."""
    for bp in programs:
        values = {v.name for v in bp.inputs} | {o.name for step in bp.steps for o in step.outputs}
        for r in bp.bucket.dims:
            if r.name in values:
                raise ExportError(
                    f"the dynamic dim {r.name!r} has the name of a value of the traced program; "
                    "name it otherwise (e.g. [S=LO..HI])"
                )


def _with_persistence(p: ProgramInput, module: torch.nn.Module) -> ProgramInput:
    if p.kind != "buffer":
        return p
    owner_name, _, leaf = p.source_name.rpartition(".")
    owner = module.get_submodule(owner_name) if owner_name else module
    return dataclasses.replace(p, persistent=leaf not in owner._non_persistent_buffers_set)
