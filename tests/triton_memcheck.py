"""Run every Triton kernel in generated/, and those of the gathering and joined regions of
tests/kernel_pass_modules.py (exported here: indices read at run time), at their buckets' edges and
inside, with aligned and unaligned inputs; tests/test_gpu.py runs this under
``compute-sanitizer --tool memcheck``.

``triton_memcheck.py STEM [--eager]`` runs one module only (any of the lists below, sdpa_tail too), its
generated module or, with ``--eager``, the source module on the same inputs: which of the two an error
belongs to.

Outputs are compared with the source module run on the CPU, so a kernel that stays in bounds but
computes garbage fails too."""

from __future__ import annotations

import copy
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.examples import EXPORTS  # noqa: E402
from tests.kernel_pass_modules import COPIES, GATHERS, JOINS, ROUTINGS, TOPKS, VIEWS  # noqa: E402

#: the copies modules with a Triton kernel: sdpa_tail has none (only torch's sdpa, copy and linear),
#: and the run that took it ended inside it, 18 errors in all, with a CUDA launch failure
#: (the memcheck run at da6bd92 kept the log's tail only, so which kernels is
#: not known; the modules after it were not reached)
_COPY_KERNELS = [c for c in COPIES if c[2]]
from thunder_aot.frontend.resolve import resolve_module  # noqa: E402
from thunder_aot.shapes import parse_shapes  # noqa: E402
from thunder_aot.verify import bucket_inputs, load_module_from_text  # noqa: E402
from thunder_aot.verify.judge import check_chosen, run_recording_choices  # noqa: E402


def unaligned(t: torch.Tensor) -> torch.Tensor:
    """The same values, contiguous, one element past a 16-byte boundary."""
    buffer = torch.empty(t.numel() + 1, dtype=t.dtype, device=t.device)
    view = buffer[1:].view(t.shape)
    view.copy_(t)
    return view


def main(argv: list[str]) -> int:
    only = [a for a in argv if not a.startswith("--")]
    eager = "--eager" in argv
    calls = 0
    generator = torch.Generator().manual_seed(torch.seed() >> 1)
    from thunder_aot.pipeline import export
    from thunder_aot.request import ExportRequest

    texts = {stem: (ROOT / "generated" / f"{stem}_triton.py").read_text() for stem, _, _ in EXPORTS}
    kept = GATHERS + JOINS + ROUTINGS[:1] + (COPIES if only else _COPY_KERNELS) + VIEWS + TOPKS
    modules = [*EXPORTS, *((s.split(":")[1], s, shapes) for s, shapes, *_ in kept)]
    if only:
        modules = [m for m in modules if m[0] in only]
        if len(modules) != len(only):
            raise SystemExit(
                f"triton_memcheck.py: expected module names among {sorted(m[0] for m in modules)}, got {only}"
            )
    for stem, source, shapes in modules:
        text = texts.get(stem) or export(ExportRequest(source, (shapes,), backend="triton"), verify=False)
        gen = load_module_from_text(text, f"memcheck_{stem}")
        module = resolve_module(source).eval()
        aot = getattr(gen, type(module).__name__).from_module(copy.deepcopy(module).cuda())
        if eager:
            aot = copy.deepcopy(module).cuda()
        with torch.no_grad():
            for bucket in parse_shapes(shapes):
                for env, inputs in bucket_inputs(bucket, "cuda", generator):
                    cpu_inputs = [t.cpu() for t in inputs]
                    for variant in (inputs, [unaligned(t) for t in inputs]):
                        got, picks = run_recording_choices(
                            aot, variant
                        )  # (a router's top-k kernel hands its picks)
                        torch.cuda.synchronize()
                        got = got.cpu() if isinstance(got, torch.Tensor) else type(got)(g.cpu() for g in got)
                        check_chosen(module, cpu_inputs, got, picks, f"{stem} (triton) at {env}")
                        calls += 1
        print(f"{stem}: ok", flush=True)
    print(f"{calls} calls checked")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
