"""Split regions: a region that holds independent computations becomes one region per group of
them that the backend makes a kernel of.

Thunder's fusion pass puts neighbouring ops in one region where no torch call stands between
them, whether or not they share a value. DeepSeek-V3's attention gets one region holding the
RMSNorm of its compressed keys (a reduction over their row), the rotary of its keys and the rotary
and concatenation of its queries (outputs of three shapes): no single kernel computes all three,
and the whole region ran as its source's torch calls. Where the backend makes no kernel of a region,
this pass splits it into its connected components (ops joined by the values one makes and another
reads: inputs they both read do not join them) and groups those, in order, into as few regions as
make kernels. A group that makes no kernel stays a region of its own and runs as its part of the
region's source calls (never slower than those calls were); where those cannot be told apart, the
region stays whole.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from thunder_aot.ir import BucketProgram, Region, TorchCall, op_reads, step_reads
from thunder_aot.passes.base import Pass


def components(region: Region) -> list[list[int]]:
    """The region's ops (indices) grouped by connection, each group in program order, the groups
    in the order of their first op."""
    parent = list(range(len(region.ops)))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    maker: dict[str, int] = {}
    for i, op in enumerate(region.ops):
        for name in op_reads(op):
            if name in maker:
                parent[root(i)] = root(maker[name])
        for o in op.outputs:
            maker[o.name] = i
    groups: dict[int, list[int]] = {}
    for i in range(len(region.ops)):
        groups.setdefault(root(i), []).append(i)
    return sorted(groups.values(), key=lambda g: g[0])


def _source_slice(
    calls: tuple[TorchCall, ...], outputs: set[str]
) -> tuple[tuple[TorchCall, ...], set[str]] | None:
    """The source calls that compute ``outputs`` and the names they read from outside; None where
    some output is made by no call."""
    needed, kept = set(outputs), []
    for call in reversed(calls):
        if needed & {o.name for o in call.outputs}:
            kept.append(call)
            needed -= {o.name for o in call.outputs}
            needed |= set(step_reads(call))
    made = {o.name for c in kept for o in c.outputs}
    if not outputs <= made:
        return None
    return tuple(reversed(kept)), needed


def _part(region: Region, indices: list[int], name: str, with_source: bool) -> Region | None:
    """The region of the ops ``indices``: the region's inputs they read, its outputs they make;
    ``with_source``: with its part of the region's source calls (None where they cannot be told apart)."""
    ops = tuple(region.ops[i] for i in indices)
    made = {o.name for op in ops for o in op.outputs}
    reads = {n for op in ops for n in op_reads(op)}
    outputs = tuple(o for o in region.outputs if o.name in made)
    calls: tuple[TorchCall, ...] = ()
    if with_source:
        sliced = (
            _source_slice(region.source_calls, {o.name for o in outputs}) if region.source_calls else None
        )
        if sliced is None:
            return None
        calls, outside = sliced
        if not outside <= {v.name for v in region.inputs}:
            return None
        reads |= outside
    inputs = tuple(v for v in region.inputs if v.name in reads)
    return Region(name, inputs, outputs, ops, calls)


def _split(region: Region, makes_kernel: Callable[[Region], bool]) -> list[Region] | None:
    """The region as groups of its components (None: one component, or no group makes a kernel)."""
    parts = components(region)
    made = {o.name for op in region.ops for o in op.outputs}
    if len(parts) < 2 or not {o.name for o in region.outputs} <= made:
        return None
    groups: list[list[int]] = []
    for part in parts:  # first fit: a component joins the first group that still makes a kernel with it
        for g in groups:
            trial = _part(region, sorted(g + part), region.name, with_source=False)
            if makes_kernel(trial):
                g.extend(part)
                g.sort()
                break
        else:
            groups.append(list(part))
    regions = []
    for k, g in enumerate(groups):
        name = f"{region.name}_{k}"
        kernel = _part(region, g, name, with_source=False)
        with_calls = _part(region, g, name, with_source=True)
        if makes_kernel(
            kernel
        ):  # its source calls kept where they read only its inputs (a later join needs them)
            regions.append(
                with_calls if with_calls is not None and with_calls.inputs == kernel.inputs else kernel
            )
        elif with_calls is not None:
            regions.append(with_calls)
        else:
            return None
    if not any(makes_kernel(r) for r in regions):
        return None
    return regions


def split_regions(program: BucketProgram, makes_kernel: Callable[[Region], bool]) -> BucketProgram:
    """``program`` with every region the backend makes no kernel of split where parts of it make kernels."""
    steps = []
    for step in program.steps:
        if isinstance(step, Region) and not makes_kernel(step):
            parts = _split(step, makes_kernel)
            if parts is not None:
                steps.extend(parts)
                continue
        steps.append(step)
    return dataclasses.replace(program, steps=tuple(steps))


PASS = Pass("split_regions", lambda program, kernels: split_regions(program, kernels.makes_kernel))
