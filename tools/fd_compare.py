"""Why is our FusionDefinition slower per call than Thunder's for the same program? Print Thunder's
definition next to ours and time both, interleaved, on the same inputs.

    . .gpu/env.sh && python3 tools/fd_compare.py --out OUT.md
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
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    import thunder
    import thunder.examine

    torch.set_num_threads(1)
    gen = load_module_from_text(Path("generated/rmsnorm_nvfuser.py").read_text(), "fdc_gen")
    source = rmsnorm().cuda()
    report = []
    for s in (1, 1024):
        x = torch.randn(1, s, 2880, device="cuda", dtype=torch.bfloat16)
        tj = thunder.jit(source)
        tj(x)
        thunder_fd = thunder.examine.get_fusions(thunder.last_traces(tj)[-1])[0][1].last_used
        ours = gen.fusion0.by_size.get(s) or gen.fusion0.record(s)
        fargs = [x, source.weight]
        ours.execute(fargs)
        if s == 1024:
            report += [
                "## Thunder's FusionDefinition (S=1024)",
                "```python",
                repr(thunder_fd),
                "```",
                "## ours",
                "```python",
                repr(ours.fd),
                "```",
            ]
        cases = {
            "thunder fd.execute(list)": lambda: thunder_fd.execute(fargs),
            "our fd.execute(list)": lambda: ours.execute(fargs),
            "our fd.execute([x, w])": lambda: ours.execute([x, source.weight]),
        }
        times = interleaved_times(cases, 5, 0.2)
        line = f"S={s}: " + ", ".join(f"{k} {statistics.median(v):.2f}" for k, v in times.items())
        print(line, flush=True)
        report.insert(0, "- " + line)
    text = "\n".join(report) + "\n"
    if args.out:
        Path(args.out).write_text(text)


if __name__ == "__main__":
    main()
