"""Torch functions taken whole at export (thunder_aot.frontend.torch_ops): sdpa with enable_gqa."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from thunder_aot.errors import ExportError
from thunder_aot.pipeline import export
from thunder_aot.request import ExportRequest

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


class Experts(nn.Module):
    """Tokens routed to ``experts`` experts by a fixed rule, then one grouped matmul (the layout of
    transformers' grouped-mm experts)."""

    def __init__(self, experts: int = 4, dim: int = 16, out: int = 8) -> None:
        super().__init__()
        generator = torch.Generator().manual_seed(3)
        self.weight = nn.Parameter(torch.randn(experts, dim, out, generator=generator).to(torch.bfloat16))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        tokens = x.shape[0]
        counts = torch.full(
            (self.weight.shape[0],), tokens // self.weight.shape[0], dtype=torch.int32, device=x.device
        )
        offs = torch.cumsum(counts, dim=0, dtype=torch.int32)
        return torch.nn.functional.grouped_mm(x, self.weight, offs=offs).float().tanh()


def experts() -> Experts:
    return Experts()


def test_grouped_matmuls_trace_on_hosts_whose_cpu_kernel_crashes(monkeypatch):
    """torch 2.11's CPU grouped matmul crashed the GPU machine's export (a segfault on its AMX Xeon,
    for bfloat16 and, inside a traced GPT-OSS layer, float32): while tracing, CPU operands are
    multiplied group by group with plain matmuls. Here the crash is stood in for by an error from the
    kernel if tracing reaches it (verification runs torch's own, which works here); the generated
    module still calls torch._grouped_mm, and the patch is gone after the export."""
    from thunder_aot.frontend import torch_ops

    original = torch_ops.TORCH_GROUPED_MM
    real = torch._grouped_mm

    def crashing_on_the_cpu(a, b, offs=None, bias=None, out_dtype=None):
        if a.device.type == "cpu":
            raise AssertionError("a grouped matmul reached the CPU kernel while tracing")
        return original(a, b, offs=offs, bias=bias, out_dtype=out_dtype)

    monkeypatch.setattr(torch_ops, "TORCH_GROUPED_MM", crashing_on_the_cpu)
    text = export(ExportRequest("tests.test_torch_ops:experts", ("32x16:bf16",), backend="torch"))
    assert torch._grouped_mm is real
    code = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))
    assert code.count("torch._grouped_mm(") == 1, code


def test_the_repeatability_check_before_tracing_keeps_grouped_matmuls_off_the_cpu_kernel(monkeypatch):
    """check_repeatable calls the module twice before tracing, on the CPU copy export traces: its
    grouped matmuls run as while tracing (the GPU machine's MoE exports segfaulted there). The CPU
    kernel is stood in for by one that records its calls; the check calls F.grouped_mm twice."""
    from thunder_aot.frontend import torch_ops
    from thunder_aot.frontend.repeatable import check_repeatable

    reached: list[str] = []
    by_group: list[str] = []
    real, safe = torch._grouped_mm, torch_ops._grouped_mm_cpu_safe

    def cpu_kernel(a, b, offs=None, bias=None, out_dtype=None):
        reached.append(a.device.type)
        return real(a, b, offs=offs, bias=bias, out_dtype=out_dtype)

    def counted_safe(*args, **kwargs):
        by_group.append("cpu")
        return safe(*args, **kwargs)

    monkeypatch.setattr(torch, "_grouped_mm", cpu_kernel)
    monkeypatch.setattr(torch_ops, "_grouped_mm_cpu_safe", counted_safe)
    check_repeatable(experts(), [torch.randn(32, 16).to(torch.bfloat16)])
    assert reached == [] and by_group == ["cpu", "cpu"]
    assert torch._grouped_mm is cpu_kernel
