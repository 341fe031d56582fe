"""Contributor tooling (not part of thunder-aot): on the GPU machine, tracing the GPT-OSS-shaped
layer (thunder_aot.examples.hf:gpt_oss_decoder_layer) on the CPU crashed with a segmentation fault
at S >= 128 inside Thunder's computation (2026-12-01); on the development machine it does not.
Each probe runs in its own process (a crash ends only that probe):
  python3 tools/cpu_grouped_mm_probe.py eager|grouped_mm|mkldnn_off_export|export
"""

import sys

import torch

S = 128


def eager():
    from thunder_aot.examples.hf import gpt_oss_decoder_layer

    m = gpt_oss_decoder_layer()
    x, c, s = (
        torch.randn(1, S, 2880, dtype=torch.bfloat16),
        torch.randn(1, S, 32, dtype=torch.bfloat16),
        torch.randn(1, S, 32, dtype=torch.bfloat16),
    )
    with torch.no_grad():
        print("eager", m(x, c, s).float().abs().mean().item())


def grouped_mm():
    x = torch.randn(2 * S, 2880, dtype=torch.bfloat16)
    w = torch.randn(8, 2880, 5760, dtype=torch.bfloat16)
    offs = torch.tensor([32 * (i + 1) for i in range(8)], dtype=torch.int32)
    print("grouped_mm", torch._grouped_mm(x, w, offs).float().abs().mean().item())


def export(mkldnn: bool):
    from thunder_aot.api import export as run_export

    torch.backends.mkldnn.enabled = mkldnn
    text = run_export(
        "thunder_aot.examples.hf:gpt_oss_decoder_layer",
        f"1x{S}x2880:bf16, 1x{S}x32:bf16, 1x{S}x32:bf16",
        backend="triton",
        verify=False,
    )
    print("export", "mkldnn on" if mkldnn else "mkldnn off", len(text))


if __name__ == "__main__":
    import faulthandler

    faulthandler.enable()
    what = sys.argv[1]
    {
        "eager": eager,
        "grouped_mm": grouped_mm,
        "mkldnn_off_export": lambda: export(False),
        "export": lambda: export(True),
    }[what]()
