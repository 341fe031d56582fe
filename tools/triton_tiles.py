"""Rows per program sweep for the persistent Triton schedule (how thunder-aot's TILE_LANES was chosen).

    . .gpu/env.sh && python3 tools/triton_tiles.py [--out OUT.md]

Each bundled module with narrow rows is exported once per TILE_LANES setting (rows per program =
TILE_LANES // BLOCK; a setting at or below BLOCK gives one row per program, the schedule before
tiles), and its kernel alone (``thunder_aot.bench.bare_launches``) is timed on the GPU at a large
row count: device µs (triton.testing.do_bench, median) and bandwidth (inputs, parameters and outputs
once) against a device-to-device copy's.
"""

from __future__ import annotations

import argparse

import torch
import triton.testing

import thunder_aot.backends.triton as triton_backend
from thunder_aot.bench import bare_launches, copy_bandwidth_gb_per_s, io_bytes, print_table
from thunder_aot.frontend.resolve import resolve_module
from thunder_aot.pipeline import export
from thunder_aot.request import ExportRequest
from thunder_aot.verify import load_module_from_text
from thunder_aot.verify.judge import check_call

#: (name, source, shapes spec, the inputs' shapes and dtypes at the measured size)
CASES = [
    (
        "rotary",
        "thunder_aot.examples.blocks:rotary_embedding",
        "1x32x[S=1..8192]x64:bf16, 1x1x[S]x64:bf16, 1x1x[S]x64:bf16",
        [
            ((1, 32, 8192, 64), torch.bfloat16),
            ((1, 1, 8192, 64), torch.bfloat16),
            ((1, 1, 8192, 64), torch.bfloat16),
        ],
    ),
    (
        "softmax",
        "thunder_aot.examples.blocks:scaled_masked_softmax",
        "1x32x[S=1..1024]x[S]:bf16, 1x1x[S]x[S]:fp32",
        [((1, 32, 1024, 1024), torch.bfloat16), ((1, 1, 1024, 1024), torch.float32)],
    ),
    (
        "gelu_gate, 512 wide",
        "thunder_aot.examples.blocks:gelu_gate",
        "[1..65536]x512:bf16",
        [((65536, 512), torch.bfloat16)],
    ),
    (
        "layer_norm",
        "thunder_aot.examples.blocks:layer_norm",
        "[1..65536]x1024:bf16",
        [((65536, 1024), torch.bfloat16)],
    ),
    (
        "gelu_gate, 2048 wide",
        "thunder_aot.examples.blocks:gelu_gate",
        "[1..65536]x2048:bf16",
        [((65536, 2048), torch.bfloat16)],
    ),
]
TILES = (0, 1024, 2048, 4096, 8192, 16384)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    torch.set_grad_enabled(False)
    copy = copy_bandwidth_gb_per_s()
    lines = [
        f"device-to-device copy: {copy:.0f} GB/s",
        "",
        "| module | rows x N | TILE_LANES | schedule | µs | GB/s | % of copy |",
        "|---|---|---|---|---|---|---|",
    ]
    default = triton_backend.TILE_LANES
    for name, source, shapes, inputs_spec in CASES:
        module = resolve_module(source).eval().cuda()
        inputs = [torch.randn(shape, device="cuda").to(dtype) for shape, dtype in inputs_spec]
        expected = module(*inputs)
        state = [t for t in module.state_dict().values()]
        nbytes = io_bytes(inputs, expected, state)
        for tile in TILES:
            triton_backend.TILE_LANES = tile
            try:
                text = export(ExportRequest(source, (shapes,), backend="triton"), verify=False)
            finally:
                triton_backend.TILE_LANES = default
            gen = load_module_from_text(text, f"tiles_{len(lines)}")
            aot = getattr(gen, type(module).__name__).from_module(module)
            check_call(module, aot, inputs, f"{name} with TILE_LANES={tile}")
            # the schedule of the last kernel: the one of the bucket with the largest rows (softmax's S=1
            # edge has its own)
            note = [line.strip().removeprefix("# ") for line in text.splitlines() if "# persistent:" in line][
                -1
            ]
            launch = bare_launches(aot, inputs)
            ms = triton.testing.do_bench(launch, return_mode="median")
            gbs = nbytes / (ms * 1e-3) / 1e9
            rows = inputs[0].numel() // inputs[0].shape[-1]
            lines.append(
                f"| {name} | {rows}x{inputs[0].shape[-1]} | {tile or 'one row'} | {note} | "
                f"{ms * 1e3:.1f} | {gbs:.0f} | {100 * gbs / copy:.0f}% |"
            )
            print(lines[-1], flush=True)
    print_table(lines, args.out)


if __name__ == "__main__":
    main()
