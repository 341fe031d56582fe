"""Floors: a generated module's kernels replayed with nothing around them."""

from __future__ import annotations

import sys

import torch

from thunder_aot.bench.records import Call
from thunder_aot.runtime.nvfuser import Fusion, SizedFusions


def _runtime_objects(generated, kind: type) -> list:
    """The generated module's runtime objects of one kind (a SizedFusions' entries count too)."""
    found = []
    for value in vars(generated).values():
        for candidate in value.by_size.values() if isinstance(value, SizedFusions) else (value,):
            if isinstance(candidate, kind):
                found.append(candidate)
    return found


def nvfuser_executions(aot: torch.nn.Module, inputs: list[torch.Tensor]) -> list[tuple[object, list]]:
    """The FusionDefinitions one forward of a generated nvFuser module executes, in order, with their
    inputs: each ``Fusion`` of the module (recorded at import, or per size) gets a recording
    ``execute`` for one call (after a first call that records and compiles the sizes met)."""
    generated = sys.modules[type(aot).__module__]
    with torch.no_grad():
        aot(*inputs)
    fusions = _runtime_objects(generated, Fusion)
    recorded: list[tuple[object, list]] = []

    def recording(fusion, real):
        return lambda args: recorded.append((fusion.fd, args)) or real(args)

    originals = [(f, f.execute) for f in fusions]
    try:
        for fusion, real in originals:
            fusion.execute = recording(fusion, real)
        with torch.no_grad():
            aot(*inputs)
    finally:
        for fusion, real in originals:
            fusion.execute = real
    return recorded


def bare_launches(aot: torch.nn.Module, inputs: list[torch.Tensor], pointers: bool = False) -> Call | None:
    """The generated module's kernels alone: records the backend calls one forward makes and
    returns a function that replays them with nothing around them (nvFuser: ``fd.execute`` of each
    FusionDefinition; Triton: ``CompiledKernel.run`` into the same output buffers) — the floor the
    module's per-call overhead is measured against. None when the module launches no kernel.
    ``pointers``: Triton's launch gets the tensors' addresses as ints, as the module passes them to
    the C launch function under ``CompiledKernel.run`` (the launcher then calls no ``data_ptr()``)."""
    from thunder_aot.runtime.triton import Kernel  # imports Triton: only where its kernels are replayed

    generated = sys.modules[type(aot).__module__]
    if any(isinstance(v, (Fusion, SizedFusions)) for v in vars(generated).values()):  # nvfuser
        calls = [(fd.execute, args) for fd, args in nvfuser_executions(aot, inputs)]
        if not calls:
            return None
        if len(calls) == 1:
            ((execute, args),) = calls
            return lambda: execute(args)
        return lambda: [execute(args) for execute, args in calls]
    if not _runtime_objects(generated, Kernel):
        return None
    recorded: list[tuple] = []
    real = Kernel.launch

    def record(kernel: Kernel, programs, args, raw, misaligned, n):
        real(kernel, programs, args, raw, misaligned, n)
        index = args[0].get_device()  # Kernel's own key for the binary it launched
        recorded.append((kernel.binaries[index + index + misaligned][0], programs, args, n, kernel.block))

    # forward launches a compiled kernel directly only on the current device: with none current,
    # every launch of the recorded call goes through Kernel.launch
    devices = generated.current_device, generated.eager_device
    generated.current_device, generated.eager_device = (lambda: -2), (lambda t: -1)
    Kernel.launch = record
    try:
        with torch.no_grad():
            aot(*inputs)
    finally:
        generated.current_device, generated.eager_device = devices
        Kernel.launch = real
    if not recorded:
        return None
    launches = []
    for compiled, programs, args, n, block in recorded:
        stream = torch.cuda.current_stream(args[0].device).cuda_stream
        if pointers:
            args = tuple(a.data_ptr() if isinstance(a, torch.Tensor) else a for a in args)
        launches.append(
            (
                compiled.run,
                (
                    programs,
                    1,
                    1,
                    stream,
                    compiled.function,
                    compiled.packed_metadata,
                    None,
                    None,
                    None,
                    *args,
                    n,
                    block,
                ),
            )
        )
    if len(launches) == 1:
        ((run, run_args),) = launches
        return lambda: run(*run_args)
    return lambda: [run(*run_args) for run, run_args in launches]


def io_bytes(inputs: list[torch.Tensor], outputs: object, state: list[torch.Tensor]) -> int:
    outs = outputs if isinstance(outputs, (tuple, list)) else (outputs,)
    return sum(t.numel() * t.element_size() for t in [*inputs, *state, *outs])
