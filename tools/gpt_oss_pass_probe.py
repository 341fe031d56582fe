"""Contributor tooling (not part of thunder-aot): the small GPT-OSS causal LM served by a stack of
its exported mask layer (Triton), exported with the exporter's passes switched off one by one, each
judged on the same token ids against float64: the error of its last-token logits next to eager's.
Tells a numerical change of one pass from the spread that MoE routing flips give every system.

    python tools/gpt_oss_pass_probe.py [--seeds 6]
"""

from __future__ import annotations

import argparse
import copy
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

CONFIGS = [
    "all passes",
    "no join",
    "no join, no gather",
    "no join, no gather, no write-back",
    "none, tl.max for amax",
]


def _export(config: str) -> str:
    import thunder_aot.exporter.writeback as writeback
    from tests.test_real_models import GPT_OSS_MASK_SHAPES
    from thunder_aot.backends.triton import TritonBackend, lowering
    from thunder_aot.exporter import ExportRequest, export

    saved = (
        TritonBackend.joins_regions,
        TritonBackend.gathers_region_inputs,
        writeback.drop_unobserved_write_backs,
        dict(lowering._REDUCE_IDENTITY),
        dict(lowering._COMBINE),
    )
    try:
        TritonBackend.joins_regions = "join" not in config and not config.startswith("none")
        TritonBackend.gathers_region_inputs = "gather" not in config and not config.startswith("none")
        if "write-back" in config or config.startswith("none"):
            writeback.drop_unobserved_write_backs = lambda bp: bp
        if "tl.max" in config:
            lowering._REDUCE_IDENTITY.update(
                {"amax": ("tl.max", 'float("-inf")'), "amin": ("tl.min", 'float("inf")')}
            )
            lowering._COMBINE.update({"tl.max": "tl.maximum({}, {})", "tl.min": "tl.minimum({}, {})"})
        return export(
            ExportRequest(
                "thunder_aot.examples.hf:gpt_oss_small_decoder_layer_mask",
                (GPT_OSS_MASK_SHAPES,),
                backend="triton",
            ),
            verify=False,
        )
    finally:
        (
            TritonBackend.joins_regions,
            TritonBackend.gathers_region_inputs,
            writeback.drop_unobserved_write_backs,
        ) = saved[:3]
        for table, before in ((lowering._REDUCE_IDENTITY, saved[3]), (lowering._COMBINE, saved[4])):
            table.clear()
            table.update(before)


def _rms(a: torch.Tensor, b: torch.Tensor) -> float:
    return (a.double() - b.double()).pow(2).mean().sqrt().item()


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, default=6)
    parser.add_argument("--tokens", default="23,32")
    parser.add_argument("--configs", type=int, default=len(CONFIGS))
    args = parser.parse_args()
    from thunder_aot.examples.hf import gpt_oss_small_causal_lm
    from thunder_aot.layers import LastTokenLogits, StackAdapter
    from thunder_aot.verify import load_module_from_text
    from thunder_aot.verify.judge import run64

    device = "cuda" if torch.cuda.is_available() else "cpu"  # (CPU: under TRITON_INTERPRET=1, a smoke run)
    model = gpt_oss_small_causal_lm().to(device)
    upcast = LastTokenLogits(copy.deepcopy(model).to(torch.float64))
    cases = []
    for tokens in (int(t) for t in args.tokens.split(",")):
        for seed in range(args.seeds):
            ids = torch.randint(0, 512, (1, tokens), generator=torch.Generator().manual_seed(seed)).to(device)
            with torch.no_grad():
                eager = LastTokenLogits(model)(ids)
                exact = run64(upcast, [ids], upcast=upcast)
            exact = exact[0] if isinstance(exact, (tuple, list)) else exact
            cases.append((tokens, seed, ids, eager, exact))
            print(f"S={tokens} seed={seed}: eager error {_rms(eager, exact):.4f}", flush=True)
    for config in CONFIGS[: args.configs]:
        gen = load_module_from_text(_export(config), f"probe_{CONFIGS.index(config)}")
        adapter = StackAdapter(model, gen.DecoderLayerMaskCall)
        errors = []
        with torch.no_grad():
            for _tokens, _seed, ids, eager, exact in cases:
                got = adapter(ids, use_cache=False, logits_to_keep=1).logits[:, -1]
                errors.append(f"{_rms(got.reshape(exact.shape), exact) / max(_rms(eager, exact), 1e-12):.2f}")
        print(f"{config}: error / eager's per case: {' '.join(errors)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
