"""Whole transformers decoder layers and decoder stacks as ``thunder-aot export`` traces them.

A transformers decoder layer is called as ``layer(hidden_states, attention_mask=..., position_ids=...,
past_key_values=..., use_cache=..., cache_position=..., position_embeddings=(cos, sin), **kwargs)``;
export takes tensors as positional inputs. The modules here put a layer (or a whole causal LM) behind
a forward of plain tensors: :class:`DecoderLayerCall` (``forward(hidden_states, cos, sin)``: a causal
prefill without a mask or a cache), :class:`DecoderLayerMaskCall` (the attention mask an input),
:class:`DecoderLayerCacheCall` (the KV cache as tensors in and out) and :class:`DecoderStackCall`
(embeddings in, last-token logits out). :data:`LAYER_CALLS` names them by the class generated from
each; :mod:`.adapters` puts the generated modules back under transformers' call conventions.
"""

from __future__ import annotations

import inspect

import torch
from torch import nn

from thunder_aot.integrations.transformers.attention import attention_implementation, needs_mask
from thunder_aot.integrations.transformers.rotary import final_norm_name, rotary_call, rotary_kinds

__all__ = [
    "LAYER_CALLS",
    "DecoderLayerCacheCall",
    "DecoderLayerCall",
    "DecoderLayerMaskCall",
    "DecoderLayerStaticCacheCall",
    "DecoderStackCall",
    "LayerKeywords",
    "StaticStepCache",
    "StepCache",
    "prefill_call",
]


class LayerKeywords:
    """What a decoder layer's ``forward`` takes beyond the keywords every transformers layer shares:
    ``nones``, its required parameters that a call without them leaves unset, each given None
    (Falcon's ``alibi``: None where the layer applies rotary embeddings), and ``cache``, the keyword
    its KV cache goes by (``past_key_values``; Falcon's ``layer_past``)."""

    #: what the layer calls of this module pass themselves
    PASSED = frozenset({"attention_mask", "position_embeddings", "past_key_values", "use_cache"})

    def __init__(self, nones: dict[str, None], cache: str) -> None:
        self.nones, self.cache = nones, cache

    @classmethod
    def of(cls, layer: nn.Module) -> LayerKeywords:
        try:
            parameters = list(inspect.signature(layer.forward).parameters.values())
        except (TypeError, ValueError):  # no signature to read: transformers' common keywords
            return cls({}, "past_key_values")
        names = {p.name for p in parameters}
        required = [
            p.name
            for p in parameters[1:]  # after hidden_states
            if p.default is p.empty
            and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
            and p.name not in cls.PASSED
        ]
        cache = (
            "layer_past" if "layer_past" in names and "past_key_values" not in names else "past_key_values"
        )
        return cls(dict.fromkeys(required), cache)


class DecoderLayerCall(nn.Module):
    """A transformers decoder layer called with ``hidden_states`` and the rotary ``(cos, sin)`` as
    plain tensor inputs, no attention mask (causal attention) and no cache: what ``thunder-aot
    export`` traces for a whole layer. Its tensors are the layer's, under ``layer.``."""

    def __init__(self, layer: nn.Module) -> None:
        super().__init__()
        self.layer = layer
        self._keywords = LayerKeywords.of(layer)

    def forward(self, hidden_states: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        out = self.layer(
            hidden_states, attention_mask=None, position_embeddings=(cos, sin), **self._keywords.nones
        )
        return out[0] if isinstance(out, tuple) else out


class DecoderLayerMaskCall(nn.Module):
    """A transformers decoder layer with its attention mask as an input: ``forward(hidden_states,
    cos, sin, attention_mask)``, the mask as transformers' sdpa path builds it (``[batch, 1, seq,
    seq]`` bool, True where a query attends a key). transformers materializes that mask inside a
    CUDA-graph capture or a compile, and for padded batches; :class:`DecoderLayerCall` serves the
    calls without one. Its tensors are the layer's, under ``layer.``."""

    def __init__(self, layer: nn.Module) -> None:
        super().__init__()
        self.layer = layer
        self._keywords = LayerKeywords.of(layer)

    def forward(self, hidden_states, cos, sin, attention_mask):
        out = self.layer(
            hidden_states,
            attention_mask=attention_mask,
            position_embeddings=(cos, sin),
            **self._keywords.nones,
        )
        return out[0] if isinstance(out, tuple) else out


def prefill_call(config) -> type[nn.Module]:
    """How a prefill of a model with ``config`` exports its layers: :class:`DecoderLayerMaskCall`
    where its layers need their mask (:func:`needs_mask`), else :class:`DecoderLayerCall`."""
    return DecoderLayerMaskCall if needs_mask(config) else DecoderLayerCall


class StepCache:
    """The KV cache a layer sees inside :class:`DecoderLayerCacheCall`: ``update`` appends the step's
    keys and values to the past ones along the sequence dim and returns them, as transformers'
    ``DynamicCache`` does for one layer."""

    def __init__(self, keys: torch.Tensor, values: torch.Tensor) -> None:
        self.keys, self.values = keys, values

    def update(self, key_states, value_states, layer_idx=None, cache_kwargs=None):
        self.keys = torch.cat([self.keys, key_states], dim=-2)
        self.values = torch.cat([self.values, value_states], dim=-2)
        return self.keys, self.values

    def get_seq_length(self, layer_idx=0) -> int:
        return self.keys.shape[-2]


class DecoderLayerCacheCall(nn.Module):
    """A transformers decoder layer with its KV cache as explicit tensors: ``forward(hidden_states,
    cos, sin, past_keys, past_values)`` returns ``(hidden_states, keys, values)``, the keys and values
    being the past ones with this call's appended (``[batch, kv_heads, past + seq, head_dim]``).

    Export it with two buckets: a prefill (``past`` of length 0, any ``seq``; causal attention) and
    a decode step (``seq`` 1, any ``past``; attention over every cached position). No attention
    mask: a batch without padding. Its tensors are the layer's, under ``layer.``."""

    def __init__(self, layer: nn.Module) -> None:
        super().__init__()
        self.layer = layer
        self._keywords = LayerKeywords.of(layer)

    def forward(self, hidden_states, cos, sin, past_keys, past_values):
        cache = StepCache(past_keys, past_values)
        keywords = {**self._keywords.nones, self._keywords.cache: cache}
        out = self.layer(
            hidden_states, attention_mask=None, position_embeddings=(cos, sin), use_cache=True, **keywords
        )
        return (out[0] if isinstance(out, tuple) else out), cache.keys, cache.values


class StaticStepCache:
    """The KV cache a layer sees inside :class:`DecoderLayerStaticCacheCall`: preallocated keys and
    values (``[batch, kv_heads, max_len, head_dim]``); ``update`` writes the call's keys and values
    at ``positions`` in place (as transformers' ``StaticCache`` does) and returns the whole cache."""

    def __init__(self, keys: torch.Tensor, values: torch.Tensor, positions: torch.Tensor) -> None:
        self.keys, self.values, self.positions = keys, values, positions

    def update(self, key_states, value_states, layer_idx=None, cache_kwargs=None):
        self.keys.index_copy_(2, self.positions, key_states)
        self.values.index_copy_(2, self.positions, value_states)
        return self.keys, self.values

    def get_seq_length(self, layer_idx=0) -> int:
        return self.keys.shape[-2]


class DecoderLayerStaticCacheCall(nn.Module):
    """A transformers decoder layer over a static KV cache: ``forward(hidden_states, cos, sin, keys,
    values, start, attention_mask)`` writes the call's keys and values into ``keys`` and ``values``
    (``[batch, kv_heads, max_len, head_dim]``, preallocated) at positions ``start .. start + seq - 1``
    (``start``: a one-element int64 tensor, so one program serves every step) and attends over the
    whole cache under ``attention_mask`` (``[batch, 1, seq, max_len]``, as transformers builds it for
    the layer's attention: bool for sdpa, additive for eager; it holds the causal order, padding and
    sliding windows). Returns the hidden states; the cache is written in place.

    Export it with a decode bucket (``seq`` 1) and, for prefills, one with ``seq`` dynamic; the
    integer range of ``start`` keeps the writes inside the smallest cache of the buckets. What
    :class:`~thunder_aot.integrations.transformers.decode.StaticDecoder` runs. Its tensors are the
    layer's, under ``layer.``."""

    def __init__(self, layer: nn.Module) -> None:
        super().__init__()
        self.layer = layer
        self._keywords = LayerKeywords.of(layer)

    def forward(self, hidden_states, cos, sin, keys, values, start, attention_mask):
        seq = hidden_states.shape[1]
        # (a decode step's one position is ``start`` itself: no kernel to add a zero)
        positions = start if seq == 1 else start + torch.arange(seq, device=start.device)
        cache = StaticStepCache(keys, values, positions)
        keywords = {**self._keywords.nones, self._keywords.cache: cache}
        out = self.layer(
            hidden_states,
            attention_mask=attention_mask,
            position_embeddings=(cos, sin),
            use_cache=True,
            cache_position=positions,
            **keywords,
        )
        return out[0] if isinstance(out, tuple) else out


#: the ways export takes a whole layer, by the name of the class generated from each
LAYER_CALLS: dict[str, type[nn.Module]] = {
    call.__name__: call
    for call in (DecoderLayerCall, DecoderLayerMaskCall, DecoderLayerCacheCall, DecoderLayerStaticCacheCall)
}


class DecoderStackCall(nn.Module):
    """A decoder-only transformers causal LM from its input embeddings to the last token's logits:
    ``forward(inputs_embeds)`` runs the rotary embedding, every decoder layer (causal attention, no
    mask, no cache), the final norm and the LM head, as ``model(input_ids, use_cache=False,
    logits_to_keep=1)`` does after the embedding lookup. Export it to get the whole stack as one
    generated module (one dispatch per forward instead of one per layer). It follows the layout of
    Llama-like models (``model.model.rotary_emb``, ``.layers``, ``.norm``, ``model.lm_head``); a
    model whose forward does more (Gemma scales its embeddings) is refused by :class:`StackAdapter`'s
    check. Its tensors are the model's, under ``model.``."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        if needs_mask(model.config):
            raise TypeError(
                f"DecoderStackCall: {type(model).__name__}'s layers need their attention mask "
                f"({attention_implementation(model)} attention or sliding windows); export a layer as "
                "DecoderLayerMaskCall and run the stack with LayerStack"
            )
        self.model = model
        # read here, not in forward (which Thunder traces): each layer's rotary kind, the kinds
        # once each, and the final norm's attribute name
        self.rope_kinds = tuple(rotary_kinds(model))
        self.distinct_kinds = tuple(dict.fromkeys(self.rope_kinds))
        self.norm_name = final_norm_name(model.model)

    def forward(self, inputs_embeds: torch.Tensor) -> torch.Tensor:
        base = self.model.model
        positions = torch.arange(inputs_embeds.shape[1], device=inputs_embeds.device).unsqueeze(0)
        ropes = {}
        for kind in self.distinct_kinds:
            ropes[kind] = rotary_call(base.rotary_emb, inputs_embeds, positions, kind)
        hidden_states = inputs_embeds
        for layer, kind in zip(base.layers, self.rope_kinds):
            out = layer(hidden_states, attention_mask=None, position_embeddings=ropes[kind])
            hidden_states = out[0] if isinstance(out, tuple) else out
        return self.model.lm_head(getattr(base, self.norm_name)(hidden_states)[:, -1:, :])
