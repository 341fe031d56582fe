"""Modules with gathers (``x[idx]`` by an integer index tensor) that regions read, for
passes.move_gathers_into_kernels and passes.join_regions: the Triton backend loads through the index inside
the reader's
kernel. Their sorts sort exact keys (a row's maximum, a column), never sums: a kernel's sum may
round otherwise than eager's and reorder two rows whose sums nearly tie."""

from __future__ import annotations

import torch
from torch import nn


class SortedRows(nn.Module):
    """transformers' grouped-mm experts: rows permuted by a sort's indices, then pointwise work."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(64) * 0.1 + 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _, perm = torch.sort(x.amax(-1))
        return torch.relu(x[perm]) * self.weight + 1.0


class TableLookup(nn.Module):
    """Rows of a parameter picked by indices a region computes, some negative (counted from the end),
    then a reduction over the gathered rows."""

    def __init__(self) -> None:
        super().__init__()
        self.table = nn.Parameter(torch.randn(8, 64))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        ids = (x.sum(-1) > 0).long() * 5 - 2  # -2 or 3
        rows = self.table[ids] + x
        return rows * torch.rsqrt(rows.pow(2).mean(-1, keepdim=True) + 1e-6)


class ReturnedGather(nn.Module):
    """A gather the module also returns: it stays a torch call (the caller gets the tensor)."""

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        _, perm = torch.sort(x.amax(-1), descending=True)
        picked = x[perm]
        return picked, torch.sigmoid(picked) * 2.0


class WriteAfterGather(nn.Module):
    """The caller's tensor written in place after a gather of its rows: the gather must read the
    values from before the write."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _, perm = torch.sort(x.amax(-1))
        picked = x[perm]
        x.mul_(2.0)
        return torch.relu(picked) + x


def write_after_gather() -> WriteAfterGather:
    return WriteAfterGather()


class SortedByColumn(nn.Module):
    """Rows sorted by their first column (``x[:, 0]``: a getitem with a slice left to torch) and
    every row but the last (a bound that moves with the size)."""

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        _, perm = torch.sort(x[:, 0])
        return torch.relu(x[perm]) * 2.0, torch.sort(x[: x.shape[0] - 1, ..., 1])[0]


def sorted_by_column() -> SortedByColumn:
    return SortedByColumn()


def sorted_rows() -> SortedRows:
    torch.manual_seed(3)
    return SortedRows().eval().requires_grad_(False)


def table_lookup() -> TableLookup:
    torch.manual_seed(4)
    return TableLookup().eval().requires_grad_(False)


def returned_gather() -> ReturnedGather:
    return ReturnedGather()


#: (import path, shapes, gathers by an index tensor left as torch calls)
GATHERS = [
    ("tests.kernel_pass_modules:sorted_rows", "[S=1..40]x64:fp32", 0),
    ("tests.kernel_pass_modules:table_lookup", "[S=1..40]x64:bf16", 0),
    ("tests.kernel_pass_modules:returned_gather", "[S=1..40]x32:fp32", 1),
    ("tests.kernel_pass_modules:write_after_gather", "[S=1..40]x32:fp32", 1),
    ("tests.kernel_pass_modules:sorted_by_column", "[S=2..40]x16:fp32", 0),
]


class IndexThenGather(nn.Module):
    """The experts' ``perm // top_k`` (a region) read only through a gather by the next region:
    once the gather is in that region, the two regions join into one kernel."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _, perm = torch.sort(x.amax(-1))
        return torch.relu(x[perm // 2]) * 3.0


class InPlaceBiasThenAct(nn.Module):
    """transformers' experts' ``out.add_(bias)`` then the activation: once the write-back is gone
    (passes.drop_unobserved_write_backs), the bias add and the activation join."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(32, 32) * 0.2)
        self.bias = nn.Parameter(torch.randn(32))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = x @ self.weight
        out.add_(self.bias)
        return torch.sigmoid(out) * out


class NormThroughGather(nn.Module):
    """A row reduction read by the next region through a gather: joining would compute each row's
    sum once per gathered copy, so the regions stay apart."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        vals, perm = torch.sort(x.amax(-1))
        s = (x.float() - vals.float().unsqueeze(-1)).pow(2).sum(-1)
        return (x * s[perm].unsqueeze(-1)).to(x.dtype)


def index_then_gather() -> IndexThenGather:
    return IndexThenGather()


def in_place_bias_then_act() -> InPlaceBiasThenAct:
    torch.manual_seed(6)
    return InPlaceBiasThenAct().eval().requires_grad_(False)


def norm_through_gather() -> NormThroughGather:
    return NormThroughGather()


#: (import path, shapes, Triton kernels with the passes, without them)
JOINS = [
    ("tests.kernel_pass_modules:index_then_gather", "[S=1..40]x64:fp32", 2, 3),
    ("tests.kernel_pass_modules:in_place_bias_then_act", "[S=1..40]x32:fp32", 1, 2),
    # (float32: CUDA's and the CPU's sorts may order equal bfloat16 maxima apart; memcheck's reference
    # runs on the CPU)
    ("tests.kernel_pass_modules:norm_through_gather", "[S=1..40]x64:fp32", 3, 3),
]


class ExpertRouting(nn.Module):
    """transformers' grouped-mm experts' bookkeeping (integrations/moe.py) around a per-expert scale
    in place of the grouped matmuls: the top-k ids sorted, counted per expert (histc), summed up
    (the offsets), the inverse permutation by ``index_put`` into an empty buffer; what it returns
    does not depend on how the sort orders equal ids."""

    experts, top_k = 4, 2

    def __init__(self) -> None:
        super().__init__()
        self.router = nn.Linear(64, self.experts)
        self.scale = nn.Parameter(torch.randn(self.experts))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        weights, ids = torch.topk(self.router(x), self.top_k, dim=-1)
        ids_g, perm = torch.sort(ids.reshape(-1))
        counts = torch.histc(ids_g.float(), bins=self.experts, min=0, max=self.experts - 1)
        offsets = torch.cumsum(counts, dim=0, dtype=torch.int32)
        rows = (
            x[perm // self.top_k] * self.scale[ids_g].unsqueeze(-1) * weights.reshape(-1)[perm].unsqueeze(-1)
        )
        inv_perm = torch.empty_like(perm)
        inv_perm[perm] = torch.arange(perm.size(0), device=x.device)
        out = rows[inv_perm].view(x.shape[0], self.top_k, -1).sum(dim=1)
        return out, offsets, counts


def expert_routing() -> ExpertRouting:
    torch.manual_seed(11)
    return ExpertRouting()


#: (import path, shapes, torch.sort calls left): routing bookkeeping in one program where it fits
ROUTINGS = [
    ("tests.kernel_pass_modules:expert_routing", "[S=1..40]x64:fp32", 0),
    # 2 x 4100 ids: longer than one program's sort (8192): the bookkeeping stays torch calls
    ("tests.kernel_pass_modules:expert_routing", "[S=4090..4100]x64:fp32", 1),
]


class RoutingAfterAWrite(ExpertRouting):
    """The ids written in place between topk and the sort (an expert-parallel sentinel, out of
    [0, E)): Thunder's trace makes the write a ``where`` whose result the sort reads, not topk's
    ids, so nothing bounds them and the sort stays torch's."""

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        weights, ids = torch.topk(self.router(x), self.top_k, dim=-1)
        ids.masked_fill_(weights < -1.0, self.experts + 3)
        ids_g, perm = torch.sort(ids.reshape(-1))
        counts = torch.histc(ids_g.float(), bins=self.experts, min=0, max=self.experts - 1)
        offsets = torch.cumsum(counts, dim=0, dtype=torch.int32)
        return offsets, counts


def routing_after_a_write() -> RoutingAfterAWrite:
    torch.manual_seed(12)
    return RoutingAfterAWrite()


ROUTINGS.append(("tests.kernel_pass_modules:routing_after_a_write", "[S=1..40]x64:fp32", 1))


class EagerAttentionTail(nn.Module):
    """transformers' eager attention after its second matmul: ``attn_output.transpose(1, 2)
    .contiguous()`` (a real copy: the matmul's result is contiguous in heads-first order), then
    ``.reshape(...).contiguous()`` (nothing to copy) and the output projection."""

    def __init__(self) -> None:
        super().__init__()
        self.o_proj = nn.Linear(64, 32, bias=False)

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        probs = torch.softmax(torch.matmul(q, k.transpose(2, 3)) * 0.25, dim=-1, dtype=torch.float32).to(
            q.dtype
        )
        out = torch.matmul(probs, v).transpose(1, 2).contiguous()
        return self.o_proj(out.reshape(*out.shape[:2], -1).contiguous())


class CopyIntoNorm(nn.Module):
    """A matmul's result permuted and copied, then normalized: the copy's region joins the norm's
    (passes.join_regions), so no kernel copies it on its own."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(16) * 0.1 + 1)

    def forward(self, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        y = torch.matmul(x, w).permute(1, 0, 2).contiguous()
        return y * torch.rsqrt(y.pow(2).mean(-1, keepdim=True) + 1e-6) * self.weight


class SdpaTail(nn.Module):
    """sdpa's output permuted and copied: on the GPU its kernels return it laid out so that the
    copy copies nothing; it stays torch calls. The cast back to the input's dtype is a no-op."""

    def __init__(self) -> None:
        super().__init__()
        self.o_proj = nn.Linear(64, 32, bias=False)

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        out = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        out = out.transpose(1, 2).contiguous()
        return self.o_proj(out.reshape(*out.shape[:2], -1).to(q.dtype))


def eager_attention_tail() -> EagerAttentionTail:
    return EagerAttentionTail()


def copy_into_norm() -> CopyIntoNorm:
    return CopyIntoNorm()


def sdpa_tail() -> SdpaTail:
    return SdpaTail()


_HEADS = "1x2x[S=1..24]x32"
_SAME = "1x2x[S]x32"
#: (import path, shapes, kernels, torch calls the Triton module keeps): passes.copies_as_kernels
COPIES = [
    (
        "tests.kernel_pass_modules:eager_attention_tail",
        f"{_HEADS}:fp32, {_SAME}:fp32, {_SAME}:fp32",
        2,
        ["torch.transpose", "torch.matmul", "torch.matmul", "torch.reshape", "torch.nn.functional.linear"],
    ),
    ("tests.kernel_pass_modules:copy_into_norm", "2x[S=1..24]x8:fp32, 8x16:fp32", 1, ["torch.matmul"]),
    (
        "tests.kernel_pass_modules:sdpa_tail",
        f"{_HEADS}:fp32, {_SAME}:fp32, {_SAME}:fp32",
        0,
        [
            "torch.nn.functional.scaled_dot_product_attention",
            "torch.transpose",
            "torch.Tensor.contiguous",
            "torch.reshape",
            "torch.nn.functional.linear",
        ],
    ),
]


class RotaryScores(nn.Module):
    """Eager attention's scores after a rotary embedding of the keys: ``q @ k.transpose(2, 3)``,
    the transpose inside the rotary region (as Thunder forms it), read only by the matmul; the
    region's other output (the rotated keys) is returned too in ``both``."""

    def __init__(self, both: bool = False) -> None:
        super().__init__()
        self.both = both

    def forward(self, q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor):
        half = k.shape[-1] // 2
        k = k * cos + torch.cat((-k[..., half:], k[..., :half]), dim=-1) * sin
        scores = torch.matmul(q, k.transpose(2, 3))
        return (scores, k) if self.both else scores


def rotary_scores() -> RotaryScores:
    return RotaryScores()


def rotary_scores_and_keys() -> RotaryScores:
    return RotaryScores(both=True)


_QK = "1x2x[S=1..24]x32"
#: (import path, shapes, whether the rotated keys are also returned): passes.transposed_outputs_as_views
VIEWS = [
    (
        "tests.kernel_pass_modules:rotary_scores",
        f"{_QK}:fp32, 1x2x[S]x32:fp32, 1x1x[S]x32:fp32, 1x1x[S]x32:fp32",
        False,
    ),
    (
        "tests.kernel_pass_modules:rotary_scores_and_keys",
        f"{_QK}:fp32, 1x2x[S]x32:fp32, 1x1x[S]x32:fp32, 1x1x[S]x32:fp32",
        True,
    ),
]


class Router(nn.Module):
    """A mixture of experts' router (GPT-OSS's: logits, the top k, a softmax over them), returning
    the routing weights, each times its expert's number (what depends on the picks, as the experts
    a token goes to do); ``ties`` floors the logits to halves first (bf16 routers tie, and which of
    two tied experts is picked is torch's choice, judged against the float64 run that picks as the
    module did)."""

    def __init__(self, experts: int = 8, k: int = 2, ties: bool = False, returns_picks: bool = False) -> None:
        super().__init__()
        self.proj = nn.Linear(32, experts)
        self.k, self.ties, self.returns_picks = k, ties, returns_picks

    def forward(self, x: torch.Tensor):
        logits = self.proj(x)
        if self.ties:
            logits = torch.floor(logits * 2) / 2
        values, indices = torch.topk(logits, self.k, dim=-1)
        weights = torch.softmax(values, dim=-1, dtype=torch.float32)
        routing = weights * (indices + 1).to(torch.float32)
        return (routing, indices) if self.returns_picks else routing


def router() -> Router:
    return Router().to(torch.bfloat16)


def router_ties() -> Router:
    return Router(experts=16, k=4, ties=True)


def router_returning_picks() -> Router:
    return Router(returns_picks=True)


#: (import path, shapes, whether the top-k is a kernel): passes.topk_as_regions (a module that returns its
#: picks keeps torch's, whose order among ties is its own)
TOPKS = [
    ("tests.kernel_pass_modules:router", "[S=1..40]x32:bf16", True),
    ("tests.kernel_pass_modules:router_ties", "2x[S=1..24]x32:fp32", True),
    ("tests.kernel_pass_modules:router_returning_picks", "[S=1..40]x32:fp32", False),
]
