"""Run a generated module of generated/ with the running library versions replaced by simulated ones
(before the runtime first reads them), compare it with its source module at every bucket's edges
and inside, and print one JSON line saying which path its calls took. A script, run in a fresh
process by tests/test_versions.py and tests/test_gpu.py (the runtime decides at import).

    python tests/fast_path_check.py rmsnorm triton triton=3.7.0            # (TRITON_INTERPRET=1 on CPU)
    python tests/fast_path_check.py rmsnorm nvfuser nvfuser_direct=0.3.0

Prints ``{"fast": ..., "compiled": ..., "public_execute": ..., "warnings": [...], "checked": ...}``:
``fast`` is the runtime's decision; ``compiled`` how many binaries the Triton kernels hold for the
C launch (none on the public path); ``public_execute`` whether every nvFuser fusion runs through
``fd.execute``.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402, F401  (imported before the simulated versions are set, as it always was)


def main(stem: str, backend: str, *simulated: str) -> int:
    for item in simulated:
        package, version = item.split("=")
        importlib.import_module(package).__version__ = version
    device = "cpu" if os.environ.get("TRITON_INTERPRET") == "1" else "cuda"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        import thunder_aot
        from tests.examples import EXPORTS
        from tests.helpers import compare_at_every_bucket
        from thunder_aot.frontend.resolve import resolve_module

        if device == "cpu":
            from thunder_aot.backends.triton import interpreter_rounds_like_the_gpu

            interpreter_rounds_like_the_gpu()
        gen = thunder_aot.load(ROOT / "generated" / f"{stem}_{backend}.py")
        _, source, shapes = next(e for e in EXPORTS if e[0] == stem)
        module = resolve_module(source).eval().to(device)
        aot = getattr(gen, type(module).__name__).from_module(module)
        checked, _ = compare_at_every_bucket(
            module, aot, gen, shapes, device, f"{stem} ({backend}, {simulated})"
        )
        checked_again, _ = compare_at_every_bucket(module, aot, gen, shapes, device, f"{stem} again")
    result: dict = {"checked": checked + checked_again}
    result["warnings"] = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
    if backend == "triton":
        from thunder_aot.runtime import triton as rt
        from thunder_aot.runtime.triton import Kernel

        result["fast"] = rt.FAST_LAUNCH
        result["compiled"] = sum(len(k.binaries) for k in vars(gen).values() if isinstance(k, Kernel))
    else:
        from thunder_aot.runtime import nvfuser as rn

        fusions = []
        for value in vars(gen).values():
            if isinstance(value, rn.Fusion):
                fusions.append(value)
            elif isinstance(value, rn.SizedFusions):
                fusions.extend(value.by_size.values())
        result["fast"] = all(rn._FAST_EXECUTE.values()) and bool(rn._FAST_EXECUTE)
        result["public_execute"] = bool(fusions) and all(f.execute == f.fd.execute for f in fusions)
        result["fusions"] = len(fusions)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
