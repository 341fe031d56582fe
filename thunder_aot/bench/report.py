"""Reports: bench.md, bench.json, bench.png, and torch.utils.benchmark's Compare table."""

from __future__ import annotations

import json
import sys
from dataclasses import asdict
from pathlib import Path

from thunder_aot.bench.records import Report


def write_json(report: Report, path: Path) -> None:
    path.write_text(json.dumps(asdict(report), indent=1, sort_keys=True) + "\n")


def write_markdown(report: Report, path: Path) -> None:
    lines = [
        f"# {report.title}",
        "",
        f"    {report.command}",
        "",
        f"Device: {report.device}. " + ", ".join(f"{k} {v}" for k, v in report.versions.items()) + ".",
        "",
        "Per call, host + device, µs (median of interleaved rounds):",
        "",
        "| shape | " + " | ".join(report.systems) + " |",
        "|---" * (len(report.systems) + 1) + "|",
    ]
    for point in report.points:
        cells = []
        for system in report.systems:
            m = report.value(system, point)
            cells.append("" if m is None else f"{m.us_per_call:.1f}")
        lines.append(f"| {point} | " + " | ".join(cells) + " |")
    ratio_columns = ratio_pairs(report)
    if ratio_columns:
        lines += [
            "",
            "Ratios of per-call times (lower is better for the first system named):",
            "",
            "| shape | " + " | ".join(f"{a} / {b}" for a, b in ratio_columns) + " |",
            "|---" * (len(ratio_columns) + 1) + "|",
        ]
        for point in report.points:
            cells = []
            for a, b in ratio_columns:
                ma, mb = report.value(a, point), report.value(b, point)
                cells.append(f"{ma.us_per_call / mb.us_per_call:.2f}" if ma and mb else "")
            lines.append(f"| {point} | " + " | ".join(cells) + " |")
    device_rows = [m for m in report.measurements if m.device_us is not None]
    if device_rows and not any(m.gb_per_s for m in device_rows):  # no byte count (a whole model)
        lines += [
            "",
            "Device time per call (CUDA events, back-to-back calls):",
            "",
            "| shape | system | device µs |",
            "|---|---|---|",
        ]
        lines += [f"| {m.point} | {m.system} | {m.device_us:.2f} |" for m in device_rows]
    elif device_rows:
        lines += [
            "",
            f"Device time per call (CUDA events, back-to-back calls) and achieved bandwidth; "
            f"a device-to-device copy moves {report.copy_gb_per_s:.0f} GB/s:",
            "",
            "| shape | system | device µs | GB/s | % of copy |",
            "|---|---|---|---|---|",
        ]
        for m in device_rows:
            share = (
                f"{100 * m.gb_per_s / report.copy_gb_per_s:.0f}%"
                if m.gb_per_s and report.copy_gb_per_s
                else ""
            )
            lines.append(
                f"| {m.point} | {m.system} | {m.device_us:.2f} | "
                f"{f'{m.gb_per_s:.0f}' if m.gb_per_s else ''} | {share} |"
            )
    if report.skipped:
        lines += ["", "Skipped:", ""] + [f"- {s}: {why}" for s, why in sorted(report.skipped.items())]
    path.write_text("\n".join(lines) + "\n")


def floor_of(system: str) -> str:
    """``thunder-aot(nvfuser)`` and ``thunder-aot(nvfuser, unchecked)`` -> ``bare launch(nvfuser)``:
    both modules launch the same kernels."""
    return "bare launch(" + system.removeprefix("thunder-aot(").split(",")[0].rstrip(")") + ")"


def ratio_pairs(report: Report) -> list[tuple[str, str]]:
    """Each thunder-aot system against its own kernels' bare launch, Thunder's FD.execute,
    torch.compile and eager (those present)."""
    pairs = []
    for system in report.systems:
        if not system.startswith("thunder-aot("):
            continue
        floor = floor_of(system)
        for other in (floor, "FD.execute", "torch.compile", "torch.compile(reduce-overhead)", "Eager"):
            if other in report.systems and (other != "FD.execute" or "nvfuser" in system):
                pairs.append((system, other))
    return pairs


def write_plot(report: Report, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5), dpi=110)
    for system in report.systems:
        rows = sorted((m.rows, m.us_per_call) for m in report.measurements if m.system == system)
        if rows:
            ax.plot([r for r, _ in rows], [t for _, t in rows], marker="o", label=system)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("rows of the first input (tokens)")
    ax.set_ylabel("µs per call (host + device)")
    ax.set_title(report.title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, metadata={"Software": None})
    plt.close(fig)


def write_reports(report: Report, out: Path) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / "bench.json", out / "bench.md"]
    write_json(report, paths[0])
    write_markdown(report, paths[1])
    try:
        write_plot(report, out / "bench.png")
        paths.append(out / "bench.png")
    except ImportError:
        report.skipped["plot"] = "matplotlib is not installed (pip install thunder-aot[bench])"
        write_markdown(report, paths[1])
    return paths


def print_compare(report: Report) -> None:
    """The report as torch.utils.benchmark's Compare table (per call, µs), then what was skipped."""
    from torch.utils.benchmark import Compare
    from torch.utils.benchmark.utils.common import Measurement as TorchMeasurement
    from torch.utils.benchmark.utils.common import TaskSpec

    rows = [
        TorchMeasurement(
            number_per_run=1,
            raw_times=[m.us_per_call * 1e-6],
            task_spec=TaskSpec(
                stmt=m.system,
                setup="",
                label=report.title,
                sub_label=m.point,
                description=m.system,
                num_threads=1,
            ),
        )
        for m in report.measurements
    ]
    if rows:
        compare = Compare(rows)
        compare.trim_significant_figures()
        print(compare)
    for system, why in sorted(report.skipped.items()):
        print(f"skipped {system}: {why}", file=sys.stderr)


def print_table(lines: list[str], out: str | None) -> None:
    """Print a markdown table (the bench scripts' results) and, with ``out``, write it there."""
    text = "\n".join(lines) + "\n"
    print(text)
    if out:
        Path(out).write_text(text)
