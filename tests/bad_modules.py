"""Modules that must be refused with a clear error (used by tests via import paths)."""

from __future__ import annotations

from torch import nn

NOT_A_MODULE = 42


class NeedsArgs(nn.Module):
    def __init__(self, size: int) -> None:
        super().__init__()
        self.size = size


class NotAModule:
    pass


class DataDependent(nn.Module):
    """Python control flow on a tensor's value: no single trace can serve every input."""

    def forward(self, x):
        if x.sum() > 0:
            return x * 2
        return x - 1


class MeanOverTokens(nn.Module):
    """Divides by the dynamic dimension itself: the trace bakes 1/S in as a constant."""

    def forward(self, x):
        return x.mean(dim=1, keepdim=True) * x


class ReturnsDict(nn.Module):
    def forward(self, x):
        return {"y": x + 1}


def make_broken():
    raise RuntimeError("factory exploded")
