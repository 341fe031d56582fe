"""Small transformer blocks with several fusion regions and unfused ops (matmuls)."""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from thunder_aot.examples.gpt_oss import GptOssRMSNorm


class GatedMLP(nn.Module):
    """Llama-style SwiGLU MLP: down(silu(gate(x)) * up(x)); the linears stay torch calls."""

    def __init__(self, hidden: int = 256, intermediate: int = 512) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(hidden, intermediate, bias=False)
        self.up_proj = nn.Linear(hidden, intermediate, bias=False)
        self.down_proj = nn.Linear(intermediate, hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class ResidualRMSNorm(nn.Module):
    """Residual add followed by RMSNorm, returning (normed, new residual) as fused-add-norm kernels do."""

    def __init__(self, hidden: int = 2880, eps: float = 1e-5) -> None:
        super().__init__()
        self.norm = GptOssRMSNorm(hidden, eps)

    def forward(self, x: torch.Tensor, residual: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        residual = x + residual
        return self.norm(residual), residual


def _randomize(module: nn.Module, seed: int) -> nn.Module:
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * (p.shape[-1] ** -0.5 if p.ndim > 1 else 0.1) + (p.ndim == 1))
    return module.requires_grad_(False)


def gated_mlp() -> GatedMLP:
    return _randomize(GatedMLP(), seed=1)


def residual_rmsnorm() -> ResidualRMSNorm:
    return _randomize(ResidualRMSNorm(), seed=2)
