"""Contributor tooling: how torch.compile traces generated Triton modules (GPU). For each named
module of generated/ and each dynamic setting, compile the module with ``fullgraph=True`` under
that setting, call it at two sizes of its first bucket's dynamic range, and print whether it traced
as one graph (else the break's first line), whether the outputs match the eager module's, and
``torch._dynamo.explain``'s graph count and break reasons (explain always traces with automatic
dynamic shapes, whatever the setting: its counts are not those of ``dynamic=True``).

    . .gpu/env.sh && python3 tools/compile_breaks.py softmax rmsnorm [--dynamic none,true]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.examples import EXPORTS  # noqa: E402
from thunder_aot.frontend.resolve import resolve_module  # noqa: E402
from thunder_aot.shapes import parse_shapes  # noqa: E402
from thunder_aot.verify import load_module_from_text, random_inputs  # noqa: E402


def inputs_at(shapes: str, size: int, generator: torch.Generator) -> list[torch.Tensor]:
    """Inputs of the first bucket with a dynamic range, every dynamic dim at ``size`` clamped into
    its range (seeded random values, on the GPU)."""
    bucket = next(b for b in parse_shapes(shapes) if b.dims)
    env = {d.name: min(max(size, d.lo), d.hi) for d in bucket.dims}
    return random_inputs(bucket, env, "cuda", generator)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("stems", nargs="+")
    ap.add_argument("--dynamic", default="none,true")
    ap.add_argument("--sizes", default="500,505")
    args = ap.parse_args()
    exports = {stem: (source, shapes) for stem, source, shapes in EXPORTS}
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for stem in args.stems:
            source, shapes = exports[stem]
            module = resolve_module(source).eval().cuda()
            for dynamic in args.dynamic.split(","):
                flag = {"none": None, "true": True, "false": False}[dynamic]
                gen = load_module_from_text(
                    (Path("generated") / f"{stem}_triton.py").read_text(), f"breaks_{stem}_{dynamic}"
                )
                aot = getattr(gen, type(module).__name__).from_module(module)
                torch._dynamo.reset()
                for size in [int(s) for s in args.sizes.split(",")]:
                    x = inputs_at(shapes, size, generator)
                    explained = torch._dynamo.explain(aot)(*x)
                    try:  # a graph break under this setting raises here
                        got, whole = torch.compile(aot, dynamic=flag, fullgraph=True)(*x), "yes"
                    except Exception as e:  # noqa: BLE001 (reported, then run with the break)
                        whole = f"no: {type(e).__name__}: {str(e).splitlines()[0][:160]}"
                        got = torch.compile(aot, dynamic=flag)(*x)
                    want = module(*x)
                    same = all(
                        torch.allclose(g.float(), w.float(), rtol=2e-2, atol=2e-2, equal_nan=True)
                        for g, w in zip(
                            got if isinstance(got, tuple) else (got,),
                            want if isinstance(want, tuple) else (want,),
                        )
                    )
                    reasons = sorted({str(b.reason).splitlines()[0][:160] for b in explained.break_reasons})
                    print(
                        f"{stem} dynamic={dynamic} size={size}: one_graph={whole} matches_eager={same} "
                        f"explain(automatic dynamic): graphs={explained.graph_count} "
                        f"breaks={explained.graph_break_count} reasons={reasons}",
                        flush=True,
                    )


if __name__ == "__main__":
    main()
