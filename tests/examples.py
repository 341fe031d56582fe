"""The bundled exports that generated/ holds: one place for tests, the Makefile and the README."""

from __future__ import annotations

SEED_SHAPES = "1x15x2880:bf16; 1x568x2880:bf16; 1x1369x2880:bf16; 1x[1..2048]x2880:bf16"

#: (file stem, import path, shapes)
EXPORTS = [
    ("rmsnorm", "thunder_aot.examples.gpt_oss:rmsnorm", SEED_SHAPES),
    ("gated_mlp", "thunder_aot.examples.blocks:gated_mlp", "[1..512]x256:fp32"),
    ("residual_rmsnorm", "thunder_aot.examples.blocks:residual_rmsnorm", "1x[S=1..2048]x2880:bf16, 1x[S]x2880:bf16"),
]
BACKENDS = ["nvfuser", "torch"]
