"""Where each generated Triton module's per-call time goes beyond its bare launch, module by module
(µs per call, median of interleaved rounds, one bucket point each, gradients off):

    . .gpu/env.sh && python3 tools/hotpath_modules.py [--rounds 5] [--out OUT.md]

Columns: the bare ``CompiledKernel.run`` into preallocated outputs with tensors (what the bench
tables call "bare launch"), the same with the tensors' addresses as ints (Triton's launcher then
calls no ``data_ptr()``; the module passes ints too, to the C launch function under
``CompiledKernel.run``, a little cheaper still), the module's C++ guard alone, ``_FAST``'s lookup,
the generated ``forward()`` and the module call. Each module is the checked-in
``generated/<stem>_triton.py``, built from its source with ``from_module``.
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

import torch

from thunder_aot.bench import bare_launches, interleaved_times, points_for, print_table
from thunder_aot.codegen.header import regenerate_command
from thunder_aot.frontend.resolve import resolve_module
from thunder_aot.shapes import parse_shapes
from thunder_aot.verify import load_module_from_text, random_inputs

#: module stem -> the size of the dynamic dim (tokens) to time at
STEMS = {
    "rmsnorm": 128,
    "gelu_gate": 128,
    "layer_norm": 128,
    "residual_rmsnorm": 128,
    "rotary": 128,
    "softmax": 128,
}


def module_case(stem: str, size: int, device: str = "cuda"):
    """The generated module, its source and inputs with the dynamic dim at ``size``, from the
    file's regenerate line."""
    path = Path(f"generated/{stem}_triton.py")
    command = regenerate_command(path)  # [..., SOURCE, "--shapes", SPEC, ...]
    source = resolve_module(command[command.index("export") + 1]).to(device)
    buckets = parse_shapes(command[command.index("--shapes") + 1])
    point = next(p for b in buckets for p in points_for(b, [size]) if size in dict(p.env).values())
    bucket = point.bucket
    generator = torch.Generator().manual_seed(0)
    inputs = random_inputs(bucket, dict(point.env), device, generator)
    gen = load_module_from_text(path.read_text(), f"hotpath_{stem}")
    generated_class = getattr(gen, type(source).__name__)
    return gen, generated_class.from_module(source), inputs, point.label


def forward_arguments(gen, aot, inputs) -> tuple:
    """What the module passes to the generated ``forward`` function: its inputs, then parameters and
    buffers."""
    seen, real = [], gen.forward
    gen.forward = lambda *a: seen.append(a) or real(*a)
    try:
        aot(*inputs)
    finally:
        gen.forward = real
    return seen[0]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--min-run-time", type=float, default=0.05)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    torch.set_num_threads(1)
    torch.set_grad_enabled(False)
    names = ["bare launch", "bare launch, int pointers", "guard", "_FAST lookup", "forward()", "module()"]
    lines = [
        "| module | inputs | " + " | ".join(names) + " | module / bare | module - int-pointer launch |",
        "|---" * (len(names) + 4) + "|",
    ]
    for stem, size in STEMS.items():
        gen, aot, inputs, label = module_case(stem, size)
        aot(*inputs)
        first = inputs[0]
        fast = gen._FAST[first.shape]
        forward_args = forward_arguments(gen, aot, inputs)
        cases = {
            names[0]: bare_launches(aot, inputs),
            names[1]: bare_launches(aot, inputs, pointers=True),
            names[2]: lambda: fast[0](*forward_args),
            names[3]: lambda: gen._FAST.get(first.shape),
            names[4]: lambda: gen.forward(*forward_args),
            names[5]: lambda: aot(*inputs),
        }
        row = {
            k: statistics.median(v)
            for k, v in interleaved_times(cases, args.rounds, args.min_run_time).items()
        }
        ratio, extra = (
            row["module()"] / row["bare launch"],
            row["module()"] - row["bare launch, int pointers"],
        )
        lines.append(
            f"| {stem} | {label} | "
            + " | ".join(f"{v:.2f}" for v in row.values())
            + f" | {ratio:.2f} | {extra:.2f} |"
        )
        print(lines[-1], flush=True)
    print_table(lines, args.out)


if __name__ == "__main__":
    main()
