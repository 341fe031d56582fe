"""Where a module's device time goes: the kernels of the generated Triton and nvFuser modules and of
torch.compile, side by side, from torch.profiler (GPU machine; lab tooling).

    python3 tools/layer_profile.py thunder_aot.examples.hf:llama_1b_decoder_layer \
        "1x[S=1..1024]x2048:bf16, 1x[S]x64:bf16, 1x[S]x64:bf16" --sizes 128,1024 --out OUT.md

Per size and system: device µs per call (sum of kernel times / calls), the number of kernels per
call, and the kernels ranked by time, matmuls (cuBLAS/cutlass) apart from the rest.
"""

from __future__ import annotations

import argparse
import collections
import copy
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

CALLS = 20
GEMM_MARKERS = ("gemm", "cutlass", "cublas", "sm90_xmma", "nvjet", "splitK")


def kernel_times(fn) -> dict[str, float]:
    """µs per call of each kernel name over CALLS calls."""
    from torch.profiler import ProfilerActivity, profile

    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(CALLS):
            fn()
        torch.cuda.synchronize()
    times: dict[str, float] = collections.defaultdict(float)
    counts: dict[str, int] = collections.Counter()
    for event in prof.events():
        if event.device_type == torch.autograd.DeviceType.CUDA:
            times[event.name] += event.device_time / CALLS
            counts[event.name] += 1
    return {name: (times[name], counts[name] / CALLS) for name in times}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("source")
    parser.add_argument("shapes")
    parser.add_argument("--sizes", default="1,128,1024")
    parser.add_argument("--backends", default="triton,nvfuser")
    parser.add_argument("--top", type=int, default=14)
    parser.add_argument("--out")
    args = parser.parse_args()

    from thunder_aot.frontend.resolve import resolve_module
    from thunder_aot.pipeline import export
    from thunder_aot.request import ExportRequest
    from thunder_aot.shapes import parse_shapes
    from thunder_aot.verify import load_module_from_text, random_inputs

    module = copy.deepcopy(resolve_module(args.source)).eval().cuda()
    systems = {"eager": module, "torch.compile": torch.compile(module)}
    for backend in args.backends.split(","):
        text = export(ExportRequest(args.source, (args.shapes,), backend=backend), verify=False)
        gen = load_module_from_text(text, f"profile_{backend}")
        systems[f"thunder-aot({backend})"] = getattr(gen, type(module).__name__).from_module(module)
    (bucket,) = parse_shapes([args.shapes])[:1]
    name = bucket.dims[0].name
    lines = [
        f"# Device time by kernel: {args.source}",
        "",
        f"    python3 tools/layer_profile.py {' '.join(sys.argv[1:])}",
        "",
    ]
    generator = torch.Generator().manual_seed(0)
    for size in map(int, args.sizes.split(",")):
        env = {name: size}
        inputs = random_inputs(bucket, env, "cuda", generator)
        lines += [f"## {name}={size}", ""]
        with torch.no_grad():
            for system, fn in systems.items():
                times = kernel_times(lambda: fn(*inputs))
                total = sum(t for t, _ in times.values())
                gemm = sum(t for k, (t, _) in times.items() if any(m in k.lower() for m in GEMM_MARKERS))
                launches = sum(c for _, c in times.values())
                lines.append(
                    f"### {system}: {total:.1f} µs per call ({gemm:.1f} in matmuls), "
                    f"{launches:.0f} kernels per call"
                )
                lines.append("")
                lines.append("| µs | per call | kernel |")
                lines.append("|---|---|---|")
                for kernel, (t, c) in sorted(times.items(), key=lambda kv: -kv[1][0])[: args.top]:
                    lines.append(f"| {t:.1f} | {c:g} | `{kernel[:110]}` |")
                lines.append("")
                print(
                    f"{name}={size} {system}: {total:.1f} µs ({gemm:.1f} matmul), {launches:.0f} kernels",
                    flush=True,
                )
    text = "\n".join(lines) + "\n"
    if args.out:
        Path(args.out).write_text(text)
    else:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
