"""Modules whose fusion regions have shape ops in the middle (views, transposes, expands, strided
slices, cats) or reduce under them: the Triton backend makes each region one kernel. And one whose
region no kernel takes (a softmax over the first dim), which runs as its source's torch calls."""

from __future__ import annotations

import torch
from torch import nn


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class HeadsRotary(nn.Module):
    """``x.view(b, s, heads, dim).transpose(1, 2)`` then the rotary embedding, in bf16 with fp32 math."""

    heads, dim = 4, 32

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        q = x.view(b, s, self.heads, self.dim).transpose(1, 2)
        cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
        return (q.float() * cos.float() + _rotate_half(q).float() * sin.float()).to(x.dtype)


class MergeHeads(nn.Module):
    """Attention's output heads back to the hidden dim: transpose, reshape, then scale and shift."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(128) * 0.1 + 1)
        self.bias = nn.Parameter(torch.randn(128) * 0.1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, h, s, d = x.shape
        return x.transpose(1, 2).reshape(b, s, h * d) * self.weight + self.bias


class StridedPairs(nn.Module):
    """Even and odd lanes (slices with a step), multiplied, next to their sum (a cat)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        even, odd = x[..., ::2], x[..., 1::2]
        return torch.cat((even * odd, even + odd), dim=-1)


class RepeatKV(nn.Module):
    """transformers' repeat_kv (an expand and a reshape) followed by a scale."""

    def forward(self, k: torch.Tensor) -> torch.Tensor:
        b, kv, s, d = k.shape
        return k[:, :, None, :, :].expand(b, kv, 3, s, d).reshape(b, kv * 3, s, d) * 1.5


class HeadNorm(nn.Module):
    """Qwen3's per-head RMSNorm between the projection's view and the transpose."""

    heads, dim = 4, 64

    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(64) * 0.1 + 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        h = x.view(b, s, self.heads, self.dim).float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6)
        return (self.weight * h.to(x.dtype)).transpose(1, 2)


class TwoShapes(nn.Module):
    """Two outputs of different shapes from one region."""

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return (x * 2).transpose(0, 1), x[:, :8] + 1


class ColumnSoftmax(nn.Module):
    """A softmax over the first dim: a tile whose lanes walk the first dim, every other dim a row
    (up to 8192 of the first dim; a longer one runs as its source's torch calls)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x.float() * 0.5, dim=0).to(x.dtype)


class NormThenTransposeThenMix(nn.Module):
    """Qwen3's q_norm pattern: a per-head RMSNorm whose result is transposed, then read by a later
    fusion next to a matmul's output (nvFuser returns the first fusion's output permuted)."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(32))
        self.mix = nn.Linear(32, 32, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        h = x.view(b, s, 4, 32).float()
        h = (
            (self.weight * (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6)))
            .to(x.dtype)
            .transpose(1, 2)
        )
        return torch.sigmoid(h) * self.mix(h)


class HeadsMeanSquare(nn.Module):
    """A reduction whose dim no output keeps: the mean square over the heads of
    ``x.view(b, s, heads, dim)``, one output element per (token, lane of dim)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        h = x.view(b, s, 4, 32).float()
        return (h * h).mean(dim=2).to(x.dtype) + 1.0


class TanhGelu(nn.Module):
    """GPT-2's NewGELU (tanh approximation, ``x ** 3``) on the heads of a view."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        h = x.view(b, s, 4, 32).transpose(1, 2)
        return 0.5 * h * (1.0 + torch.tanh(0.7978845608 * (h + 0.044715 * torch.pow(h, 3.0))))


class UnaryMath(nn.Module):
    """The unary math Triton's core language lacks, written from its ops (runtime.triton's
    ``math_*``): expm1 and log1p (softplus decomposes into it) where the plain formulas cancel,
    exp2, log2, log10, trunc, sign, isfinite; tanh near 0 (a softcap of small values) and far out;
    round, its halves to even (x * 4 floored, halved: every other value a half); infinite constants
    (a kernel once wrote them as a bare ``inf``); pointwise, then under a row mean."""

    def forward(self, x: torch.Tensor):
        a = torch.expm1(x * 1e-3) + torch.log1p(x.abs() * 1e-4) + torch.nn.functional.softplus(x)
        b = (
            torch.exp2(x)
            - torch.log2(x.abs() + 1)
            + torch.log10(x.abs() + 2)
            + torch.trunc(x * 3) * torch.sign(x)
        )
        softcap = torch.tanh(x * 1e-4) * 1e4 + torch.tanh(x * 12.0)
        rounded = torch.round(torch.floor(x * 4) * 0.5)
        clipped = torch.where(x > 1.5, float("inf"), torch.where(x < -1.5, float("-inf"), x))
        finite = torch.isfinite(x)
        c = torch.where(finite, a + b, 0.0)
        return c, (c - c.mean(-1, keepdim=True)).to(torch.bfloat16), finite, softcap, rounded, clipped


class SinkSoftmax(nn.Module):
    """GPT-OSS's attention sinks: the scaled, masked scores and one sink logit per head side by side,
    a softmax over both, the sink's column dropped. The lanes walk the dynamic key dim, and the
    reductions' rows are one wider than the output's."""

    heads = 4

    def __init__(self) -> None:
        super().__init__()
        self.sinks = nn.Parameter(torch.randn(self.heads))

    def forward(self, scores: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        b, h, q, _ = scores.shape
        logits = scores * 0.125 + mask
        sinks = self.sinks.reshape(1, -1, 1, 1).expand(b, -1, q, -1)
        combined = torch.cat([logits, sinks], dim=-1)
        combined = combined - combined.max(dim=-1, keepdim=True).values
        return torch.softmax(combined, dim=-1, dtype=combined.dtype)[..., :-1]


class RowsAndTheirSums(nn.Module):
    """A row's values and, apart, its sum, from one view: no lane dim serves both outputs, and one
    output element per row would reduce each 32-wide row for each of its 32 elements; the region
    runs as its source's torch calls."""

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        b, s, _ = x.shape
        h = x.view(b, s, 4, 32).float()
        return (h - h.amax(-1, keepdim=True)).exp().transpose(1, 2), h.sum(-1)


def _seeded(module: nn.Module) -> nn.Module:
    torch.manual_seed(5)
    for name, p in module.named_parameters():
        p.data.copy_(torch.randn_like(p) * 0.1 + (1 if name == "weight" else 0))
    return module.eval().requires_grad_(False)


def heads_rotary() -> HeadsRotary:
    return HeadsRotary()


def merge_heads() -> MergeHeads:
    return _seeded(MergeHeads())


def strided_pairs() -> StridedPairs:
    return StridedPairs()


def repeat_kv() -> RepeatKV:
    return RepeatKV()


def head_norm() -> HeadNorm:
    return _seeded(HeadNorm())


class LatentNormAndRotary(nn.Module):
    """DeepSeek-V3's attention between its projections: an RMSNorm of the compressed keys, and the
    interleaved rotary of the keys' and the queries' rotary parts (the queries' then concatenated
    after their other part). Thunder forms one region of the three, which share no value and have
    outputs of three shapes: passes.split_regions makes kernels of its parts."""

    heads, nope, rope, latent = 4, 32, 16, 32

    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(self.latent) * 0.1 + 1)

    @staticmethod
    def _rotary_interleaved(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        b, h, s, d = x.shape
        x = x.view(b, h, s, d // 2, 2).transpose(4, 3).reshape(b, h, s, d)
        return x * cos + _rotate_half(x) * sin

    def forward(self, q: torch.Tensor, kv: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor):
        b, s, _ = q.shape
        q = q.view(b, s, self.heads, self.nope + self.rope).transpose(1, 2)
        q_pass, q_rot = torch.split(q, [self.nope, self.rope], dim=-1)
        latent, k_rot = torch.split(kv, [self.latent, self.rope], dim=-1)
        variance = latent.float().pow(2).mean(-1, keepdim=True)
        latent = self.weight * (latent.float() * torch.rsqrt(variance + 1e-6)).to(kv.dtype)
        cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
        k_rot = self._rotary_interleaved(k_rot.view(b, 1, s, self.rope), cos, sin)
        q_rot = self._rotary_interleaved(q_rot, cos, sin)
        return latent, k_rot, torch.cat((q_pass, q_rot), dim=-1)


class ColumnSoftmaxBesideNorm(nn.Module):
    """A region of two independent parts: :class:`ColumnSoftmax` (no kernel past 8192 rows) and an
    RMSNorm of another input (a row kernel): the norm becomes a kernel, the softmax runs as its own
    source calls."""

    def forward(self, x: torch.Tensor, y: torch.Tensor):
        norm = y.float() * torch.rsqrt(y.float().pow(2).mean(-1, keepdim=True) + 1e-6)
        return torch.softmax(x.float() * 0.5, dim=0).to(x.dtype), norm.to(y.dtype)


class KeysFill(nn.Module):
    """DeepSeek-V3's keys: an empty tensor filled by two copies into slices of its last dim, the
    second broadcast over the heads by an expand, then scaled. passes.fills_as_concatenations makes the fill
    one
    kernel. ``read_between``: the tensor is read between the copies (no fill: the calls stay)."""

    def __init__(self, read_between: bool = False) -> None:
        super().__init__()
        self.read_between = read_between

    def forward(self, k_nope: torch.Tensor, k_rot: torch.Tensor):
        b, h, s, _ = k_nope.shape
        keys = k_nope.new_empty(b, h, s, 48)
        keys[..., :32].copy_(k_nope)
        first = keys[..., :32].sum(-1) if self.read_between else None
        keys[..., 32:].copy_(k_rot.expand(-1, h, -1, -1))
        return keys * 0.5 if first is None else (keys * 0.5, first)


class FusedProjectionSplit(nn.Module):
    """Falcon's attention inputs (new_decoder_architecture): a projection by the weight's transpose
    (``input @ weight.T``, the transpose in the region beside the scaled input: a view, not a copy of
    the weight, passes.transposed_outputs_as_views), laid out by KV group and split by basic and
    one-position list
    indices (``[:-2]``, ``[[-2]]``, ``[[-1]]``) and an integer index, the keys and values broadcast to
    the query heads. passes.move_slices_into_kernels puts the indices into the kernel that reads them."""

    groups, per_group, head_dim, hidden = 2, 2, 16, 64

    def __init__(self) -> None:
        super().__init__()
        rows = self.groups * (self.per_group + 2) * self.head_dim
        self.weight = nn.Parameter(torch.randn(rows, self.hidden) * self.hidden**-0.5)

    def forward(self, x: torch.Tensor):
        b, s, _ = x.shape
        qkv = (x * 2.0) @ self.weight.T
        qkv = qkv.view(b, s, self.groups, self.per_group + 2, self.head_dim)
        query, key, value = qkv[:, :, :, :-2], qkv[:, :, :, [-2]], qkv[:, :, :, [-1]]
        key, value = torch.broadcast_to(key, query.shape), torch.broadcast_to(value, query.shape)
        first = qkv[:, :, 0, 0]  # the first group's first head: integer indices (squeezed dims)
        query, key, value = (t.flatten(2, 3) for t in (query, key, value))
        return query * 0.125 + first.unsqueeze(2), (key * value).transpose(1, 2)


def two_shapes() -> TwoShapes:
    return TwoShapes()


def column_softmax() -> ColumnSoftmax:
    return ColumnSoftmax()


#: LatentNormAndRotary's inputs: queries (4 heads of 32 + 16), compressed keys (32 + 16), cos, sin
LATENT_SHAPES = "1x[S=1..40]x192:bf16, 1x[S]x48:bf16, 1x[S]x16:bf16, 1x[S]x16:bf16"
#: KeysFill's inputs: the keys' first 32 of each of 4 heads, and a rotary part of 16 all heads share
KEYS_FILL_SHAPES = "1x4x[S=1..40]x32:bf16, 1x1x[S]x16:bf16"
#: FusedProjectionSplit's input: hidden states of 64
FUSED_SPLIT_SHAPES = "1x[S=1..40]x64:fp32"
#: (import path, shapes): every region one Triton kernel (or, for a region of independent parts, one
#: per group of them)
KERNELS = [
    ("tests.view_modules:heads_rotary", "1x[S=1..40]x128:bf16, 1x[S]x32:bf16, 1x[S]x32:bf16"),
    ("tests.view_modules:merge_heads", "2x4x[S=1..40]x32:bf16"),
    ("tests.view_modules:strided_pairs", "[1..40]x64:fp32"),
    ("tests.view_modules:repeat_kv", "1x2x[S=1..40]x32:bf16"),
    ("tests.view_modules:head_norm", "1x[S=1..40]x256:bf16"),
    ("tests.view_modules:two_shapes", "[1..40]x16:fp32"),
    ("tests.view_modules:column_softmax", "[2..40]x128:bf16"),
    ("tests.view_modules:heads_mean_square", "1x[S=1..40]x128:bf16"),
    ("tests.view_modules:tanh_gelu", "1x[S=1..40]x128:fp32"),
    ("tests.view_modules:norm_then_transpose_then_mix", "1x[S=1..40]x128:fp32"),
    ("tests.view_modules:sink_softmax", "1x4x[S=1..40]x[S]:bf16, 1x1x[S]x[S]:bf16"),
    ("tests.view_modules:latent_norm_and_rotary", LATENT_SHAPES),
    ("tests.view_modules:keys_fill", KEYS_FILL_SHAPES),
    ("tests.view_modules:fused_projection_split", FUSED_SPLIT_SHAPES),
    ("tests.view_modules:unary_math", "[1..40]x96:fp32"),
]
#: (import path, shapes): a region no Triton kernel takes
SOURCE_CALLS = [("tests.view_modules:column_softmax", "[2..9000]x8:bf16")]
#: (import path, shapes): a region of two parts, one a kernel, the other its source calls
PART_SOURCE_CALLS = ("tests.view_modules:column_softmax_beside_norm", "[2..9000]x8:bf16, [2..9000]x64:bf16")


def norm_then_transpose_then_mix() -> NormThenTransposeThenMix:
    return _seeded(NormThenTransposeThenMix())


def heads_mean_square() -> HeadsMeanSquare:
    return HeadsMeanSquare()


def tanh_gelu() -> TanhGelu:
    return TanhGelu()


def sink_softmax() -> SinkSoftmax:
    torch.manual_seed(6)
    return SinkSoftmax().to(torch.bfloat16)


def rows_and_their_sums() -> RowsAndTheirSums:
    return RowsAndTheirSums()


def latent_norm_and_rotary() -> LatentNormAndRotary:
    return _seeded(LatentNormAndRotary())


def column_softmax_beside_norm() -> ColumnSoftmaxBesideNorm:
    return ColumnSoftmaxBesideNorm()


def fused_projection_split() -> FusedProjectionSplit:
    return _seeded(FusedProjectionSplit())


def unary_math() -> UnaryMath:
    return UnaryMath()


def keys_fill() -> KeysFill:
    return KeysFill()


def keys_fill_read_between() -> KeysFill:
    return KeysFill(read_between=True)


class KeysAppended(nn.Module):
    """A KV-cache step in small: the new keys (a transpose of the heads, scaled) appended to the past
    keys and returned, beside hidden states computed from them after a matmul (that last fusion has
    no transpose)."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(32, 32)

    def forward(self, x: torch.Tensor, past: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        batch, seq, _ = x.shape
        keys = torch.cat([past, x.view(batch, seq, 2, 16).transpose(1, 2) * 2], dim=2)
        mixed = self.proj(keys[:, :, -seq:].transpose(1, 2).reshape(batch, seq, 32))
        return mixed + 1, keys


#: KeysAppended's inputs: hidden states of 2 heads of 16 (4 positions), the past keys of those heads (6)
KEYS_APPENDED_SHAPES = "1x4x32:fp32, 1x2x6x16:fp32"


def keys_appended() -> KeysAppended:
    return _seeded(KeysAppended())
