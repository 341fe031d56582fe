"""Hot-path cost of each layer around the bare kernel call, A/B in one run, for the nvFuser and
Triton modules of the seed's RMSNorm.

    . .gpu/env.sh && python3 tools/overhead.py [--rounds 5] [--out OUT.md]

Layers, innermost first (Triton: also the bare run plus the output's allocation, and the C launch
function with int pointers that the module calls, alone, and the floor: a hand-written call that
checks through the guard, allocates and launches, with nothing else; and that floor as an
nn.Module that also makes the tests any drop-in module must: hooks, grad mode, current device):
the bare call (nvFuser: ``fd.fec.execute``, the executor cache that
``fd.execute`` wraps; Triton: ``CompiledKernel.run`` into a preallocated output), ``fd.execute``
(nvFuser), the generated ``forward()`` function, the generated ``nn.Module`` call, the same module
exported with ``--unchecked`` (no per-call checks; the bucket dispatch stays), and the checks
alone (input requirements, parameter checks, autograd test, bucket test) and the C++ guard that
stands for them on the module's fast path. Each variant is timed
in rounds, interleaved with the others (drift of the shared machine hits all alike); the table
gives the median of the round medians in µs per call.
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

import torch

from thunder_aot.bench import bare_launches, interleaved_times, nvfuser_executions
from thunder_aot.examples.gpt_oss import SEED_SHAPES, rmsnorm
from thunder_aot.pipeline import export
from thunder_aot.request import ExportRequest
from thunder_aot.verify import load_module_from_text

SOURCE = "thunder_aot.examples.gpt_oss:rmsnorm"
FLOOR = "floor: guard + _empty_strided_cuda + C launch"
MODULE_FLOOR = "floor as an nn.Module: + hook, grad-mode and device tests"
FLOOR_CALL = "floor called as an nn.Module, no tests"
FLOOR_HOOKS = "floor + hook tests"
FLOOR_GRAD_DEVICE = "floor + grad-mode and device tests"

#: the per-round ratios the Triton table gives: the module against each floor, and each obligation's cost
RATIOS_TO_FLOOR = (
    ("generated module()", FLOOR),
    (MODULE_FLOOR, FLOOR),
    ("generated module()", MODULE_FLOOR),
    (FLOOR_CALL, FLOOR),
    (FLOOR_HOOKS, FLOOR),
    (FLOOR_GRAD_DEVICE, FLOOR),
)
RATIO_NAMES = {
    "generated module()": "module",
    FLOOR: "floor",
    MODULE_FLOOR: "module floor",
    FLOOR_CALL: "floor called",
    FLOOR_HOOKS: "floor + hooks",
    FLOOR_GRAD_DEVICE: "floor + grad, device",
}


def cases_for(backend: str, gen, aot, unchecked, x, w) -> dict:
    cases = {"bare": bare_launches(aot, [x])}
    if backend == "nvfuser":
        ((fd, _),) = nvfuser_executions(aot, [x])
        cases["bare"] = lambda: fd.fec.execute([x, w])
        cases["fd.execute"] = lambda: fd.execute([x, w])
    else:  # what a Python hot path cannot avoid: the output's allocation, and the launch itself
        bare = cases["bare"]
        cases["bare + torch.empty_like"] = lambda: (torch.empty_like(x), bare())
        # the allocation torch.compile's generated code uses (no Python argument parser, no dispatcher)
        empty_strided_cuda, size, stride = (
            torch._C._dynamo.guards._empty_strided_cuda,
            tuple(x.shape),
            x.stride(),
        )
        cases["bare + _empty_strided_cuda"] = lambda: (empty_strided_cuda(size, stride, x.dtype), bare())
        _, launch, head = gen.fusion0.binaries[2 * x.get_device()]  # the aligned kernel (Kernel.launch's key)
        out, rows, stream = torch.empty_like(x), x.numel() // 2880, torch.cuda.current_stream().cuda_stream
        cases["C launch, int pointers"] = lambda: launch(
            rows, 1, 1, stream, *head, x.data_ptr(), w.data_ptr(), out.data_ptr(), 2880, 4096
        )
        # the least a module that checks and allocates can do per call, written by hand: the guard,
        # the allocation, the current stream, the C launch (no dispatch, no hooks, no function calls)
        guard, raw_stream, device = gen._FAST[x.shape][0], torch._C._cuda_getCurrentRawStream, x.get_device()

        def floor():
            if guard(x, w):
                y = empty_strided_cuda(size, stride, x.dtype)
                launch(
                    rows,
                    1,
                    1,
                    raw_stream(device),
                    *head,
                    x.data_ptr(),
                    w.data_ptr(),
                    y.data_ptr(),
                    2880,
                    4096,
                )
                return y

        cases[FLOOR] = floor

        # the same floor as an nn.Module, with the tests any drop-in module owes its caller: nn.Module's
        # hook registries (as nn.Module.__call__ tests them), grad mode (the weight requires grad),
        # the current device (a kernel launches in its own device's context)
        # (the generated modules' own hook registries, grad-mode and device functions: thunder_aot.runtime)
        from thunder_aot.runtime import (
            GLOBAL_BACKWARD_HOOKS,
            GLOBAL_BACKWARD_PRE_HOOKS,
            GLOBAL_FORWARD_HOOKS,
            GLOBAL_FORWARD_PRE_HOOKS,
            is_grad_enabled,
        )
        from thunder_aot.runtime.triton import current_device

        class ModuleFloor(torch.nn.Module):
            def __call__(self, x):
                state = self.__dict__
                if (
                    state["_forward_pre_hooks"]
                    or state["_forward_hooks"]
                    or state["_backward_pre_hooks"]
                    or state["_backward_hooks"]
                    or "_compiled_call_impl" in state
                    or "forward" in state
                    or GLOBAL_FORWARD_PRE_HOOKS
                    or GLOBAL_FORWARD_HOOKS
                    or GLOBAL_BACKWARD_PRE_HOOKS
                    or GLOBAL_BACKWARD_HOOKS
                ):
                    return torch.nn.Module.__call__(self, x)
                if guard(x, w) and not is_grad_enabled() and device == current_device():
                    y = empty_strided_cuda(size, stride, x.dtype)
                    launch(
                        rows,
                        1,
                        1,
                        raw_stream(device),
                        *head,
                        x.data_ptr(),
                        w.data_ptr(),
                        y.data_ptr(),
                        2880,
                        4096,
                    )
                    return y

        module_floor = ModuleFloor()
        cases[MODULE_FLOOR] = lambda: module_floor(x)

        # the module floor's obligations one at a time, each added to the floor alone: where its cost goes
        class CallOnly(torch.nn.Module):  # calling an nn.Module instance (a Python __call__), no tests
            def __call__(self, x):
                return floor()

        call_only, state = CallOnly(), CallOnly().__dict__
        cases[FLOOR_CALL] = lambda: call_only(x)

        def floor_hooks():
            if (
                state["_forward_pre_hooks"]
                or state["_forward_hooks"]
                or state["_backward_pre_hooks"]
                or state["_backward_hooks"]
                or "_compiled_call_impl" in state
                or "forward" in state
                or GLOBAL_FORWARD_PRE_HOOKS
                or GLOBAL_FORWARD_HOOKS
                or GLOBAL_BACKWARD_PRE_HOOKS
                or GLOBAL_BACKWARD_HOOKS
            ):
                return None
            return floor()

        cases[FLOOR_HOOKS] = floor_hooks

        def floor_grad_device():
            if not is_grad_enabled() and device == current_device():
                return floor()

        cases[FLOOR_GRAD_DEVICE] = floor_grad_device
    s = x.shape[1]
    cases["checks only"] = lambda: (
        isinstance(x, torch.Tensor)
        and x.is_cuda
        and x.is_contiguous()
        and w.dtype is torch.float32
        and w.get_device() == x.get_device()
        and w.shape == (2880,)
        and w.is_contiguous()
        and not (torch.is_grad_enabled() and (x.requires_grad or w.requires_grad))
        and x.dtype is torch.bfloat16
        and len(x.shape) == 3
        and x.shape[0] == 1
        and 1 <= s <= 2048
        and x.shape[2] == 2880
    )
    guard = gen._FAST[x.shape][0]  # recorded by the module's first call (gradients are off here)
    cases["guard only"] = lambda: guard(x, w)
    cases["parameter check only"] = lambda: (
        w.dtype is torch.float32
        and w.get_device() == x.get_device()
        and w.shape == (2880,)
        and w.is_contiguous()
    )
    cases["generated forward()"] = lambda: gen.forward(x, w)
    cases["generated module()"] = lambda: aot(x)
    cases["unchecked module()"] = lambda: unchecked(x)
    return cases


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--backends", default="nvfuser,triton")
    ap.add_argument("--sizes", default="1,15,128,1024,2048")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--min-run-time", type=float, default=0.1)
    ap.add_argument("--out", default=None)
    ap.add_argument(
        "--only",
        default=None,
        help="comma-separated case names to time (default: all): fewer cases, more rounds",
    )
    args = ap.parse_args()
    torch.set_num_threads(1)
    torch.set_grad_enabled(False)
    source = rmsnorm().cuda()
    w = source.weight
    tables = []
    for backend in args.backends.split(","):
        gen = load_module_from_text(
            Path(f"generated/rmsnorm_{backend}.py").read_text(), f"overhead_{backend}"
        )
        aot = gen.GptOssRMSNorm.from_module(source)
        # the same export with --unchecked (no per-call checks; the dispatch stays)
        request = ExportRequest(SOURCE, (SEED_SHAPES,), backend=backend, checks=False)
        unchecked_gen = load_module_from_text(export(request, verify=False), f"overhead_{backend}_unchecked")
        unchecked = unchecked_gen.GptOssRMSNorm.from_module(source)
        lines, names = [], []
        for s in [int(v) for v in args.sizes.split(",")]:
            x = torch.randn(1, s, 2880, device="cuda", dtype=torch.bfloat16)
            aot(x)
            unchecked(x)
            cases = cases_for(backend, gen, aot, unchecked, x, w)
            if args.only:
                wanted = set(args.only.split(",")) | {"bare", "generated module()", "unchecked module()"}
                wanted |= (
                    {FLOOR, MODULE_FLOOR, FLOOR_CALL, FLOOR_HOOKS, FLOOR_GRAD_DEVICE}
                    if backend == "triton"
                    else {"fd.execute"}
                )
                cases = {k: v for k, v in cases.items() if k in wanted}
            names = list(cases)
            samples = interleaved_times(cases, args.rounds, args.min_run_time)
            row = {k: statistics.median(v) for k, v in samples.items()}
            ratios = [row["generated module()"] / row["bare"], row["unchecked module()"] / row["bare"]]
            if FLOOR in row:
                ratios.append(row[FLOOR] / row["bare"])
                # the module against each floor, and the floors, per round (timed in the same round:
                # drift hits them alike)
                for a, b in RATIOS_TO_FLOOR:
                    ratios.append(statistics.median(m / f for m, f in zip(samples[a], samples[b])))
            if "fd.execute" in row:
                ratios += [
                    row["generated module()"] / row["fd.execute"],
                    row["unchecked module()"] / row["fd.execute"],
                ]
            line = (
                f"| {s} | "
                + " | ".join(f"{v:.2f}" for v in row.values())
                + " | "
                + " | ".join(f"{r:.2f}" for r in ratios)
                + " |"
            )
            lines.append(line)
            print(f"{backend} {line}", flush=True)
        ratio_names = ["module / bare", "unchecked / bare"]
        ratio_names += (
            ["module / fd.execute", "unchecked / fd.execute"]
            if backend == "nvfuser"
            else ["floor / bare"]
            + [
                f"{RATIO_NAMES.get(a, a)} / {RATIO_NAMES.get(b, b)} (median of rounds)"
                for a, b in RATIOS_TO_FLOOR
            ]
        )
        header = (
            f"### {backend}\n\n| S | "
            + " | ".join(names + ratio_names)
            + " |\n"
            + "|---" * (len(names) + len(ratio_names) + 1)
            + "|"
        )
        tables.append(header + "\n" + "\n".join(lines) + "\n")
    text = "\n".join(tables)
    print(text)
    if args.out:
        Path(args.out).write_text(text)


if __name__ == "__main__":
    main()
