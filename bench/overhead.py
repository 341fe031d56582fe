"""Hot-path cost around the bare FusionDefinition call, for choosing how generated code calls it.

    python3 bench/overhead.py
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch.utils.benchmark import Timer

from thunder_aot.examples.gpt_oss import rmsnorm
from thunder_aot.verify import load_module_from_text

torch.set_num_threads(1)
gen = load_module_from_text(Path("generated/rmsnorm_nvfuser.py").read_text(), "overhead_gen")
source = rmsnorm().cuda()
aot = gen.GptOssRMSNorm.from_module(source)
for s in (1, 15, 128, 1024, 2048):
    x = torch.randn(1, s, 2880, device="cuda", dtype=torch.bfloat16)
    w = source.weight
    fd = gen.bucket0_fusion0 if s == 15 else gen._specialized(gen.bucket3_fusion0, gen.define_bucket3_fusion0, (s,))
    checks = lambda: x.is_cuda and x.is_contiguous() and x.dtype is torch.bfloat16 and len(x.shape) == 3 and x.shape[0] == 1 and 1 <= x.shape[1] <= 2048 and x.shape[2] == 2880
    aot(x)
    cases = {
        "fd.execute": lambda: fd.execute([x, w]),
        "fd._execute(kw)": lambda: fd._execute([x, w], device=None, override_user_schedule=False, capture_debug_output=False, profile=False, _enable_options=[], _disable_options=[]),
        "fd._execute(pos)": lambda: fd._execute([x, w], None, False, False, False, [], []),
        "checks only": checks,
        "forward()": lambda: gen.forward(x, w),
        "module()": lambda: aot(x),
    }
    row = {}
    for k, f in cases.items():
        try:
            f()
            row[k] = Timer(stmt="f()", globals={"f": f}).blocked_autorange(min_run_time=0.5).median * 1e6
        except Exception as e:  # report the variant that does not exist in this nvFuser and go on
            print(f"S={s} {k}: {type(e).__name__}: {str(e).splitlines()[0][:200]}")
            row[k] = float("nan")
    print(f"S={s:5d} " + "  ".join(f"{k} {v:6.2f}" for k, v in row.items()), flush=True)
