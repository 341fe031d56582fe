"""Modules with in-place ops, for the write-back pass (passes.drop_unobserved_write_backs)."""

from __future__ import annotations

import torch
from torch import nn


class BiasAddInPlace(nn.Module):
    """transformers' experts: ``out = matmul; out.add_(bias)`` and ``ids.clamp_(max=...)`` on a sort's
    result: write-backs into fresh tensors nothing else holds (dropped)."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(16, 16))
        self.bias = nn.Parameter(torch.randn(16))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = x @ self.weight
        out.add_(self.bias)
        ids, _ = torch.sort(x.sum(-1))
        ids.clamp_(max=0.5)
        return torch.relu(out) * 2.0 + ids.unsqueeze(-1)


class ViewedThenInPlace(nn.Module):
    """A view of ``out`` taken before the in-place op sees the write (kept)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = x @ x.transpose(0, 1)
        flat = out.view(-1)
        out.mul_(3.0)
        return flat * 2.0 + out.sum()


class InPlaceOnInput(nn.Module):
    """An in-place op on the caller's tensor: the caller sees it (kept)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x.mul_(2.0)
        return x + 1.0
