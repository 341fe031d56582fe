"""What each Python step of the Triton module's hot path costs on this host, one at a time (µs per
call, median of interleaved rounds): the pieces a generated ``forward`` is made of.

    . .gpu/env.sh && python3 tools/hotpath_parts.py [--rounds 5] [--out OUT.md]
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

import torch

from thunder_aot.bench import interleaved_times, print_table
from thunder_aot.examples.gpt_oss import rmsnorm
from thunder_aot.verify import load_module_from_text


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    torch.set_num_threads(1)
    torch.set_grad_enabled(False)
    gen = load_module_from_text(Path("generated/rmsnorm_triton.py").read_text(), "parts_triton")
    source = rmsnorm().cuda()
    aot = gen.GptOssRMSNorm.from_module(source)
    x = torch.randn(1, 128, 2880, device="cuda", dtype=torch.bfloat16)
    w = source.weight
    aot(x)
    fast = gen._FAST[x.shape]
    size, stride, dev = tuple(x.shape), x.stride(), x.get_device()
    empty = torch._C._dynamo.guards._empty_strided_cuda

    def ten(a, b, c, d, e, f, g, h, i, j):
        return None

    cases = {
        "empty statement": lambda: None,
        "_FAST.get(x.shape)": lambda: gen._FAST.get(x.shape),
        "guard(x, w)": lambda: fast[0](x, w),
        "torch.is_grad_enabled()": torch.is_grad_enabled,
        "torch.compiler.is_dynamo_compiling()": torch.compiler.is_dynamo_compiling,
        "torch.compiler.is_compiling()": torch.compiler.is_compiling,
        "torch._C._cuda_getDevice()": torch._C._cuda_getDevice,
        "x.get_device()": x.get_device,
        "x.data_ptr()": x.data_ptr,
        "_cuda_getCurrentRawStream(dev)": lambda: torch._C._cuda_getCurrentRawStream(dev),
        "eager_device(x)": lambda: gen.eager_device(x),
        "_empty_strided_cuda": lambda: empty(size, stride, torch.bfloat16),
        "torch.empty_like(x)": lambda: torch.empty_like(x),
        "Python call, 10 args": lambda: ten(1, 2, 3, 4, 5, 6, 7, 8, 9, 10),
        "module.__call__ checks (hooks)": lambda: aot.__dict__["_forward_pre_hooks"]
        or aot.__dict__["_forward_hooks"]
        or aot.__dict__["_backward_pre_hooks"]
        or aot.__dict__["_backward_hooks"]
        or aot.__dict__.get("_compiled_call_impl") is not None
        or "forward" in aot.__dict__,
        "forward(x, w)": lambda: gen.forward(x, w),
        "module(x)": lambda: aot(x),
    }
    samples = interleaved_times(cases, args.rounds, 0.05)
    lines = ["| step | µs per call |", "|---|---|"]
    lines += [f"| {k} | {statistics.median(v):.3f} |" for k, v in samples.items()]
    print_table(lines, args.out)


if __name__ == "__main__":
    main()
