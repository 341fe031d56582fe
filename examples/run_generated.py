"""Import a generated RMSNorm module, run it next to the source module, and show that it matches.

python examples/run_generated.py build/example/rmsnorm_torch.py
"""

from __future__ import annotations

import importlib.util
import sys

import torch

from thunder_aot.examples.gpt_oss import rmsnorm


def main(path: str) -> int:
    spec = importlib.util.spec_from_file_location("rmsnorm_generated", path)
    generated = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(generated)
    device = "cuda" if torch.cuda.is_available() and "nvfuser" in open(path).read() else "cpu"
    source = rmsnorm().to(device)
    module = generated.GptOssRMSNorm.from_module(source)
    print(f"{path}: buckets {', '.join(generated.BUCKETS)}")
    for tokens in (1, 15, 568, 1369, 2048):
        x = torch.randn(1, tokens, 2880, dtype=torch.bfloat16, device=device)
        with torch.no_grad():
            got, want = module(x), source(x)
        err = (got.float() - want.float()).abs().max().item()
        print(f"  [1, {tokens:4d}, 2880] bf16 -> {tuple(got.shape)} max |generated - eager| = {err:.3g}")
        torch.testing.assert_close(got, want, rtol=1.6e-2, atol=1e-2)
    try:
        module(torch.randn(1, 4096, 2880, dtype=torch.bfloat16, device=device))
    except generated.NoBucketError as e:
        print(f"  [1, 4096, 2880] -> {type(e).__name__}: {e}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
