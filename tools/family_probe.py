"""Which transformers decoder layers the Triton backend takes whole: a small layer of each family
(the examples' sizes: hidden 256, 4 heads, 2 KV heads, intermediate 512, sdpa attention, grouped-mm
experts) built into a Triton program on CPU, printing the torch calls outside tests.examples.TRITON_CALLS
and the regions without a kernel. Structure only: no verification (export a family's layer with
TRITON_INTERPRET=1 to check its numerics).

    PYTHONPATH=. .venv/bin/python tools/family_probe.py [bf16] [family ...]
    (default: every family below, float32)

MoE layers want bf16 (transformers' grouped-mm experts fall back to a custom op Thunder cannot trace
in float32 on CPU).
"""

from __future__ import annotations

import importlib
import sys

import torch

import thunder_aot.examples.hf as hf
from tests.examples import TRITON_CALLS
from thunder_aot.backends import get_backend
from thunder_aot.ir import TorchCall
from thunder_aot.pipeline import build_program, regions_without_kernels
from thunder_aot.request import ExportRequest

#: family (transformers.models.<family>) -> (config class, decoder layer class, config fields)
FAMILIES = {
    "helium": ("HeliumConfig", "HeliumDecoderLayer", dict(head_dim=64)),
    "exaone4": (
        "Exaone4Config",
        "Exaone4DecoderLayer",
        dict(head_dim=64, layer_types=["full_attention"] * 2),
    ),
    "glm4": ("Glm4Config", "Glm4DecoderLayer", dict(head_dim=64)),
    "ernie4_5": ("Ernie4_5Config", "Ernie4_5DecoderLayer", dict(head_dim=64)),
    "arcee": ("ArceeConfig", "ArceeDecoderLayer", dict(head_dim=64)),
    "apertus": ("ApertusConfig", "ApertusDecoderLayer", dict(head_dim=64)),
    "seed_oss": ("SeedOssConfig", "SeedOssDecoderLayer", dict(head_dim=64)),
    "smollm3": ("SmolLM3Config", "SmolLM3DecoderLayer", dict(head_dim=64)),
    "olmo3": ("Olmo3Config", "Olmo3DecoderLayer", dict(layer_types=["full_attention"] * 2)),
    "glm4_moe": (
        "Glm4MoeConfig",
        "Glm4MoeDecoderLayer",
        dict(
            head_dim=64,
            n_routed_experts=4,
            num_experts_per_tok=2,
            first_k_dense_replace=1,
            moe_intermediate_size=128,
        ),
    ),
    "hunyuan_v1_dense": ("HunYuanDenseV1Config", "HunYuanDenseV1DecoderLayer", dict(head_dim=64)),
    "bitnet": ("BitNetConfig", "BitNetDecoderLayer", dict(head_dim=64)),
    "doge": ("DogeConfig", "DogeDecoderLayer", dict()),
    "mixtral": (
        "MixtralConfig",
        "MixtralDecoderLayer",
        dict(head_dim=64, num_local_experts=4, num_experts_per_tok=2),
    ),
    "granitemoe": (
        "GraniteMoeConfig",
        "GraniteMoeDecoderLayer",
        dict(num_local_experts=4, num_experts_per_tok=2),
    ),
    "phimoe": ("PhimoeConfig", "PhimoeDecoderLayer", dict(num_local_experts=4, num_experts_per_tok=2)),
}


def probe(family: str, bf16: bool) -> str:
    config_name, layer_name, fields = FAMILIES[family]
    modeling = importlib.import_module(f"transformers.models.{family}.modeling_{family}")
    configuration = importlib.import_module(f"transformers.models.{family}.configuration_{family}")
    config = hf._small_config(getattr(configuration, config_name), **fields)
    config._experts_implementation = "grouped_mm"

    def factory():
        layer = hf._randomize(hf.DecoderLayer(getattr(modeling, layer_name)(config, 0)), 60)
        return layer.to(torch.bfloat16) if bf16 else layer

    name = f"_probe_{family}"
    setattr(hf, name, factory)  # export imports its source by path
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    width = int(head_dim * getattr(config, "partial_rotary_factor", 1.0))
    dtype, rows = (":bf16", 32) if bf16 else ("", 64)
    shapes = f"1x[S=1..{rows}]x256{dtype}, 1x[S]x{width}{dtype}, 1x[S]x{width}{dtype}"
    program, _, _ = build_program(
        ExportRequest(f"thunder_aot.examples.hf:{name}", (shapes,), backend="triton"), progress=lambda m: None
    )
    calls = {s.target for bp in program.programs for s in bp.steps if isinstance(s, TorchCall)}
    missing = regions_without_kernels(program, get_backend("triton"))
    return f"| {family} | `{shapes}` | {', '.join(sorted(calls - TRITON_CALLS)) or '-'} | {len(missing)} |"


def main() -> None:
    args = sys.argv[1:]
    bf16 = bool(args) and args[0] == "bf16"
    families = [a for a in args if a != "bf16"] or list(FAMILIES)
    print(
        "| family | shapes | torch calls outside TRITON_CALLS | regions without a kernel |\n|---|---|---|---|"
    )
    for family in families:
        try:
            print(probe(family, bf16), flush=True)
        except Exception as error:  # a family this transformers lacks, or Thunder cannot trace
            print(f"| {family} | | error: {type(error).__name__}: {str(error)[:200]} | |", flush=True)


if __name__ == "__main__":
    main()
