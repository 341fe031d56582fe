"""Torch functions that Thunder 0.2.6 cannot trace as models call them, taken whole at export.

transformers' sdpa attention calls ``F.scaled_dot_product_attention(..., enable_gqa=True)`` (grouped
query attention without repeating the key/value heads); Thunder's own symbol for it takes no
``enable_gqa`` and decomposes into matmuls and a softmax. Each function of :data:`TORCH_OPS` is
instead one operator of :data:`executor` (passed to ``thunder.jit`` at export): a prim with a meta
function for its output, executed by the torch function itself, so that the execution trace holds
one call of that function with the arguments the model passed, and the generated module calls it
the same way (the kernel torch picks for it: flash or cuDNN attention on the GPU).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from thunder.core import utils
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
    utils.check(query.ndim >= 3 and key.ndim == query.ndim and value.ndim == query.ndim,
                lambda: f"scaled_dot_product_attention: query, key and value of rank >= 3 expected, got {query.ndim}, {key.ndim}, {value.ndim}")
    utils.check(query.shape[-1] == key.shape[-1] and key.shape[-2] == value.shape[-2],
                lambda: f"scaled_dot_product_attention: mismatched query {query.shape}, key {key.shape}, value {value.shape}")
    heads, kv_heads = query.shape[-3], key.shape[-3]
    if enable_gqa:
        utils.check(heads % kv_heads == 0,
                    lambda: f"scaled_dot_product_attention: {heads} query heads are not a multiple of {kv_heads} key/value heads")
    else:
        utils.check(heads == kv_heads,
                    lambda: f"scaled_dot_product_attention: {heads} query heads and {kv_heads} key/value heads without enable_gqa")
    utils.check(not (is_causal and attn_mask is not None),
                lambda: "scaled_dot_product_attention: an attn_mask together with is_causal=True")
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
    TorchOp(torch.nn.functional.scaled_dot_product_attention, torch.nn.functional, "scaled_dot_product_attention", _sdpa_meta),
)

#: the executor whose lookasides replace :data:`TORCH_OPS`' functions while Thunder traces
executor = OperatorExecutor("thunder_aot_torch_ops")
for _op in TORCH_OPS:
    executor.register_operator(_op.name, meta=_op.meta, fn=_op.function, module=_op.module, replaces=_op.function)
