r"""Run one generated Triton module through Triton's interpreter on CPU and compare it with its
source at every bucket's edges and inside, with outputs poisoned (NaN) so that an unwritten
element fails, and every load and store bounds-checked (tests/interpreter_bounds.py). A script,
run in a fresh process by tests/test_triton.py: the interpreter must be switched on before Triton
is first imported.

    TRITON_INTERPRET=1 python tests/triton_interpreted_check.py rmsnorm
    TRITON_INTERPRET=1 python tests/triton_interpreted_check.py \
        tests.view_modules:head_norm "1x[S=1..40]x256:bf16"

(a stem of generated/, or an import path and shapes exported here; the export's messages are
printed first, one per line starting with "export: ")
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

assert os.environ.get("TRITON_INTERPRET") == "1", "set TRITON_INTERPRET=1"
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from tests.examples import EXPORTS  # noqa: E402
from tests.helpers import compare_at_every_bucket  # noqa: E402
from thunder_aot.backends.triton import interpreter_rounds_like_the_gpu  # noqa: E402
from thunder_aot.frontend.resolve import resolve_module  # noqa: E402
from thunder_aot.runtime import GuardTable  # noqa: E402
from thunder_aot.verify import load_module_from_text  # noqa: E402


def main(stem: str, spec: str | None = None) -> int:
    from tests.interpreter_bounds import install

    interpreter_rounds_like_the_gpu()
    install()  # every masked lane of every load and store inside a tensor argument
    if spec is None:
        _, source, shapes = next(e for e in EXPORTS if e[0] == stem)
        text = (ROOT / "generated" / f"{stem}_triton.py").read_text()
    else:
        from thunder_aot.pipeline import export
        from thunder_aot.request import ExportRequest

        source, shapes = stem, spec
        text = export(
            ExportRequest(source, (shapes,), backend="triton"),
            verify=False,
            progress=lambda m: print(f"export: {m}", flush=True),
        )
        stem = source.split(":")[1]
    module = resolve_module(source).eval()
    gen = load_module_from_text(text, f"{stem}_triton")
    aot = getattr(gen, type(module).__name__).from_module(module)
    checked = 0
    # second pass: the direct path that CUDA takes on the current device (_device 0, on the checked
    # path and from the guard table's entries alike), with its allocation's CPU twin (same
    # arguments): the sizes and strides each output is allocated with are the ones the kernel
    # writes (its launch still runs in the interpreter: nothing is compiled for device 0). At each
    # bucket's smallest sizes, twice (the second call of a shape takes the guard table's entry): the
    # allocations are the bucket's expressions, and the first pass ran every size and value
    allocated = []
    for direct in (False, True):
        if direct:
            gen.eager_device = lambda t: 0
            gen.current_device = lambda: 0

            class OnDeviceZero(GuardTable):
                def record(self, shape, program, sizes, tensors):
                    super().record(shape, program, sizes, tensors)
                    if shape in self:
                        self[shape] = self.last = (*self[shape][:3], 0, *self[shape][4:])

            gen._FAST = OnDeviceZero()
            twin = torch._C._dynamo.guards._empty_strided_cpu
            gen.empty_strided_cuda = lambda *args: allocated.append(args) or twin(*args)
        label = f"{stem} (triton, interpreted{', direct allocation' if direct else ''})"
        for _ in range(2 if direct else 1):
            calls = compare_at_every_bucket(module, aot, gen, shapes, "cpu", label, smallest_only=direct)[0]
            checked += calls
        direct_calls = 2 * calls
    if "@triton.jit" in text:  # (a module whose regions all run as torch calls allocates nothing itself)
        assert len(allocated) >= direct_calls, (len(allocated), direct_calls)  # every direct call allocated
        assert len(gen._FAST) > 0  # the direct pass's later calls of a shape took the fast path
    print(f"ok {stem}: {checked} calls, {len(allocated)} direct allocations")
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:3]))
