"""Modules that must be refused with a clear error (used by tests via import paths)."""

from __future__ import annotations

import torch
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


class ScaleByTokens(nn.Module):
    """Scales by a power of the dynamic size computed in Python: the trace bakes S ** -0.5 in as a
    constant, which is no whole-number function of S (a mean's divisor S is: it exports)."""

    def forward(self, x):
        return x * x.shape[1] ** -0.5


class Embedding(nn.Module):
    """A lookup of 100 rows: ids sampled from -100..99 (no value range given) fall outside it."""

    def __init__(self) -> None:
        super().__init__()
        self.table = nn.Embedding(100, 8)

    def forward(self, ids):
        return self.table(ids)


class ReturnsDict(nn.Module):
    def forward(self, x):
        return {"y": x + 1}


def make_broken():
    raise RuntimeError("factory exploded")


class BranchOnSize(nn.Module):
    """A size test inside a dynamic range: x * 3 at 7 rows, x * 2 elsewhere."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * 3 if x.shape[0] == 7 else x * 2


class WindowOnSize(nn.Module):
    """A window of sizes inside a dynamic range: + 1 for 100..600 rows."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + 1 if 100 <= x.shape[0] <= 600 else x * 2


class DerivedSizeTest(nn.Module):
    """A test on a value computed from a size."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + 1 if x.shape[0] * 2 > 50 else x - 1


class HalfOfDynamicSize(nn.Module):
    """Arithmetic on a dynamic size (floor division: Thunder tests signs inside it) is no branch."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x[: x.shape[0] // 2 + 1] * 2


def float32_moe_block():
    """Mixtral's sparse block in float32: transformers' grouped-mm experts take their fallback custom
    op while a tracer runs (not bf16), which Thunder cannot trace."""
    from thunder_aot.examples.hf import mixtral_moe_block

    return mixtral_moe_block().float()
