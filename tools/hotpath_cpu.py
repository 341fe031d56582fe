"""CPU stand-in for the Triton hot path of two generated rmsnorm_triton modules (an A/B without a GPU):
the launch is stubbed, the direct path forced; only the Python around the kernel is timed.

    python3 tools/hotpath_cpu.py OLD.py NEW.py     # NEW may be written for thunder_aot.runtime, OLD not
"""

import statistics
import sys
import timeit

import torch

sys.path.insert(0, ".")
from thunder_aot.examples.gpt_oss import rmsnorm
from thunder_aot.runtime import GuardTable
from thunder_aot.verify import load_module_from_text

src = rmsnorm()


def noop(*a):
    return None


class OnDeviceZero(GuardTable):  # entries of device 0 (a module for runtime 5 and older: a dict)
    def __setitem__(self, shape, entry):
        super().__setitem__(shape, (*entry[:3], 0, *entry[4:]))

    def record(self, shape, program, sizes, tensors):
        super().record(shape, program, sizes, tensors)
        if shape in self:
            self.last = self[shape]


def prep(path, name, new):
    g = load_module_from_text(open(path).read(), name)
    out = torch.empty(1, 16, 2880, dtype=torch.bfloat16)
    if new:
        g.INTERPRET = True
        g.eager_device = lambda t: 0
        g.current_device = lambda: 0
        g.raw_stream = lambda d: 0
        g.empty_strided_cuda = lambda *a: out
        g.fusion0.binaries[0] = (None, noop, ())
    else:
        g._INTERPRET = True
        g._eager_device = lambda t: 0
        g._current_device = lambda: 0
        g._raw_stream = lambda d: 0
        g._empty_strided_cuda = lambda *a: out
        g.bucket0_fusion0_compiled[0] = (None, noop, ())
    g._FAST = OnDeviceZero()
    return g.GptOssRMSNorm.from_module(src)


a = prep(sys.argv[1], "old_tr", "thunder_aot.runtime" in open(sys.argv[1]).read())
b = prep(sys.argv[2], "new_tr", "thunder_aot.runtime" in open(sys.argv[2]).read())
x = torch.randn(1, 16, 2880, dtype=torch.bfloat16)

with torch.no_grad():
    a(x)
    b(x)
    n = 20_000
    ratios = []
    for _r in range(40):
        ta = timeit.timeit(lambda: a(x), number=n) / n * 1e9
        tb = timeit.timeit(lambda: b(x), number=n) / n * 1e9
        ratios.append(tb / ta)
    print(
        "new/old median of 40 interleaved rounds:",
        round(statistics.median(ratios), 3),
        "quartiles",
        [round(q, 3) for q in statistics.quantiles(ratios, n=4)],
    )
