"""Two generated modules of the seed's RMSNorm side by side, interleaved in one run (an A/B of a
generator change: export the old one from the old commit, e.g. ``git show REV:generated/x.py > a.py``).

    . .gpu/env.sh && python3 tools/ab_modules.py A.py B.py [--sizes 1,15,128,1024,2048] [--rounds 5]

Prints per size the median over rounds of each module's per-call µs and of B / A within a round.
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

import torch

from thunder_aot.bench import interleaved_times
from thunder_aot.examples.gpt_oss import rmsnorm
from thunder_aot.verify import load_module_from_text


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--sizes", default="1,15,128,1024,2048")
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    torch.set_num_threads(1)
    source = rmsnorm().cuda()
    a, b = (
        load_module_from_text(Path(p).read_text(), f"ab_{i}").GptOssRMSNorm.from_module(source)
        for i, p in enumerate((args.a, args.b))
    )
    print("| S | A µs | B µs | B / A |\n|---|---|---|---|")
    for s in [int(v) for v in args.sizes.split(",")]:
        x = torch.randn(1, s, 2880, device="cuda", dtype=torch.bfloat16)
        torch.testing.assert_close(a(x), b(x))
        times = interleaved_times({"a": lambda: a(x), "b": lambda: b(x)}, args.rounds, 0.1)
        ratio = statistics.median(tb / ta for ta, tb in zip(times["a"], times["b"]))
        print(
            f"| {s} | {statistics.median(times['a']):.2f} | "
            f"{statistics.median(times['b']):.2f} | {ratio:.2f} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
