"""Small hand-written modules of the kinds LLM code holds, none of them a bundled example or a
transformers class: norms, activations, softcaps, quantizers, rotary, statistics over a dynamic dim,
lookups, attention. tests/test_op_zoo.py exports each with the torch and Triton backends (verified).

``ZOO``: name -> (factory, shapes, fused) where ``fused``: every region of the Triton export is a
kernel (no region runs as torch calls, none given up by verification).
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from tests.sound_modules import ModulatedLayerNorm

D = 256


class Fn(nn.Module):
    """A module whose forward is a function of its inputs."""

    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, *xs):
        return self.fn(*xs)


def rotate_every_two(x):
    x1, x2 = x[..., ::2], x[..., 1::2]
    return torch.stack((-x2, x1), dim=-1).flatten(-2)


class GPTJRotary(nn.Module):
    def forward(self, x, sin, cos):
        return x * cos + rotate_every_two(x) * sin


class PerTokenInt8(nn.Module):
    def forward(self, x):
        scale = x.abs().amax(-1, keepdim=True).float().clamp(min=1e-5) / 127.0
        q = (x.float() / scale).round().clamp(-127, 127).to(torch.int8)
        return q, scale


class FP8Quant(nn.Module):
    def forward(self, x):
        scale = x.abs().amax(-1, keepdim=True).float().clamp(min=1e-12) / 448.0
        return (x.float() / scale).clamp(-448, 448).to(torch.float8_e4m3fn), scale


class StdNorm(nn.Module):
    def __init__(self):
        super().__init__()
        self.g = nn.Parameter(torch.ones(D))

    def forward(self, x):
        mean = x.mean(-1, keepdim=True)
        std = x.std(-1, keepdim=True)
        return self.g * (x - mean) / (std + 1e-6)


class Embed(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(512, D)

    def forward(self, ids):
        return self.emb(ids) * (D**0.5)


class InPlace(nn.Module):
    def forward(self, x):
        y = x.clone()
        y.mul_(2).add_(1)
        return y


class SwiGLUFused(nn.Module):
    def forward(self, x):
        a, b = x.chunk(2, -1)
        return F.silu(a) * b


class TwoOut(nn.Module):
    def forward(self, x, r):
        h = x + r
        return h, h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6)


class Attn(nn.Module):
    def __init__(self, causal=True, gqa=False):
        super().__init__()
        self.causal, self.gqa = causal, gqa

    def forward(self, q, k, v):
        if self.gqa:
            k = k.repeat_interleave(2, dim=1)
            v = v.repeat_interleave(2, dim=1)
        return F.scaled_dot_product_attention(q, k, v, is_causal=self.causal)


class EagerAttn(nn.Module):
    def forward(self, q, k, v, mask):
        scores = q @ k.transpose(-1, -2) / 8.0
        scores = scores.masked_fill(mask == 0, torch.finfo(scores.dtype).min)
        p = torch.softmax(scores.float(), -1).to(q.dtype)
        return (p @ v).transpose(1, 2).reshape(q.shape[0], q.shape[2], -1)


class MixedNorm(nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(D))  # fp32 weight, bf16 input

    def forward(self, x):
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6)
        return (self.weight * h).to(x.dtype)


class Router(nn.Module):
    def __init__(self):
        super().__init__()
        self.gate = nn.Linear(D, 8, bias=False)

    def forward(self, x):
        logits = self.gate(x)
        w, ids = torch.topk(logits.softmax(-1, dtype=torch.float32), 2, dim=-1)
        return w / w.sum(-1, keepdim=True), ids


class CatStack(nn.Module):
    def forward(self, a, b):
        return torch.cat([a, b], -1) * 2, torch.stack([a, b], 0).sum(0)


class Einsum(nn.Module):
    def forward(self, a, b):
        return torch.einsum("bsd,bsd->bs", a, b)


class HeadsView(nn.Module):
    def forward(self, x):
        b, s, _ = x.shape
        h = x.view(b, s, 4, 64).transpose(1, 2)
        return (h * h.sigmoid()).transpose(1, 2).reshape(b, s, 256)


#: name -> (factory, shapes, fused: every region of the Triton export a kernel)
ZOO = {
    "layer_norm_no_bias": (lambda: nn.LayerNorm(D, bias=False), f"1x[1..64]x{D}:bf16", True),
    "layer_norm_no_affine": (lambda: nn.LayerNorm(D, elementwise_affine=False), f"1x[1..64]x{D}", True),
    "gelu_tanh": (lambda: Fn(lambda x: F.gelu(x, approximate="tanh")), f"[1..64]x{D}:bf16", True),
    "quick_gelu": (lambda: Fn(lambda x: x * torch.sigmoid(1.702 * x)), f"[1..64]x{D}", True),
    "relu2": (lambda: Fn(lambda x: F.relu(x).square()), f"[1..64]x{D}", True),
    "mish": (lambda: Fn(F.mish), f"[1..64]x{D}", True),
    "hardswish": (lambda: Fn(F.hardswish), f"[1..64]x{D}", True),
    "leaky_elu_selu": (
        lambda: Fn(lambda x: F.leaky_relu(x, 0.1) + F.elu(x) + F.selu(x)),
        f"[1..64]x{D}",
        True,
    ),
    # Gemma 2's softcapping: tanh of small values (2 sigmoid(2x) - 1 was refused on accuracy)
    "softcap": (lambda: Fn(lambda x: torch.tanh(x / 30.0) * 30.0), "1x4x[S=1..64]x[S]", True),
    "l2_normalize": (lambda: Fn(lambda x: F.normalize(x, dim=-1)), f"[1..64]x{D}:bf16", True),
    # Thunder's log_softmax zeroes an infinite row maximum (logsumexp): verification gives its region up
    "log_softmax": (
        lambda: Fn(lambda x: F.log_softmax(x.float(), -1).to(x.dtype)),
        f"[1..64]x{D}:bf16",
        False,
    ),
    "clamp": (lambda: Fn(lambda x: x.clamp(-0.5, 0.5)), f"[1..64]x{D}", True),
    "masked_fill": (lambda: Fn(lambda x: x.masked_fill(x > 1, 0.0)), f"[1..64]x{D}", True),
    "where_scalar": (lambda: Fn(lambda x: torch.where(x > 0, x, 0.1 * x)), f"[1..64]x{D}", True),
    "gptj_rotary": (GPTJRotary, "1x4x[S=1..64]x64:bf16, 1x1x[S]x64:bf16, 1x1x[S]x64:bf16", True),
    "cumsum": (lambda: Fn(lambda x: x.cumsum(-1)), f"[1..64]x{D}", False),
    # F.layer_norm's float32 variance overflows on 1e20 where the kernel's does not (the judge's float64 rule)
    "adaln": (ModulatedLayerNorm, f"2x[S=1..64]x{D}, 2x1x{D}, 2x1x{D}", True),
    # statistics over the dynamic dim: divided by the size as a float (SizeArg.real)
    "mean_pool": (lambda: Fn(lambda x: x.mean(1)), f"2x[1..64]x{D}", True),
    "mean_var_seq": (
        lambda: Fn(lambda x: x.mean(1) * x.var(1) + x.std(-2, keepdim=True).sum(1)),
        f"2x[1..64]x{D}:bf16",
        False,
    ),
    "var": (lambda: Fn(lambda x: torch.var(x, -1)), f"[1..64]x{D}", False),
    "std_norm": (StdNorm, f"[1..64]x{D}", True),
    "dropout_eval": (lambda: nn.Dropout(0.1).eval(), f"[1..64]x{D}", True),
    # a setting read through an nn.Sequential's child "0" (its path once could not be read back)
    "sequential_silu_inplace": (lambda: nn.Sequential(nn.SiLU(inplace=True)), f"[1..64]x{D}", True),
    "torch_rmsnorm": (lambda: nn.RMSNorm(D, eps=1e-6), f"1x[1..64]x{D}:bf16", True),
    "group_norm": (lambda: nn.GroupNorm(8, D), f"[1..16]x{D}x7", False),
    "glu": (lambda: Fn(lambda x: F.glu(x, -1)), f"[1..64]x{D}:bf16", True),
    "logsumexp": (lambda: Fn(lambda x: torch.logsumexp(x, -1)), f"[1..64]x{D}", True),
    "softmax_dim1": (lambda: Fn(lambda x: torch.softmax(x, 1)), f"2x[1..64]x{D}", True),
    # token ids inside the table: the spec's value range
    "embedding": (Embed, "1x[1..64]:i64[0..511]", True),
    "embedding_i32_edge": (Embed, "2x[1..64]:i32[500..511]", True),
    "two_outputs": (TwoOut, f"1x[S=1..64]x{D}:bf16, 1x[S]x{D}:bf16", True),
    "pow_tensor": (lambda: Fn(lambda x, e: x.abs().pow(e)), f"[R=1..64]x{D}, [R]x{D}", False),
    "round_tan_atan": (
        lambda: Fn(lambda x: torch.round(x) + torch.tan(x) + torch.atan(x) + torch.sinh(x)),
        f"[1..64]x{D}",
        False,
    ),
    "argmax": (lambda: Fn(lambda x: x.argmax(-1)), f"[1..64]x{D}", False),
    # docs/internals.md's worked example of a table row (tests/test_internals.py)
    "bitwise_not_mask": (lambda: Fn(lambda x: torch.where(~(x > 0), -x, x)), f"[1..64]x{D}", True),
    "bitwise_not_int": (lambda: Fn(lambda x: ~x + 1), "[1..64]x64:i32[-100..100]", True),
    "to_half": (lambda: Fn(lambda x: (x * 2).to(torch.float16)), f"[1..64]x{D}", True),
    "in_place": (InPlace, f"[1..64]x{D}", False),
    "swiglu_fused": (SwiGLUFused, f"1x[1..64]x{2 * D}:bf16", True),
    # a per-token int8 quantizer: round (halves to even) in the kernel
    "per_token_int8": (PerTokenInt8, f"[1..64]x{D}:bf16", True),
    # float8 has no Triton type here: its region runs as its source calls, judged in float32
    "fp8_quant": (FP8Quant, f"[1..64]x{D}:bf16", False),
    "min_max_tensor": (
        lambda: Fn(lambda x, y: torch.min(x, y) + torch.max(x, y)),
        f"[R=1..64]x{D}, [R]x{D}",
        True,
    ),
    "erfc_erfinv": (
        lambda: Fn(lambda x: torch.erfc(x) + torch.special.erfinv(x.clamp(-0.9, 0.9))),
        f"[1..64]x{D}",
        False,
    ),
    "sdpa_causal": (lambda: Attn(), "1x4x[S=1..64]x64:bf16, 1x4x[S]x64:bf16, 1x4x[S]x64:bf16", True),
    "sdpa_gqa": (lambda: Attn(gqa=True), "1x4x[S=1..64]x64:bf16, 1x2x[S]x64:bf16, 1x2x[S]x64:bf16", True),
    "eager_attn": (
        EagerAttn,
        "1x4x[S=1..64]x64:bf16, 1x4x[S]x64:bf16, 1x4x[S]x64:bf16, 1x1x[S]x[S]:bool",
        True,
    ),
    "mixed_norm": (MixedNorm, f"1x[1..64]x{D}:bf16", True),
    "router": (lambda: Router().to(torch.bfloat16), f"[1..64]x{D}:bf16", False),
    "cat_stack": (CatStack, f"[R=1..64]x{D}, [R]x{D}", True),
    "einsum": (Einsum, f"2x[S=1..64]x{D}, 2x[S]x{D}", True),
    "heads_view": (HeadsView, f"2x[1..64]x{D}:bf16", True),
}
