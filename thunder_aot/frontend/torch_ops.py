"""Torch functions that Thunder 0.2.6 cannot trace as models call them, taken whole at export.

transformers' sdpa attention calls ``F.scaled_dot_product_attention(..., enable_gqa=True)`` (grouped
query attention without repeating the key/value heads); Thunder's own symbol for it takes no
``enable_gqa`` and decomposes into matmuls and a softmax. Each function of :data:`TORCH_OPS` is
instead one operator of :data:`executor` (passed to ``thunder.jit`` at export): a prim with a meta
function for its output, executed by the torch function itself, so that the execution trace holds
one call of that function with the arguments the model passed, and the generated module calls it
the same way (the kernel torch picks for it: flash or cuDNN attention on the GPU).

torch functions that return a named tuple (``x.max(dim).values``, ``torch.topk(...).indices``)
return a plain tuple from Thunder's symbol: :data:`NAMED_RESULTS` names them again while tracing
(GPT-OSS's attention subtracts ``logits.max(dim=-1, keepdim=True).values``), and
:data:`TRANSLATIONS` call Thunder's symbols for torch functions its own mapping mistranslates. The
trace is Thunder's own (the same symbol, fused like any other); only how the model's call reaches
it changes.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Callable
from dataclasses import dataclass

import torch

from thunder_aot.verify.judge import grouped_mm_by_group

with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # Thunder warns about optional executors it cannot find
    import thunder.torch as ltorch
    from thunder.core import prims, utils
    from thunder.core.proxies import TensorProxy
    from thunder.extend import OperatorExecutor


def _sdpa_meta(
    query: TensorProxy,
    key: TensorProxy,
    value: TensorProxy,
    attn_mask: TensorProxy | None = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    *,
    scale: float | None = None,
    enable_gqa: bool = False,
) -> TensorProxy:
    """``(..., Hq, L, E) x (..., Hkv, S, E) x (..., Hkv, S, Ev) -> (..., Hq, L, Ev)``."""
    utils.check(
        query.ndim >= 3 and key.ndim == query.ndim and value.ndim == query.ndim,
        lambda: (
            "scaled_dot_product_attention: query, key and value of rank >= 3 expected, "
            f"got {query.ndim}, {key.ndim}, {value.ndim}"
        ),
    )
    utils.check(
        query.shape[-1] == key.shape[-1] and key.shape[-2] == value.shape[-2],
        lambda: (
            f"scaled_dot_product_attention: mismatched query {query.shape}, "
            f"key {key.shape}, value {value.shape}"
        ),
    )
    heads, kv_heads = query.shape[-3], key.shape[-3]
    if enable_gqa:
        utils.check(
            heads % kv_heads == 0,
            lambda: (
                f"scaled_dot_product_attention: {heads} query heads are not a multiple of "
                f"{kv_heads} key/value heads"
            ),
        )
    else:
        utils.check(
            heads == kv_heads,
            lambda: (
                f"scaled_dot_product_attention: {heads} query heads and {kv_heads} key/value heads "
                "without enable_gqa"
            ),
        )
    utils.check(
        not (is_causal and attn_mask is not None),
        lambda: "scaled_dot_product_attention: an attn_mask together with is_causal=True",
    )
    return TensorProxy(like=query, shape=(*query.shape[:-1], value.shape[-1]))


@dataclass(frozen=True)
class TorchOp:
    """A torch function taken whole: its name in the generated code (``module.name``) and its meta."""

    function: Callable
    module: object
    name: str
    meta: Callable


#: the torch functions taken whole at export
TORCH_OPS = (
    TorchOp(
        torch.nn.functional.scaled_dot_product_attention,
        torch.nn.functional,
        "scaled_dot_product_attention",
        _sdpa_meta,
    ),
)


@dataclass(frozen=True)
class NamedResult:
    """A torch function whose tuple result has names: the functions and the method that Thunder
    traces as ``symbol``, and the named tuple type torch returns."""

    functions: tuple[Callable, ...]
    symbol: Callable
    result_type: type

    def lookaside(self, *args, **kwargs):
        out = self.symbol(*args, **kwargs)  # records Thunder's symbol in the trace
        return self.result_type(out) if isinstance(out, tuple) else out


#: torch functions whose results are named tuples, traced by Thunder's symbol and named again
NAMED_RESULTS = (
    NamedResult((torch.max, torch.Tensor.max), ltorch.torch_max, torch.return_types.max),
    NamedResult((torch.topk, torch.Tensor.topk), ltorch.topk, torch.return_types.topk),
    NamedResult((torch.sort, torch.Tensor.sort), ltorch.sort, torch.return_types.sort),
)


def _grouped_mm(a, b, offs=None, bias=None, out_dtype=None):
    """``torch._grouped_mm`` (what ``F.grouped_mm`` calls) as Thunder's prim: Thunder's symbol spells
    ``offs`` as ``offsets``, and its torch executor's check of the symbol takes 3 of its 5 arguments."""
    if bias is not None or out_dtype not in (None, a.dtype) or offs is None:
        return ltorch._grouped_mm(a, b, offs, bias, out_dtype)  # Thunder's own message for what it lacks
    return prims._grouped_mm(a, b, offs)


#: torch's own grouped matmul (None on a torch without one)
TORCH_GROUPED_MM = getattr(torch, "_grouped_mm", None)


def _grouped_mm_cpu_safe(mat_a, mat_b, offs=None, bias=None, out_dtype=None):
    """``torch._grouped_mm`` while export traces a module on the CPU: CPU operands are multiplied
    group by group with plain matmuls (16-bit floats in float32, rounded back). torch 2.11's CPU
    grouped-matmul kernel crashes the process (a segmentation fault on the GPU machine's AMX-capable
    Xeon, seen for bfloat16 and, inside a traced MoE layer, for float32 operands too; not on the
    development machine); the values computed while tracing are not the generated module's."""
    if mat_a.device.type != "cpu" or (out_dtype is not None and out_dtype != mat_a.dtype):
        return TORCH_GROUPED_MM(mat_a, mat_b, offs=offs, bias=bias, out_dtype=out_dtype)
    wide = torch.float32 if mat_a.dtype in (torch.bfloat16, torch.float16) else mat_a.dtype
    out = grouped_mm_by_group(mat_a.to(wide), mat_b.to(wide), offs, None if bias is None else bias.to(wide))
    return out.to(mat_a.dtype)


@contextlib.contextmanager
def cpu_safe_grouped_mm():
    """While tracing, ``torch._grouped_mm`` (which ``F.grouped_mm`` and Thunder's execution trace
    look up by name) is :func:`_grouped_mm_cpu_safe`; the trace and the generated code still name
    ``torch._grouped_mm``."""
    if TORCH_GROUPED_MM is None:
        yield
        return
    previous = torch._grouped_mm
    torch._grouped_mm = _grouped_mm_cpu_safe
    try:
        yield
    finally:
        torch._grouped_mm = previous


#: torch functions traced through a translation of ours into Thunder's symbols (by the function)
TRANSLATIONS: dict[Callable, Callable] = (
    {TORCH_GROUPED_MM: _grouped_mm, _grouped_mm_cpu_safe: _grouped_mm}
    if hasattr(prims, "_grouped_mm")
    else {}
)

#: the executor whose lookasides replace :data:`TORCH_OPS`' functions while Thunder traces, and
#: name :data:`NAMED_RESULTS`' results (a method call on a traced tensor reaches Thunder as its symbol)
executor = OperatorExecutor("thunder_aot_torch_ops")
for _op in TORCH_OPS:
    executor.register_operator(
        _op.name, meta=_op.meta, fn=_op.function, module=_op.module, replaces=_op.function
    )
for _named in NAMED_RESULTS:
    for _key in (*_named.functions, _named.symbol):
        executor._lookasides[_key] = _named.lookaside
executor._lookasides.update(TRANSLATIONS)
