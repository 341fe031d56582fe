"""Wall time of ``thunder-aot --help`` and ``thunder-aot export --help`` in fresh processes: median of
5 each (the CLI imports nothing heavy before it parses). No test times this: a benchmark, run by hand.

    python3 tools/cli_help_time.py --out OUT.md
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def seconds(args: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "thunder_aot", *args], cwd=ROOT, capture_output=True, check=True)
    return time.perf_counter() - start


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--out")
    args = ap.parse_args()
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
    ).stdout.strip()
    lines = [
        "# `thunder-aot --help` wall time (fresh process each run)",
        "",
        f"Command: `python3 tools/cli_help_time.py --runs {args.runs}`; "
        f"tree {commit} (+ uncommitted changes, if any)",
        "",
        "| command | median s | runs (s) |",
        "|---|---|---|",
    ]
    for argv in (["--help"], ["export", "--help"], ["--version"]):
        runs = [seconds(argv) for _ in range(args.runs)]
        lines.append(
            f"| `thunder-aot {' '.join(argv)}` | {statistics.median(runs):.3f} | "
            f"{', '.join(f'{r:.3f}' for r in runs)} |"
        )
        print(lines[-1], flush=True)
    if args.out:
        Path(args.out).write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
