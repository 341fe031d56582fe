"""GPT-OSS building blocks, written as transformers writes them (no transformers import)."""

from __future__ import annotations

import torch
from torch import nn

GPT_OSS_HIDDEN = 2880
GPT_OSS_EPS = 1e-5


class GptOssRMSNorm(nn.Module):
    """transformers' ``GptOssRMSNorm``: fp32 statistics and weight, output cast back to the input's dtype."""

    def __init__(self, hidden_size: int = GPT_OSS_HIDDEN, eps: float = GPT_OSS_EPS) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        input_dtype = hidden_states.dtype
        hidden_states = hidden_states.to(torch.float32)
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        return (self.weight * hidden_states).to(input_dtype)


def rmsnorm() -> GptOssRMSNorm:
    """The seed issue's module: GptOssRMSNorm(2880, eps=1e-5), weights drawn at random.

    Random (not all-ones) weights so that a wrong weight broadcast cannot pass a comparison.
    """
    gen = torch.Generator().manual_seed(0)
    module = GptOssRMSNorm()
    with torch.no_grad():
        module.weight.copy_(1.0 + 0.1 * torch.randn(GPT_OSS_HIDDEN, generator=gen))
    return module.requires_grad_(False)


#: the seed issue's buckets for its RMSNorm: three token counts it met, and every count up to 2048
SEED_SHAPES = "1x15x2880:bf16; 1x568x2880:bf16; 1x1369x2880:bf16; 1x[1..2048]x2880:bf16"
