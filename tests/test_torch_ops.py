"""Torch functions taken whole at export (thunder_aot.exporter.torch_ops): sdpa with enable_gqa."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from thunder_aot.errors import ExportError
from thunder_aot.exporter import ExportRequest, export

pytestmark = pytest.mark.traces


class GroupedAttention(nn.Module):
    """q of ``heads`` heads, k and v of ``kv_heads``: causal attention as transformers' sdpa path calls it."""

    def __init__(self, heads: int = 4, kv_heads: int = 2, dim: int = 16) -> None:
        super().__init__()
        self.heads, self.kv_heads, self.dim = heads, kv_heads, dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        q = x[..., : self.heads * self.dim].view(b, s, self.heads, self.dim).transpose(1, 2)
        kv = x[..., self.heads * self.dim :].view(b, s, 2 * self.kv_heads, self.dim).transpose(1, 2)
        k, v = kv[:, : self.kv_heads], kv[:, self.kv_heads :]
        out = torch.nn.functional.scaled_dot_product_attention(
            q * 1.5, k, v, dropout_p=0.0, is_causal=s > 1, scale=0.25, enable_gqa=True
        )
        return out.transpose(1, 2).reshape(b, s, self.heads * self.dim).sigmoid()


def grouped_attention() -> GroupedAttention:
    return GroupedAttention()


def odd_heads() -> GroupedAttention:
    return GroupedAttention(heads=3, kv_heads=2)


def test_sdpa_with_enable_gqa_is_one_torch_call_with_the_models_arguments():
    messages: list[str] = []
    text = export(
        ExportRequest("tests.test_torch_ops:grouped_attention", ("1x[S=1..24]x128",), backend="torch"),
        progress=messages.append,
    )  # verified against float64 at the bucket's edges and inside
    assert any(m.startswith("verified:") for m in messages), messages
    code = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))
    calls = [line for line in code.splitlines() if "scaled_dot_product_attention(" in line]
    # S=1 traces differently (is_causal=False): one program per side of the branch, one call each
    assert len(calls) == 2, calls
    assert code.count("enable_gqa=True") == 2 and code.count("scale=0.25") == 2
    assert "torch.matmul" not in code and "softmax" not in code


def test_query_heads_not_a_multiple_of_the_key_heads_is_one_clear_error():
    with pytest.raises(ExportError, match="3 query heads are not a multiple of 2 key/value heads") as info:
        export(ExportRequest("tests.test_torch_ops:odd_heads", ("1x[S=2..8]x112",), backend="torch"))
    assert "\n" not in str(info.value)
