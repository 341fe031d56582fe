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
            scale = p.shape[-1] ** -0.5 if p.ndim > 1 else 0.1
            p.copy_(torch.randn(p.shape, generator=gen) * scale + (p.ndim == 1))
    return module.requires_grad_(False)


def gated_mlp() -> GatedMLP:
    return _randomize(GatedMLP(), seed=1)


def residual_rmsnorm() -> ResidualRMSNorm:
    return _randomize(ResidualRMSNorm(), seed=2)


class ScaledMaskedSoftmax(nn.Module):
    """Attention probabilities: softmax(scores * scale + mask) over the key dim, in fp32, cast back."""

    def __init__(self, head_dim: int = 64) -> None:
        super().__init__()
        self.scale = head_dim**-0.5

    def forward(self, scores: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        probs = torch.softmax(scores.float() * self.scale + mask, dim=-1)
        return probs.to(scores.dtype)


class GeluGate(nn.Module):
    """GeGLU's gate: gelu_tanh(gate) * up on the two halves of a fused projection's output."""

    def forward(self, gate_up: torch.Tensor) -> torch.Tensor:
        gate, up = gate_up.chunk(2, dim=-1)
        return F.gelu(gate, approximate="tanh") * up


class RotaryEmbedding(nn.Module):
    """Llama's apply_rotary_pos_emb for one tensor: x * cos + rotate_half(x) * sin."""

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        half = x.shape[-1] // 2
        rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
        return x * cos + rotated * sin


def layer_norm() -> nn.LayerNorm:
    """LayerNorm(1024) with bf16 weight and bias, as in a bf16 model (CUDA's eager layer_norm
    refuses a bf16 input with fp32 weights)."""
    return _randomize(nn.LayerNorm(1024), seed=3).to(torch.bfloat16)


def scaled_masked_softmax() -> ScaledMaskedSoftmax:
    return ScaledMaskedSoftmax().requires_grad_(False)


def gelu_gate() -> GeluGate:
    return GeluGate().requires_grad_(False)


def rotary_embedding() -> RotaryEmbedding:
    return RotaryEmbedding().requires_grad_(False)


class TemperatureSoftmax(nn.Module):
    """Sampling probabilities over a vocabulary: softmax(logits / temperature) in fp32. Rows of
    32000 (Llama 2's vocabulary) are wider than a Triton program keeps in registers: the Triton
    backend walks them in chunks (its looped schedule)."""

    def __init__(self, temperature: float = 0.7) -> None:
        super().__init__()
        self.temperature = temperature

    def forward(self, logits: torch.Tensor) -> torch.Tensor:
        return torch.softmax(logits.float() / self.temperature, dim=-1)


def vocab_softmax() -> TemperatureSoftmax:
    return TemperatureSoftmax().requires_grad_(False)


def wide_rmsnorm() -> GptOssRMSNorm:
    """RMSNorm over 16384 features (Llama 3 405B's hidden size), random weights."""
    gen = torch.Generator().manual_seed(5)
    module = GptOssRMSNorm(16384, eps=1e-5)
    with torch.no_grad():
        module.weight.copy_(1.0 + 0.1 * torch.randn(16384, generator=gen))
    return module.requires_grad_(False)
