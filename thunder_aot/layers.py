"""Whole transformers decoder layers: what export traces, and what a model calls after ``replace``.

A transformers decoder layer is called as ``layer(hidden_states, attention_mask=..., position_ids=...,
past_key_values=..., use_cache=..., cache_position=..., position_embeddings=(cos, sin), **kwargs)``;
export takes tensors as positional inputs. :class:`DecoderLayerCall` is the layer as export sees it
(``forward(hidden_states, cos, sin)``: a causal prefill without a mask or a cache), and
:class:`LayerAdapter` puts a module generated from it back under the layer's own call convention:
``thunder_aot.replace(model, LlamaDecoderLayer, generated.DecoderLayerCall)`` swaps each layer for an
adapter that shares the layer's tensors and keeps its ``state_dict`` keys.

The adapter runs the generated module for the calls it was exported for (no attention mask, no KV
cache, rotary embeddings given, shapes inside a bucket) and the original layer for every other call
(decoding with a cache, padded batches), counting both in :attr:`LayerAdapter.calls`.
"""

from __future__ import annotations

import collections

import torch
from torch import nn

__all__ = ["DecoderLayerCall", "LayerAdapter"]


class DecoderLayerCall(nn.Module):
    """A transformers decoder layer called with ``hidden_states`` and the rotary ``(cos, sin)`` as
    plain tensor inputs, no attention mask (causal attention) and no cache: what ``thunder-aot
    export`` traces for a whole layer. Its tensors are the layer's, under ``layer.``."""

    def __init__(self, layer: nn.Module) -> None:
        super().__init__()
        self.layer = layer

    def forward(self, hidden_states: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        out = self.layer(hidden_states, attention_mask=None, position_embeddings=(cos, sin))
        return out[0] if isinstance(out, tuple) else out


class LayerAdapter(nn.Module):
    """A decoder layer's call convention in front of a module generated from :class:`DecoderLayerCall`.

    Its submodules are the original layer's own (``state_dict`` keys unchanged); the generated module
    and the original layer (for the calls the generated one does not serve) are held outside the
    module tree."""

    def __init__(self, layer: nn.Module, generated: nn.Module) -> None:
        super().__init__()
        for name, child in layer.named_children():
            self.add_module(name, child)
        for name, parameter in layer.named_parameters(recurse=False):
            self.register_parameter(name, parameter)
        for name, buffer in layer.named_buffers(recurse=False):
            self.register_buffer(name, buffer, persistent=name not in layer._non_persistent_buffers_set)
        self.__dict__["layer"] = layer
        self.__dict__["generated"] = generated
        #: calls served by the generated module ("generated") and by the original layer, by reason
        self.calls: collections.Counter[str] = collections.Counter()

    @classmethod
    def wrap(cls, layer: nn.Module, generated_class: type) -> "LayerAdapter":
        """``layer`` (a bare transformers decoder layer) behind ``generated_class`` (generated from a
        :class:`DecoderLayerCall` of a layer with the same settings and shapes), sharing its tensors."""
        return cls(layer, generated_class.from_module(DecoderLayerCall(layer)))

    def forward(
        self,
        hidden_states: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        past_key_values: object = None,
        use_cache: bool = False,
        cache_position: torch.Tensor | None = None,
        position_embeddings: tuple[torch.Tensor, torch.Tensor] | None = None,
        **kwargs,
    ):
        reason = self._unserved(attention_mask, past_key_values, position_embeddings, kwargs)
        if reason is None:
            from thunder_aot.runtime import NoBucketError

            try:
                out = self.__dict__["generated"](hidden_states, *position_embeddings)
            except NoBucketError:
                reason = "outside every bucket"
            else:
                self.calls["generated"] += 1
                return out
        self.calls[reason] += 1
        return self.__dict__["layer"](
            hidden_states,
            attention_mask=attention_mask,
            position_ids=position_ids,
            past_key_values=past_key_values,
            use_cache=use_cache,
            cache_position=cache_position,
            position_embeddings=position_embeddings,
            **kwargs,
        )

    @staticmethod
    def _unserved(attention_mask, past_key_values, position_embeddings, kwargs) -> str | None:
        """Why the generated module cannot serve a call (None: it can)."""
        if past_key_values is not None:
            return "a KV cache"
        if attention_mask is not None:
            return "an attention mask"
        if position_embeddings is None:
            return "no position_embeddings"
        if any(isinstance(v, torch.Tensor) for v in kwargs.values()):
            return "tensor keyword arguments"
        return None

    def extra_repr(self) -> str:
        return f"thunder-aot {type(self.__dict__['generated']).__name__} in front of {type(self.__dict__['layer']).__name__}"
