"""Hot-path cost of each layer around the bare FusionDefinition call, A/B in one run.

    . .gpu/env.sh && python3 bench/overhead.py [--out bench/results/overhead.md]

Each variant is timed in rounds, interleaved with the others (so drift of this shared machine
hits all of them alike); the table gives the median of the round medians in µs per call.
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

import torch
from torch.utils.benchmark import Timer

from thunder_aot.examples.gpt_oss import rmsnorm
from thunder_aot.verify import load_module_from_text


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--generated", default="generated/rmsnorm_nvfuser.py")
    ap.add_argument("--sizes", default="1,15,128,1024,2048")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    torch.set_num_threads(1)
    gen = load_module_from_text(Path(args.generated).read_text(), "overhead_gen")
    source = rmsnorm().cuda()
    aot = gen.GptOssRMSNorm.from_module(source)
    lines = []
    for s in [int(v) for v in args.sizes.split(",")]:
        x = torch.randn(1, s, 2880, device="cuda", dtype=torch.bfloat16)
        w = source.weight
        aot(x)
        fd = getattr(gen, "bucket0_fusion0") if s == 15 else gen._specialized(gen.bucket3_fusion0, gen.define_bucket3_fusion0, (s,))
        opts = dict(device=None, override_user_schedule=False, capture_debug_output=False, profile=False, _enable_options=[], _disable_options=[])
        cases = {
            "fd.execute": lambda: fd.execute([x, w]),
            "fd._execute(**opts)": lambda: fd._execute([x, w], **opts),
            "fd.fec.execute(inputs)": lambda: fd.fec.execute([x, w]),
            "checks only": lambda: x.is_cuda and x.is_contiguous() and x.dtype is torch.bfloat16 and len(x.shape) == 3 and x.shape[0] == 1 and 1 <= x.shape[1] <= 2048 and x.shape[2] == 2880,
            "generated forward()": lambda: gen.forward(x, w),
            "generated module()": lambda: aot(x),
        }
        samples: dict[str, list[float]] = {k: [] for k in cases}
        for k, f in list(cases.items()):
            try:
                f()
            except Exception as e:
                print(f"S={s} {k}: {type(e).__name__}: {str(e).splitlines()[0][:160]}")
                del cases[k]
                samples[k] = [float("nan")]
        for _ in range(args.rounds):
            for k, f in cases.items():
                samples[k].append(Timer(stmt="f()", globals={"f": f}).blocked_autorange(min_run_time=0.2).median * 1e6)
        row = {k: statistics.median(v) for k, v in samples.items()}
        base = row["fd.execute"]
        line = f"| {s} | " + " | ".join(f"{v:.2f}" for v in row.values()) + f" | {row['generated module()'] / base:.2f} |"
        lines.append(line)
        print(line, flush=True)
    header = "| S | " + " | ".join(samples) + " | module / fd.execute |\n" + "|---" * (len(samples) + 2) + "|"
    table = header + "\n" + "\n".join(lines) + "\n"
    print(table)
    if args.out:
        Path(args.out).write_text(table)


if __name__ == "__main__":
    main()
