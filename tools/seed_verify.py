r"""Sound export's repeat run: every module of a set verified under 20 seeds, per backend.

A module's export is deterministic; what changes between two exports is verification's seed (its
random inputs, their non-finite positions, the sizes inside each bucket). So each module is exported
once per backend (or, for the bundled examples, read from ``generated/``, which ``thunder-aot check``
proves current) and then verified under seeds 0..19 exactly as ``export`` verifies it. A refusal is a
false refusal here: every module in these sets is correct.

    python3 tools/seed_verify.py --device cuda --backends nvfuser,triton \
        --out gpu.md
    TRITON_INTERPRET=1 python3 tools/seed_verify.py --device cpu --backends torch,triton \
        --out cpu.md

Sets: ``generated`` (the bundled examples), ``hf`` (transformers' own submodules,
tests.examples.HF_SUBMODULES), ``sound`` (tests.sound_modules.CORRECT, the modules once refused on
rounding).
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def cases(sets: list[str]) -> list[tuple[str, str, str, str | None]]:
    """(set, import path, shapes, generated/ file stem or None)."""
    from tests.examples import EXPORTS, HF_SUBMODULES
    from tests.sound_modules import CORRECT

    out = []
    if "generated" in sets:
        out += [("generated", source, shapes, stem) for stem, source, shapes in EXPORTS]
    if "hf" in sets:
        out += [("hf", source, shapes, None) for source, shapes, _ in HF_SUBMODULES]
    if "sound" in sets:
        out += [("sound", source, shapes, None) for source, shapes in CORRECT]
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--backends", default="nvfuser,triton")
    ap.add_argument("--sets", default="generated,hf,sound")
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument(
        "--modules", default="", help="only these (the import path's function names, comma-separated)"
    )
    ap.add_argument("--out", default=None)
    args = ap.parse_args()

    import torch

    from thunder_aot.errors import ExportError
    from thunder_aot.frontend.resolve import resolve_module
    from thunder_aot.pipeline import export
    from thunder_aot.request import ExportRequest
    from thunder_aot.shapes import parse_shapes
    from thunder_aot.verify import load_module_from_text, verify

    if "triton" in args.backends and args.device == "cpu":
        if os.environ.get("TRITON_INTERPRET") != "1":
            ap.error("Triton on the CPU runs through its interpreter: set TRITON_INTERPRET=1 before starting")
        from thunder_aot.backends.triton import interpreter_rounds_like_the_gpu

        interpreter_rounds_like_the_gpu()
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
    ).stdout.strip()
    dirty = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT, capture_output=True, text=True
    ).stdout.strip()
    where = torch.cuda.get_device_name() if args.device.startswith("cuda") else platform.processor() or "cpu"
    lines = [
        f"# Verification under {args.seeds} seeds ({args.device}: {where})",
        "",
        f"Command: `python3 tools/seed_verify.py --device {args.device} --backends {args.backends} "
        f"--sets {args.sets}`"
        + (" (TRITON_INTERPRET=1)" if os.environ.get("TRITON_INTERPRET") == "1" else ""),
        f"Tree: {commit or 'unknown'}{' + uncommitted changes' if dirty else ''}; torch {torch.__version__}",
        "",
        "| set | module | shapes | backend | seeds accepted | calls per seed | seconds | first refusal |",
        "|---|---|---|---|---|---|---|---|",
    ]
    refusals = 0
    for backend in args.backends.split(","):
        for group, source, shapes, stem in cases(args.sets.split(",")):
            if args.modules and source.split(":")[1] not in args.modules.split(","):
                continue
            started = time.perf_counter()
            module = resolve_module(source).eval()
            name = type(module).__name__
            try:
                if stem is not None:
                    text = (ROOT / "generated" / f"{stem}_{backend}.py").read_text()
                else:
                    text = export(ExportRequest(source, (shapes,), backend=backend), verify=False)
            except Exception as e:  # noqa: BLE001 - a module that cannot export is reported, not a crash
                lines.append(
                    f"| {group} | {source} | `{shapes}` | {backend} | export failed | | | "
                    f"{type(e).__name__}: {str(e)[:200]} |"
                )
                refusals += 1
                print(lines[-1], flush=True)
                continue
            accepted, calls, first = 0, 0, ""
            generated = load_module_from_text(
                text, f"seeds_{backend}_{source.split(':')[1]}"
            )  # one import: kernels compile once
            for seed in range(args.seeds):
                try:
                    calls = verify(
                        generated, module, parse_shapes(shapes), name, device=args.device, seed=seed
                    )
                    accepted += 1
                except ExportError as e:
                    first = first or " ".join(str(e).split())[:300]
                except Exception as e:  # noqa: BLE001
                    first = (
                        first
                        or f"{type(e).__name__}: {' '.join(str(e).split())[:200]} "
                        f"{traceback.format_exc(limit=-1).splitlines()[-2].strip()}"
                    )
            refusals += args.seeds - accepted
            seconds = time.perf_counter() - started
            lines.append(
                f"| {group} | {source.split(':')[1]} | `{shapes}` | {backend} | "
                f"{accepted}/{args.seeds} | {calls} | {seconds:.0f} | {first} |"
            )
            print(lines[-1], flush=True)
    lines += ["", f"False refusals: {refusals}."]
    text = "\n".join(lines) + "\n"
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text)
    print(lines[-1])
    return 1 if refusals else 0


if __name__ == "__main__":
    sys.exit(main())
