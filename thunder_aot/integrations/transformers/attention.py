"""Which attention a transformers model runs, and the causal masks its decoder layers take.

Read by both halves of :mod:`thunder_aot.integrations.transformers`: the export wrappers
(:mod:`.export_wrappers`: whether a prefill exports its layers with their mask) and the run-time
adapters (:mod:`.adapters`: the masks a layer stack builds for a batch without padding).
"""

from __future__ import annotations

import torch
from torch import nn

__all__ = ["as_mask", "attention_implementation", "causal_mask", "layer_windows", "mask_dtype", "needs_mask"]


def attention_implementation(layer: nn.Module) -> str | None:
    """The attention a transformers layer (or model) runs: its config's ``_attn_implementation``."""
    config = getattr(layer, "config", None)
    if config is None:
        config = next((m.config for m in layer.modules() if hasattr(m, "config")), None)
    return getattr(config, "_attn_implementation", None)


def layer_windows(config) -> list[int | None]:
    """Each decoder layer's sliding window (None: full causal attention), as transformers' models
    pick their masks: by ``config.layer_types`` where the config has them (GPT-OSS, Gemma 2/3,
    Qwen 2/3), else every layer sliding where ``config.sliding_window`` is set (Mistral)."""
    window = getattr(config, "sliding_window", None)
    types = getattr(config, "layer_types", None)
    if types is None:
        return [window] * config.num_hidden_layers
    unknown = sorted(set(types) - {"full_attention", "sliding_attention"})
    if unknown:
        raise TypeError(
            f"layer types {', '.join(unknown)}: expected full_attention and sliding_attention layers"
        )
    return [window if kind == "sliding_attention" else None for kind in types]


def needs_mask(config) -> bool:
    """Whether a model's layers must be given their attention mask to be causal: eager attention
    adds the mask to its scores (no mask: every query sees every key), and sliding-window layers
    take their window from it. sdpa and flash attention without a window are causal on their own."""
    return getattr(config, "_attn_implementation", None) not in (
        "sdpa",
        "flash_attention_2",
        "flash_attention_3",
    ) or any(w is not None for w in layer_windows(config))


def mask_dtype(model: nn.Module) -> torch.dtype:
    """The dtype of the mask transformers gives ``model``'s layers: bool for sdpa and flash
    attention, the model's dtype (an additive mask) for eager attention."""
    if attention_implementation(model) == "eager":
        return next(model.parameters()).dtype
    return torch.bool


def slot_mask(
    query_slots: torch.Tensor,
    slots: torch.Tensor,
    dtype: torch.dtype,
    valid: torch.Tensor | None = None,
    window: int | None = None,
) -> torch.Tensor:
    """The ``[batch, 1, queries, keys]`` mask of queries at positions ``query_slots`` over keys at
    positions ``slots`` (both 1-D): a query attends the keys up to its own position (and within
    ``window`` of it). With ``valid`` (``[batch, keys]``, False at padding) only valid keys, and always
    the query's own position (a padding query attends itself: no row without a key); without it the
    batch dim is 1. Bool (True where it attends: sdpa's) or, for a floating ``dtype``, additive (0
    where it attends, the dtype's minimum elsewhere: eager attention's)."""
    query, keys = query_slots[:, None], slots[None, :]
    attends = keys <= query
    if window is not None:
        attends &= keys > query - window
    attends = attends[None] if valid is None else (attends & valid[:, None, :]) | (keys == query)
    return as_mask(attends[:, None], dtype)


def as_mask(attends: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """A bool mask (True where a query attends) in ``dtype``: itself for bool, else additive (0 where
    it attends, the dtype's minimum elsewhere), which sdpa adds as it is where it would convert a bool
    mask on every call."""
    if dtype == torch.bool:
        return attends
    return torch.zeros(attends.shape, dtype=dtype, device=attends.device).masked_fill_(
        ~attends, torch.finfo(dtype).min
    )


def causal_mask(
    batch: int, length: int, dtype: torch.dtype, device: torch.device | str, window: int | None = None
) -> torch.Tensor:
    """The ``[batch, 1, length, length]`` mask transformers builds for a batch without padding:
    query ``q`` attends key ``k`` where ``k <= q`` (and ``k > q - window`` with a sliding window),
    in ``dtype`` as :func:`slot_mask` makes it."""
    positions = torch.arange(length, device=device)
    return slot_mask(positions, positions, dtype, window=window).expand(batch, 1, length, length).contiguous()
