"""Where a decoder layer's keys and values live in transformers' caches, for the modules generated
from :class:`~thunder_aot.integrations.transformers.export_wrappers.DecoderLayerCacheCall` (a
``DynamicCache``'s layer slot: :class:`CacheSlots`) and from ``DecoderLayerStaticCacheCall`` (a
``StaticCache``'s preallocated layer: :class:`StaticSlots`). :class:`~.adapters.LayerAdapter` asks
them whether a call's cache is one the generated module serves, and hands it the tensors."""

from __future__ import annotations

import torch
from torch import nn

from thunder_aot.integrations.transformers.attention import as_mask, slot_mask
from thunder_aot.runtime import NoBucketError
from thunder_aot.runtime.specs import bucket_specs

__all__ = ["CacheSlots", "StaticSlots"]


class CacheSlots:
    """Where a layer's keys and values live in a transformers ``DynamicCache``: its layer's slot
    (``cache.layers[layer_idx]``, a ``DynamicLayer``). The generated module reads the past from it
    and returns the past with the step's appended, which replaces the slot's tensors, as
    ``DynamicLayer.update`` would. Other caches (static, sliding-window, quantized, offloaded) are
    refused and run the original layer."""

    def __init__(self, layer: nn.Module, generated_class: type) -> None:
        self.layer_idx = next(
            (m.layer_idx for m in layer.modules() if isinstance(getattr(m, "layer_idx", None), int)), None
        )
        #: (kv heads, head dim) of an empty past: the prefill bucket's past_keys shape
        self.empty_shape = _empty_past_shape(generated_class)

    def refusal(self, cache: object) -> str | None:
        if cache is None:
            return None if self.empty_shape else "no prefill bucket (past of length 0)"
        # transformers is an optional dependency (the hf extra): imported where a cache is met
        from transformers.cache_utils import DynamicCache, DynamicLayer

        if type(cache) is not DynamicCache or getattr(cache, "offloading", False):
            return f"a {type(cache).__name__}"
        if self.layer_idx is None:
            return "no layer_idx"
        if self.layer_idx < len(cache.layers) and type(cache.layers[self.layer_idx]) is not DynamicLayer:
            return f"a {type(cache.layers[self.layer_idx]).__name__} cache layer"
        if self.layer_idx >= len(cache.layers) and cache.layer_class_to_replicate is not DynamicLayer:
            return "a cache without this layer"
        return None

    def _slot(self, cache):
        while len(cache.layers) <= self.layer_idx:
            cache.layers.append(cache.layer_class_to_replicate())
        return cache.layers[self.layer_idx]

    def past(self, cache, hidden_states: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        slot = None if cache is None else self._slot(cache)
        if slot is not None and slot.is_initialized and slot.keys.numel():
            return slot.keys, slot.values
        if self.empty_shape is None:
            raise NoBucketError("no prefill bucket (past of length 0)")
        empty = hidden_states.new_empty((hidden_states.shape[0], *self.empty_shape))
        return empty, empty

    def store(self, cache, keys: torch.Tensor, values: torch.Tensor) -> None:
        if cache is None:
            return
        slot = self._slot(cache)
        if not slot.is_initialized:
            slot.lazy_initialization(keys, values)
        slot.keys, slot.values = keys, values


def static_mask_dtype(generated_class: type) -> torch.dtype:
    """The dtype of the attention mask (the seventh input) of a module generated from
    :class:`~thunder_aot.integrations.transformers.export_wrappers.DecoderLayerStaticCacheCall`."""
    return bucket_specs(generated_class)[0].inputs[6].dtype


class StaticSlots:
    """Where a layer's keys and values live in transformers' ``StaticCache`` (``generate(...,
    cache_implementation="static")``): its layer's ``StaticLayer``, preallocated on first use, written
    in place by the module generated from :class:`DecoderLayerStaticCacheCall` at the layer's
    ``cumulative_length`` (which it then advances, as ``StaticLayer.update`` does). The call must
    carry transformers' mask over the whole cache. Other caches and cache layers (sliding-window
    ones) run the original layer."""

    def __init__(self, layer: nn.Module, generated_class: type) -> None:
        self.layer_idx = next(
            (m.layer_idx for m in layer.modules() if isinstance(getattr(m, "layer_idx", None), int)), None
        )
        bucket = bucket_specs(generated_class)[0]
        keys = bucket.inputs[3].shape
        #: (kv heads, head dim): the caches the generated module was exported for
        self.heads_and_dim = (keys[1], keys[3])
        self.mask_dtype = static_mask_dtype(generated_class)

    def refusal(self, cache) -> str | None:
        # transformers is an optional dependency (the hf extra): imported where a cache is met
        from transformers.cache_utils import StaticCache, StaticLayer

        if not isinstance(cache, StaticCache):
            return "no cache" if cache is None else f"a {type(cache).__name__}"
        if self.layer_idx is None or self.layer_idx >= len(cache.layers):
            return "no layer_idx" if self.layer_idx is None else "a cache without this layer"
        if type(cache.layers[self.layer_idx]) is not StaticLayer:
            return f"a {type(cache.layers[self.layer_idx]).__name__} cache layer"
        return None

    def run(self, generated, cache, hidden_states, position_embeddings, attention_mask) -> torch.Tensor:
        slot = cache.layers[self.layer_idx]
        if not slot.is_initialized:
            shape = (hidden_states.shape[0], self.heads_and_dim[0], 1, self.heads_and_dim[1])
            slot.lazy_initialization(hidden_states.new_empty(shape), hidden_states.new_empty(shape))
        start = slot.cumulative_length.view(1)
        if attention_mask is None:  # transformers leaves causality to sdpa (no padding): the mask it means
            batch, seq, slots = hidden_states.shape[0], hidden_states.shape[1], slot.keys.shape[2]
            queries = start + torch.arange(seq, device=start.device)
            positions = torch.arange(slots, device=start.device)
            attention_mask = slot_mask(queries, positions, self.mask_dtype).expand(batch, 1, seq, slots)
        elif attention_mask.dtype == torch.bool and self.mask_dtype != torch.bool:
            attention_mask = as_mask(attention_mask, self.mask_dtype)  # exported with an additive mask
        out = generated(hidden_states, *position_embeddings, slot.keys, slot.values, start, attention_mask)
        slot.cumulative_length.add_(hidden_states.shape[1])
        return out


def _empty_past_shape(generated_class: type) -> tuple[int, int, int] | None:
    """``(kv_heads, 0, head_dim)`` from the generated module's bucket whose past has length 0."""
    for bucket in bucket_specs(generated_class):
        past = bucket.inputs[3].shape
        if len(past) == 4 and past[2] == 0 and isinstance(past[1], int) and isinstance(past[3], int):
            return (past[1], 0, past[3])
    return None
