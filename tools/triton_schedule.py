"""num_warps / BLOCK sweep for the generated Triton kernels (how thunder-aot's schedule() was chosen).

    . .gpu/env.sh && python3 tools/triton_schedule.py [--out OUT.md]

Device time (triton.testing.do_bench, median) of the kernels in generated/rmsnorm_triton.py
(persistent, 2880-wide rows) and generated/{wide_rmsnorm,vocab_softmax}_triton.py (looped), launched
through the JIT with each setting, against a device-to-device copy's bandwidth (bytes read + written).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch
import triton
import triton.testing

from thunder_aot.bench import copy_bandwidth_gb_per_s, print_table
from thunder_aot.verify import load_module_from_text

# every bucket of these modules shares one kernel (the same program at every shape)
KERNEL = "fusion0_kernel"
CASES = [  # module stem, row width, row counts, BLOCKs, num_warps
    ("rmsnorm", 2880, (65536, 16384, 128), (4096,), (4, 8, 16, 32)),
    ("wide_rmsnorm", 16384, (4096, 128), (2048, 4096, 8192), (4, 8, 16)),
    ("vocab_softmax", 32000, (4096, 64), (2048, 4096, 8192), (4, 8, 16)),
]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    copy = copy_bandwidth_gb_per_s()
    lines = [
        f"device-to-device copy: {copy:.0f} GB/s",
        "",
        "| kernel | rows x N | BLOCK | num_warps | µs | GB/s | % of copy |",
        "|---|---|---|---|---|---|---|",
    ]
    for stem, n, row_counts, blocks, warps in CASES:
        gen = load_module_from_text(Path(f"generated/{stem}_triton.py").read_text(), f"sweep_{stem}")
        kernel = getattr(gen, KERNEL)
        for rows in row_counts:
            x = torch.randn(rows, n, device="cuda", dtype=torch.bfloat16)
            weight = torch.randn(n, device="cuda")
            out = torch.empty(
                rows, n, device="cuda", dtype=torch.float32 if stem == "vocab_softmax" else torch.bfloat16
            )
            kernel_args = (x, out) if stem == "vocab_softmax" else (x, weight, out)
            nbytes = sum(t.numel() * t.element_size() for t in kernel_args)
            for block in blocks:
                for w in warps:

                    def launch():
                        kernel[(rows,)](*kernel_args, N=n, BLOCK=block, num_warps=w)

                    try:
                        launch()
                        ms = triton.testing.do_bench(launch, return_mode="median")
                    except Exception as e:  # e.g. too many registers for the setting
                        lines.append(
                            f"| {stem} | {rows}x{n} | {block} | {w} | failed: {type(e).__name__} | | |"
                        )
                        continue
                    gbs = nbytes / (ms * 1e-3) / 1e9
                    lines.append(
                        f"| {stem} | {rows}x{n} | {block} | {w} | {ms * 1e3:.1f} | {gbs:.0f} | "
                        f"{100 * gbs / copy:.0f}% |"
                    )
                    print(lines[-1], flush=True)
    print_table(lines, args.out)


if __name__ == "__main__":
    main()
