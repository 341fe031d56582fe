"""Which rotary embedding each decoder layer of a transformers causal LM reads, and how to call it;
and which module is its final norm (:func:`final_norm`).

Most families have one rotary embedding for every layer: ``model.model.rotary_emb(x, positions)``.
Some (Gemma 3, OLMo 3, ModernBERT's decoder) have one per layer type, with its own base frequency:
``rotary_emb(x, positions, layer_type)``, and layer ``i`` reads the one of
``config.layer_types[i]`` (sliding-window layers a local one, full-attention layers a global one).
A layer's *rotary kind* is that layer type, or None where the model has one rotary embedding.
"""

from __future__ import annotations

import inspect

import torch
from torch import nn

#: transformers' rotary types whose cos and sin at a position do not depend on the call's other
#: positions (``dynamic`` and ``longrope`` rescale by the longest): a table of every position serves
#: every call, and a longer table's prefix a shorter call
STATIC_ROPE_TYPES = frozenset({"default", "linear", "llama3", "yarn"})


def rotary_kinds(model: nn.Module) -> list[str | None]:
    """Each decoder layer's rotary kind (the module docstring): its layer type where the model's
    rotary embedding takes one, else None for every layer."""
    layers = len(model.model.layers)
    rotary = model.model.rotary_emb
    if "layer_type" not in inspect.signature(rotary.forward).parameters:
        return [None] * layers
    kinds = list(getattr(model.config, "layer_types", None) or [])
    if len(kinds) != layers:
        raise TypeError(
            f"{type(model).__name__}: its rotary embedding takes a layer type, and the config names "
            f"{len(kinds)} layer types for {layers} layers"
        )
    return kinds


def rotary_call(rotary: nn.Module, x: torch.Tensor, positions: torch.Tensor, kind: str | None):
    """``(cos, sin)`` of ``rotary`` at ``positions`` for layers of ``kind``."""
    return rotary(x, positions) if kind is None else rotary(x, positions, kind)


def static_rope(rotary: nn.Module, kind: str | None) -> bool:
    """Whether the cos and sin ``rotary`` gives layers of ``kind`` at a position are the same in every
    call (:data:`STATIC_ROPE_TYPES`)."""
    rope_type = getattr(rotary, "rope_type", "default")
    if isinstance(rope_type, dict):  # one per layer type
        rope_type = rope_type.get(kind, "default")
    return rope_type in STATIC_ROPE_TYPES


#: the names transformers gives a decoder-only model's final norm (``norm`` in the Llama layout;
#: ``final_layernorm`` in Phi's and Persimmon's)
FINAL_NORMS = ("norm", "final_layernorm")


def final_norm_name(base: nn.Module) -> str | None:
    """The attribute name of ``base``'s final norm (``base``: a causal LM's ``model``), None where it
    has none by those names."""
    return next((n for n in FINAL_NORMS if isinstance(getattr(base, n, None), nn.Module)), None)


def final_norm(base: nn.Module) -> nn.Module | None:
    """The final norm of ``base`` (a causal LM's ``model``), None where it has none by those names."""
    name = final_norm_name(base)
    return None if name is None else getattr(base, name)
