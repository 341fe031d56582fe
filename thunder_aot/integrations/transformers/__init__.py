"""thunder-aot and transformers' decoder models.

:mod:`.export_wrappers` holds the modules ``thunder-aot export`` traces for whole decoder layers and
decoder stacks (:class:`DecoderLayerCall`, :class:`DecoderLayerMaskCall`,
:class:`DecoderLayerCacheCall`, :class:`DecoderLayerStaticCacheCall`, :class:`DecoderStackCall`);
:mod:`.adapters` the run-time side, which puts the modules generated from them into a model
(:class:`LayerAdapter`, :class:`LayerStack`, :class:`StackAdapter`), with :mod:`.cache_slots` for
calls with a KV cache; :mod:`.decode` greedy decoding over a static KV cache, a CUDA graph a step
(:class:`StaticDecoder`); :mod:`.attention` what they read of a model's attention (its kind, each
layer's sliding window, the causal masks). This package re-exports their public names. Importing it
does not import transformers (an optional dependency: the ``hf`` extra).
"""

from __future__ import annotations

from thunder_aot.integrations.transformers.adapters import (
    LastTokenLogits,
    LayerAdapter,
    LayerStack,
    StackAdapter,
    contiguous_rotary,
)
from thunder_aot.integrations.transformers.attention import (
    attention_implementation,
    causal_mask,
    layer_windows,
    mask_dtype,
    needs_mask,
    slot_mask,
)
from thunder_aot.integrations.transformers.decode import StaticDecoder, judge_steps
from thunder_aot.integrations.transformers.export_wrappers import (
    LAYER_CALLS,
    DecoderLayerCacheCall,
    DecoderLayerCall,
    DecoderLayerMaskCall,
    DecoderLayerStaticCacheCall,
    DecoderStackCall,
    LayerKeywords,
    StaticStepCache,
    StepCache,
    prefill_call,
)
from thunder_aot.integrations.transformers.rotary import STATIC_ROPE_TYPES, rotary_kinds

__all__ = [
    "LAYER_CALLS",
    "STATIC_ROPE_TYPES",
    "rotary_kinds",
    "DecoderLayerCacheCall",
    "DecoderLayerCall",
    "DecoderLayerMaskCall",
    "DecoderLayerStaticCacheCall",
    "DecoderStackCall",
    "LastTokenLogits",
    "LayerAdapter",
    "LayerKeywords",
    "LayerStack",
    "StackAdapter",
    "StaticDecoder",
    "StaticStepCache",
    "StepCache",
    "attention_implementation",
    "causal_mask",
    "contiguous_rotary",
    "judge_steps",
    "layer_windows",
    "mask_dtype",
    "needs_mask",
    "prefill_call",
    "slot_mask",
]
