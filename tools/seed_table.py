"""The seed issue's benchmark, with columns for thunder-aot's generated modules.

Run on a CUDA machine with nvFuser (see docs/contributing.md, "GPU tests and benchmarks"):

    python3 tools/seed_table.py --out OUT     # writes OUT.md and OUT.json

Per call, host + device, torch.utils.benchmark's blocked_autorange with one CPU thread, as in the
seed; median of --rounds interleaved rounds. Every system's output is compared with eager before
it is timed.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import torch
from torch.utils.benchmark import Compare, Timer

from thunder_aot.examples.gpt_oss import SEED_SHAPES, rmsnorm
from thunder_aot.pipeline import export
from thunder_aot.request import ExportRequest
from thunder_aot.verify import load_module_from_text

SOURCE = "thunder_aot.examples.gpt_oss:rmsnorm"
SIZES = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default=",".join(map(str, SIZES)))
    ap.add_argument("--out", default=None)
    ap.add_argument("--generated", default="generated/rmsnorm_nvfuser.py")
    ap.add_argument("--min-run-time", type=float, default=0.1)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()

    import thunder
    import thunder.examine
    from thunder.dynamo import thunderfx

    torch.set_num_threads(1)
    torch._dynamo.config.recompile_limit = 64
    sizes = [int(s) for s in args.sizes.split(",")]
    source = rmsnorm().cuda()
    gen = load_module_from_text(Path(args.generated).read_text(), "seed_generated")
    aot = gen.GptOssRMSNorm.from_module(source)
    # the same export without its per-call checks (--unchecked), for the cost of the checks
    unchecked_text = export(
        ExportRequest(SOURCE, (SEED_SHAPES,), backend="nvfuser", checks=False), verify=False
    )
    unchecked = load_module_from_text(unchecked_text, "seed_unchecked").GptOssRMSNorm.from_module(source)
    results = []
    rows = {}
    for s in sizes:
        x = torch.randn(1, s, 2880, device="cuda", dtype=torch.bfloat16)
        tf = thunderfx(source)
        tc = torch.compile(source)
        tj = thunder.jit(source)
        tf(x)
        tj(x)
        tc(x)
        fusions = thunder.examine.get_fusions(thunder.last_traces(tj)[-1])
        fd_wrapper = fusions[0][1]
        fd = fd_wrapper.last_used
        fargs = [x, source.weight]
        systems = {
            "Eager": lambda: source(x),
            "ThunderFX": lambda: tf(x),
            "ThunderJIT": lambda: tj(x),
            "TorchCompile": lambda: tc(x),
            "FDWrapper": lambda: fd_wrapper(*fargs),
            "FD": lambda: fd.execute(fargs),
            "thunder-aot(nvfuser)": lambda: aot(x),
            "thunder-aot(nvfuser, unchecked)": lambda: unchecked(x),
        }
        expected = source(x)
        for name, fn in systems.items():
            out = fn()
            out = out[0] if isinstance(out, (list, tuple)) else out
            torch.testing.assert_close(
                out, expected, rtol=1.6e-2, atol=1e-2, msg=lambda m: f"{name} at S={s}: {m}"
            )
        # rounds interleave the systems, so this shared machine's drift hits all of them alike;
        # the ratio to FD is taken within each round, then the median over rounds is reported
        per_round: dict[str, list[float]] = {name: [] for name in systems}
        last = {}
        for _ in range(args.rounds):
            for name, fn in systems.items():
                m = Timer(
                    stmt="fn()",
                    globals={"fn": fn},
                    label="RMSNorm",
                    description=name,
                    sub_label=f"[1, {s}, 2880]",
                ).blocked_autorange(min_run_time=args.min_run_time)
                per_round[name].append(m.median * 1e6)
                last[name] = m
        results.extend(last.values())
        row = {name: statistics.median(v) for name, v in per_round.items()}
        for name, column in (
            ("thunder-aot(nvfuser)", "aot / FD"),
            ("thunder-aot(nvfuser, unchecked)", "unchecked / FD"),
        ):
            row[column] = statistics.median(a / f for a, f in zip(per_round[name], per_round["FD"]))
        rows[s] = row
        print(f"S={s}: " + ", ".join(f"{k} {v:.2f}" for k, v in row.items()), flush=True)
        if args.out:  # after every size: a run cut short keeps what it finished
            write(Path(args.out), rows)
    Compare(results).print()
    return 0


def write(out: Path, rows: dict) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(
        json.dumps(
            {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "us_per_call": rows},
            indent=1,
        )
    )
    names = list(next(iter(rows.values())))
    lines = ["| S | " + " | ".join(names) + " |", "|---" * (len(names) + 1) + "|"]
    for s, row in rows.items():
        lines.append(
            f"| {s} | "
            + " | ".join(f"{row[n]:.2f}" if n.endswith(" / FD") else f"{row[n]:.1f}" for n in names)
            + " |"
        )
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    sys.exit(main())
