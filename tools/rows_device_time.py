r"""Device time of one module's Triton and nvFuser exports at one large size, side by side, without
the bench's other systems (issue 17: every Triton module of generated/ within 1.1x of the nvFuser
module's device time at 16384 rows or more). The bench's own run at 16384x16384 and 16384x32000
spent its step limit compiling torch.compile and checking every system on CPU-made inputs.

    . .gpu/env.sh && python3 tools/rows_device_time.py SOURCE SHAPES SIZE \
        [--variants] [--rounds 5] [--out FILE]

Both exports are checked against a float64 run of the source on the same inputs (random, on the
GPU) before they are timed. ``--variants`` also times Triton kernel variants made by editing the
export's text (for a kernel whose row width N is a run-time argument: N the constant SIZE, as a
bucket of one width would compile it; rows that read one row of an input broadcast over heads run
as neighbours; half, twice, four and eight times the warps, alone and with those): what a schedule
change would buy, measured before it is made.
"""

from __future__ import annotations

import argparse
import re
import statistics
from pathlib import Path

import torch

from thunder_aot.bench import device_time_us
from thunder_aot.frontend.resolve import resolve_module
from thunder_aot.ir import dim_value
from thunder_aot.pipeline import export
from thunder_aot.request import ExportRequest
from thunder_aot.shapes import parse_shapes
from thunder_aot.verify import load_module_from_text
from thunder_aot.verify.judge import reference64


def variants(text: str, size: int) -> dict[str, str]:
    """Triton export text -> the variants' texts (only those that change it). ``size``: the row
    width a run-time N takes in this measurement."""
    out = {}
    # the row width a compile-time constant (as for a bucket of one width): what a run-time N costs
    fixed = text.replace("    N = N_units * N_UNIT\n", f"    N = {size}\n")
    # rows that read the same row of an input broadcast over H leading rows (an attention mask over
    # heads: ``row % S``) run as neighbours: program p takes row (p % H) * S + p // H
    grid = re.search(r"_kernel\[1\]\(\s*(\d+) \* S,\s*1,\s*1,", text)
    neighbours = text
    if grid and "(row % S)" in text:
        neighbours = text.replace(
            "row = tl.program_id(0).to(tl.int64)\n",
            f"row = tl.program_id(0).to(tl.int64)\n    row = (row % {grid[1]}) * S + row // {grid[1]}\n",
        )
    for name, body in (("N constexpr", fixed), ("broadcast rows adjacent", neighbours)):
        if body != text:
            out[name] = body
    for factor in (0.5, 2, 4, 8):
        for base, label in ((text, ""), (fixed, "N constexpr, "), (neighbours, "broadcast rows adjacent, ")):
            if label and (base == text or factor in (0.5, 8)):
                continue
            more = re.sub(
                r"num_warps=(\d+)(?=[,)])",
                lambda m: f"num_warps={max(1, min(32, int(int(m[1]) * factor)))}",
                base,
            )
            if more != base:
                out[f"{label}warps {'/2' if factor == 0.5 else f'x{factor}'}"] = more
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("source")
    ap.add_argument("shapes")
    ap.add_argument("size", type=int)
    ap.add_argument("--variants", action="store_true")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    torch.set_grad_enabled(False)
    (bucket,) = parse_shapes(args.shapes)
    (dim,) = bucket.dims
    env = {dim.name: args.size}
    module = resolve_module(args.source).eval().cuda()
    gen = torch.Generator(device="cuda").manual_seed(0)
    inputs = [
        torch.randn(
            [dim_value(d, env) for d in spec.shape],
            device="cuda",
            dtype=getattr(torch, spec.dtype),
            generator=gen,
        )
        for spec in bucket.inputs
    ]
    reference = reference64(module, inputs)
    if reference is None:  # a module that cannot run in float64: against eager
        reference = module(*inputs)
    systems = {}
    for backend in ("nvfuser", "triton"):
        text = export(ExportRequest(args.source, (args.shapes,), backend=backend), verify=False)
        texts = {f"thunder-aot({backend})": text}
        if backend == "triton" and args.variants:
            texts |= {f"thunder-aot(triton), {k}": v for k, v in variants(text, args.size).items()}
        for k, (name, body) in enumerate(texts.items()):
            aot = getattr(
                load_module_from_text(body, f"rows_{backend}_{k}"), type(module).__name__
            ).from_module(module)
            got = aot(*inputs)
            got, want = (got if isinstance(got, tuple) else (got,)), (
                reference if isinstance(reference, tuple) else (reference,)
            )
            errors = [float((g.double() - w).norm() / w.norm()) for g, w in zip(got, want)]
            systems[name] = (lambda aot=aot: aot(*inputs), errors)
    samples = {name: [] for name in systems}
    for _ in range(args.rounds):
        for name, (call, _) in systems.items():
            samples[name].append(device_time_us(call))
    base = statistics.median(samples["thunder-aot(nvfuser)"])
    shapes = ", ".join("x".join(str(dim_value(d, env)) for d in s.shape) for s in bucket.inputs)
    lines = [
        f"{args.source} at {shapes}: device µs per call "
        f"(CUDA events, 50 back-to-back calls, median of {args.rounds} rounds)",
        "",
        "| system | device µs | / nvFuser | rel. error vs float64 |",
        "|---|---|---|---|",
    ]
    for name, times in samples.items():
        t = statistics.median(times)
        lines.append(
            f"| {name} | {t:.2f} | {t / base:.2f} | {', '.join(f'{e:.1e}' for e in systems[name][1])} |"
        )
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        Path(args.out).write_text(text)


if __name__ == "__main__":
    main()
