"""Modules a sound export must accept although eager and a fused kernel round differently (the
export gate once refused them on rounding), and modules it must refuse or split."""

from __future__ import annotations

import torch
from torch import nn


class Fp32OutputThroughBf16(nn.Module):
    """transformers' LlamaRMSNorm with an fp32 weight and bf16 input: ``weight * hidden.to(bf16)``
    is an fp32 output computed through a bf16 intermediate."""

    def __init__(self, hidden: int = 256) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(hidden))
        self.variance_epsilon = 1e-6

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        input_dtype = hidden_states.dtype
        hidden_states = hidden_states.to(torch.float32)
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        return self.weight * hidden_states.to(input_dtype)


class Fp32Mlp(nn.Module):
    """An fp32 SwiGLU MLP whose matmuls reduce over 512 elements."""

    def __init__(self, hidden: int = 512, inner: int = 1024) -> None:
        super().__init__()
        self.gate = nn.Linear(hidden, inner, bias=False)
        self.up = nn.Linear(hidden, inner, bias=False)
        self.down = nn.Linear(inner, hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(nn.functional.silu(self.gate(x)) * self.up(x))


class Fp16RmsNormNoUpcast(nn.Module):
    """An RMSNorm computed in fp16 throughout (no upcast): eager rounds every step in fp16."""

    def __init__(self, hidden: int = 256) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.rand(hidden, dtype=torch.float16) + 0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5))


class _Config:
    def __init__(self) -> None:
        self.shift = 0.5
        self.rope = {"theta": 10000.0}


class ConfiguredScale(nn.Module):
    """Settings read through nested objects, as transformers' modules read ``self.config.*``."""

    def __init__(self) -> None:
        super().__init__()
        self.config = _Config()
        self.opts = {"bias": 1.5}

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x + self.config.shift) / self.config.rope["theta"] + self.opts["bias"]


class ReluGate(nn.Module):
    """``relu(x) * y``: Thunder decomposes relu into ``where(x > 0, x, 0)``, which turns NaN into 0
    where eager's relu keeps NaN."""

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return torch.relu(x) * y + nn.functional.relu(y)


def relu_gate() -> ReluGate:
    return ReluGate()


def configured_scale() -> ConfiguredScale:
    return ConfiguredScale()


def fp32_output_through_bf16() -> Fp32OutputThroughBf16:
    return Fp32OutputThroughBf16().requires_grad_(False)


def fp32_mlp() -> Fp32Mlp:
    return Fp32Mlp().requires_grad_(False)


def fp16_rmsnorm_no_upcast() -> Fp16RmsNormNoUpcast:
    return Fp16RmsNormNoUpcast().requires_grad_(False)


class SequenceStatistics(nn.Module):
    """A mean, a variance and a standard deviation over a dynamic dim: Thunder divides by its size
    (n, n - 1) as a float constant, which once made every trace differ."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.mean(1) * x.var(1) + x.std(-2, keepdim=True).sum(1)


class ModulatedLayerNorm(nn.Module):
    """A LayerNorm without affine, then a per-sample scale and shift (adaptive LayerNorm). Rows holding
    1e20 overflow F.layer_norm's float32 variance (eager's output 0, 0 * inf NaN) where the generated
    var_mean does not, as float64 does not."""

    def __init__(self) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(256, elementwise_affine=False, eps=1e-6)

    def forward(self, x: torch.Tensor, shift: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
        return self.norm(x) * (1 + scale) + shift


class LogSoftmax(nn.Module):
    """A float32 log_softmax of a bf16 input. Thunder decomposes it through logsumexp, which zeroes
    an infinite row maximum: a row holding +inf comes out -inf where eager's is NaN."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.log_softmax(x.float(), -1).to(x.dtype)


def log_softmax() -> LogSoftmax:
    return LogSoftmax()


def sequence_statistics() -> SequenceStatistics:
    return SequenceStatistics()


def modulated_layer_norm() -> ModulatedLayerNorm:
    return ModulatedLayerNorm()


#: (import path, shapes): correct modules that must export whatever the verification's seed
CORRECT = [
    ("tests.sound_modules:fp32_output_through_bf16", "1x[1..32]x256:bf16"),
    ("tests.sound_modules:fp32_mlp", "[1..16]x512:fp32"),
    ("tests.sound_modules:fp16_rmsnorm_no_upcast", "1x[1..32]x256:fp16"),
    ("tests.sound_modules:relu_gate", "[S=1..16]x64:bf16, [S]x64:bf16"),
    ("tests.sound_modules:sequence_statistics", "2x[1..40]x64:bf16"),
    ("tests.sound_modules:modulated_layer_norm", "2x[S=1..40]x256, 2x1x256, 2x1x256"),
]


class DtypeBranch(nn.Module):
    """A forward that branches on its input's dtype (Thunder 0.2.6 compares its own dtypes unequal to
    torch's, so a trace took the other branch)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dtype == torch.float32:
            return x * 2.0
        if torch.bfloat16 != x.dtype:
            return x * 3.0
        return x * 5.0


class NamedResults(nn.Module):
    """Named fields of torch's tuple results: ``.values`` of a max over a dim (GPT-OSS's attention),
    ``.indices`` of a topk, a sort's ``.values``."""

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        shifted = x - x.max(dim=-1, keepdim=True).values
        top = torch.topk(x, 2, dim=-1).indices
        return shifted.exp(), top, x.sort(dim=-1).values


class NearTieRouter(torch.nn.Module):
    """A top-1 router over two experts whose router rows differ by one bf16 step in a few weights:
    the bf16 scores of most tokens round to a tie (or the other order) that float64 resolves, so
    eager and its float64 twin pick different experts for many tokens; the experts (x * 2, x * -1)
    make a different pick a different answer."""

    def __init__(self) -> None:
        super().__init__()
        gen = torch.Generator().manual_seed(5)
        first = torch.randn(1, 64, generator=gen).bfloat16()
        second = first.clone()
        second.view(torch.int16)[0, :4] += 1  # one bf16 step away from zero
        self.router = torch.nn.Parameter(torch.cat([first, second]), requires_grad=False)

    def forward(self, x):
        scores = torch.nn.functional.linear(x, self.router)
        _, picked = torch.topk(scores, 1, dim=-1)
        return x * torch.where(picked == 0, 2.0, -1.0).to(x.dtype)


def near_tie_router():
    return NearTieRouter().eval()


class Chatty(torch.nn.Module):
    """Prints on every forward (a debugging print left in a model)."""

    def forward(self, x):
        print("forward called with", tuple(x.shape))
        return x * 2


def chatty():
    return Chatty()


class ItemBranch(torch.nn.Module):
    """Branches on a tensor's value read into Python: one trace holds one branch."""

    def forward(self, x):
        if x[0, 0].item() > 0:
            return x * 2
        return x - 1


def item_branch():
    return ItemBranch()


class RandomScale(torch.nn.Module):
    """Scales by Python's random: a trace holds the number drawn while tracing."""

    def forward(self, x):
        import random

        return x * random.random()


def random_scale():
    return RandomScale()


class CountingScale(torch.nn.Module):
    """Scales by how often it was called: a counter attribute its forward advances."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        return x * self.calls


class RunningTotal(torch.nn.Module):
    """Adds a running total it keeps in a buffer, written in place by every call."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("total", torch.zeros(()))

    def forward(self, x):
        self.total.add_(x.sum())
        return x + self.total


class ClockScale(torch.nn.Module):
    """Scales by the time of day: state outside the module."""

    def forward(self, x):
        import time

        return x * (time.time() % 1.0 + 1.0)


def counting_scale():
    return CountingScale()


def running_total():
    return RunningTotal()


def clock_scale():
    return ClockScale()
