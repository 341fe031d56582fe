"""Modules for the merged-projection tests: linear layers that read one input, with and without
biases, and ones that must not be merged."""

from __future__ import annotations

import torch
from torch import nn


class BiasedQkv(nn.Module):
    """Qwen2-style attention projections: q/k/v with biases on one input, of different widths,
    their outputs read by a kernel region (the sum) and by a torch call (a matmul)."""

    def __init__(self, hidden: int = 64, kv: int = 16) -> None:
        super().__init__()
        self.q_proj = nn.Linear(hidden, hidden)
        self.k_proj = nn.Linear(hidden, kv)
        self.v_proj = nn.Linear(hidden, kv)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self.q_proj(x), self.k_proj(x), self.v_proj(x)
        scores = torch.tanh(k) * torch.sigmoid(v)
        return q.sum(-1, keepdim=True) + scores @ self.k_proj.weight


class MixedProjections(nn.Module):
    """Linear layers that must not be merged: one with a bias beside one without, and one that reads
    another input. The two without bias on ``x`` are merged."""

    def __init__(self, hidden: int = 32) -> None:
        super().__init__()
        self.a = nn.Linear(hidden, hidden, bias=False)
        self.b = nn.Linear(hidden, hidden, bias=False)
        self.c = nn.Linear(hidden, hidden, bias=True)
        self.d = nn.Linear(hidden, hidden, bias=False)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.a(x)) * self.b(x) + self.c(x) + self.d(y)
