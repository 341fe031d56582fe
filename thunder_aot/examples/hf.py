"""Real submodules of transformers' LLM implementations, built from small configs (no weights are
downloaded), with random weights so that a wrong weight path cannot pass a comparison.

Each factory takes no arguments, so each is an import path for ``thunder-aot export``. These are the
factories the README, docs/, bench/results/ and the benchmark suites name (and the helpers they are
built with); the other transformers families the tests export are in tests/hf_fixtures.py.

transformers is an optional dependency (the ``hf`` extra): each factory imports it inside, so that
importing this module does not.
"""

from __future__ import annotations

import importlib

import torch
from torch import nn

from thunder_aot.integrations.transformers import (
    DecoderLayerCacheCall,
    DecoderLayerCall,
    DecoderLayerMaskCall,
    DecoderLayerStaticCacheCall,
    DecoderStackCall,
)

HIDDEN = 256


def _randomize(module: nn.Module, seed: int) -> nn.Module:
    # drawn where each parameter lives: a model built on the GPU (the 1B-shaped causal LMs) takes
    # milliseconds, where a CPU draw and copy of its billion weights took most of a cold start
    generators: dict[torch.device, torch.Generator] = {}
    with torch.no_grad():
        for p in module.parameters():
            if p.device not in generators:
                generators[p.device] = torch.Generator(device=p.device).manual_seed(seed)
            noise = torch.randn(p.shape, generator=generators[p.device], device=p.device)
            if p.ndim == 1:  # norm weights around 1 (around 0 for Gemma's offset-by-one weight)
                p.copy_(noise * 0.1 + p.mean().round().item())
            else:
                p.copy_(noise * p.shape[-1] ** -0.5)
    return module.eval().requires_grad_(False)


def llama_config(attn_implementation: str = "sdpa", **overrides):
    from transformers import LlamaConfig

    fields = dict(
        hidden_size=HIDDEN,
        intermediate_size=512,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=512,
        max_position_embeddings=256,
        rms_norm_eps=1e-6,
    )
    fields.update(overrides)
    config = LlamaConfig(**fields)
    # transformers' default attention: F.scaled_dot_product_attention with enable_gqa=True, which
    # export takes whole (thunder_aot.frontend.torch_ops); attn_implementation="eager" for the matmuls
    config._attn_implementation = attn_implementation
    return config


def llama_rmsnorm():
    from transformers.models.llama.modeling_llama import LlamaRMSNorm

    return _randomize(LlamaRMSNorm(HIDDEN, eps=1e-6), 11)


#: a whole decoder layer as export traces it: ``forward(hidden_states, cos, sin)``
DecoderLayer = DecoderLayerCall


def llama_decoder_layer():
    from transformers.models.llama.modeling_llama import LlamaDecoderLayer

    return _randomize(DecoderLayer(LlamaDecoderLayer(llama_config(), layer_idx=0)), 17)


def llama_1b_decoder_layer():
    """One decoder layer shaped as Llama-3.2-1B's (hidden 2048, 32 heads of 64, 8 KV heads,
    intermediate 8192), in bf16, for benchmarks."""
    from transformers.models.llama.modeling_llama import LlamaDecoderLayer

    config = llama_config(
        hidden_size=2048,
        intermediate_size=8192,
        num_attention_heads=32,
        num_key_value_heads=8,
        head_dim=64,
        rms_norm_eps=1e-5,
    )
    return _randomize(DecoderLayer(LlamaDecoderLayer(config, layer_idx=0)), 20).to(torch.bfloat16)


def llama_1b_decoder_layer_eager_attention():
    """:func:`llama_1b_decoder_layer` with transformers' eager attention (matmuls and a softmax)."""
    from transformers.models.llama.modeling_llama import LlamaDecoderLayer

    config = llama_config(
        "eager",
        hidden_size=2048,
        intermediate_size=8192,
        num_attention_heads=32,
        num_key_value_heads=8,
        head_dim=64,
        rms_norm_eps=1e-5,
    )
    return _randomize(DecoderLayer(LlamaDecoderLayer(config, layer_idx=0)), 20).to(torch.bfloat16)


def qwen3_2b_decoder_layer():
    """One decoder layer shaped as Qwen3-1.7B's (hidden 2048, 16 heads of 128, 8 KV heads,
    intermediate 6144), in bf16, for benchmarks."""
    from transformers import Qwen3Config
    from transformers.models.qwen3.modeling_qwen3 import Qwen3DecoderLayer

    config = Qwen3Config(
        hidden_size=2048,
        intermediate_size=6144,
        num_hidden_layers=2,
        num_attention_heads=16,
        num_key_value_heads=8,
        head_dim=128,
        vocab_size=512,
        max_position_embeddings=4096,
        rms_norm_eps=1e-6,
    )
    config._attn_implementation = "sdpa"
    return _randomize(DecoderLayer(Qwen3DecoderLayer(config, layer_idx=0)), 21).to(torch.bfloat16)


def gpt_oss_decoder_layer():
    """One full-attention decoder layer shaped as GPT-OSS-20B's attention (hidden 2880, 64 heads of
    64, 8 KV heads, attention sinks) with a small mixture of experts (8 experts of 2880, 2 per
    token: the model has 32 and 4), in bf16, for benchmarks."""
    from transformers import GptOssConfig
    from transformers.models.gpt_oss.modeling_gpt_oss import GptOssDecoderLayer

    config = GptOssConfig(
        hidden_size=2880,
        intermediate_size=2880,
        num_hidden_layers=2,
        num_attention_heads=64,
        num_key_value_heads=8,
        head_dim=64,
        num_local_experts=8,
        num_experts_per_tok=2,
        vocab_size=512,
        max_position_embeddings=4096,
        layer_types=["full_attention", "full_attention"],
        rope_parameters={"rope_type": "default", "rope_theta": 150000.0},
    )
    config._attn_implementation = "eager"  # attention sinks: transformers' sdpa path does not take them
    # the experts as one grouped matmul per projection over tokens sorted by expert (what a server
    # runs; static shapes): transformers' default loop over the experts hit is data-dependent
    config._experts_implementation = "grouped_mm"
    return _randomize(DecoderLayer(GptOssDecoderLayer(config, layer_idx=1)), 22).to(torch.bfloat16)


def gpt_oss_decoder_layer_mask():
    """:func:`gpt_oss_causal_lm`'s first layer (hidden 2880, 64 heads of 64, 8 KV heads, attention
    sinks, a sliding window of 128, 8 experts of 2880, 2 per token, bf16) with its additive mask as an
    input: the layer as the model runs it (causal), for benchmarks."""
    from transformers.models.gpt_oss.modeling_gpt_oss import GptOssDecoderLayer

    layer = GptOssDecoderLayer(_gpt_oss_config(**GPT_OSS_BENCH_SIZES), layer_idx=0)
    return _randomize(DecoderLayerMaskCall(layer), 33).to(torch.bfloat16)


def _moe_block(module_path: str, config_name: str, block_name: str, seed: int, **fields):
    """A sparse MoE block of a transformers family at test size (hidden 256, 8 experts, 2 per token,
    grouped-mm experts), bf16."""
    # transformers is an optional dependency (the hf extra), imported by the factory that needs it
    import transformers

    config = getattr(transformers, config_name)(hidden_size=HIDDEN, num_experts_per_tok=2, **fields)
    config._experts_implementation = "grouped_mm"
    block = getattr(importlib.import_module(f"transformers.models.{module_path}"), block_name)(config)
    return _randomize(block, seed).to(torch.bfloat16)


def qwen3_moe_block():
    """Qwen3-MoE's sparse block (softmax router, top-k renormalized, 8 experts of 128)."""
    return _moe_block(
        "qwen3_moe.modeling_qwen3_moe",
        "Qwen3MoeConfig",
        "Qwen3MoeSparseMoeBlock",
        41,
        moe_intermediate_size=128,
        num_experts=8,
        norm_topk_prob=True,
    )


def mixtral_moe_block():
    """Mixtral's sparse block (8 experts of 128)."""
    return _moe_block(
        "mixtral.modeling_mixtral",
        "MixtralConfig",
        "MixtralSparseMoeBlock",
        42,
        intermediate_size=128,
        num_local_experts=8,
    )


def qwen2_moe_block():
    """Qwen2-MoE's sparse block (8 routed experts of 128 and a gated shared expert)."""
    return _moe_block(
        "qwen2_moe.modeling_qwen2_moe",
        "Qwen2MoeConfig",
        "Qwen2MoeSparseMoeBlock",
        43,
        moe_intermediate_size=128,
        shared_expert_intermediate_size=256,
        num_experts=8,
    )


def olmoe_block():
    """OLMoE's sparse block (8 experts of 128)."""
    return _moe_block(
        "olmoe.modeling_olmoe", "OlmoeConfig", "OlmoeSparseMoeBlock", 44, intermediate_size=128, num_experts=8
    )


def _small_config(config_class, **overrides):
    """A small config of another transformers family (the Llama examples' sizes), sdpa attention."""
    fields = dict(
        hidden_size=HIDDEN,
        intermediate_size=512,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=512,
        max_position_embeddings=256,
    )
    fields.update(overrides)
    config = config_class(**fields)
    config._attn_implementation = "sdpa"
    return config


def llama_1b_causal_lm():
    """A LlamaForCausalLM shaped as Llama-3.2-1B (16 layers of :func:`llama_1b_decoder_layer`'s
    shape, vocabulary 128256, tied embeddings), random weights, bf16: the model benchmark's."""
    from transformers import LlamaForCausalLM

    config = llama_config(
        hidden_size=2048,
        intermediate_size=8192,
        num_hidden_layers=16,
        num_attention_heads=32,
        num_key_value_heads=8,
        head_dim=64,
        rms_norm_eps=1e-5,
        vocab_size=128256,
        max_position_embeddings=4096,
        tie_word_embeddings=True,
    )
    with torch.device("cuda" if torch.cuda.is_available() else "cpu"):
        model = LlamaForCausalLM(config)
    return _randomize(model, 30).to(torch.bfloat16)


def tiny_llama():
    """A 2-layer LlamaForCausalLM from a config, for the replace() example and test."""
    from transformers import LlamaForCausalLM

    return _randomize(LlamaForCausalLM(llama_config()), 18)


def llama_decoder_layer_cache():
    """:func:`llama_decoder_layer` with its KV cache as inputs and outputs (prefill and decode)."""
    from transformers.models.llama.modeling_llama import LlamaDecoderLayer

    return _randomize(DecoderLayerCacheCall(LlamaDecoderLayer(llama_config(), layer_idx=0)), 17)


def llama_decoder_layer_static():
    """:func:`llama_decoder_layer` over a static KV cache (what :class:`StaticDecoder` runs)."""
    from transformers.models.llama.modeling_llama import LlamaDecoderLayer

    return _randomize(DecoderLayerStaticCacheCall(LlamaDecoderLayer(llama_config(), layer_idx=0)), 17)


def static_cache_shapes(
    hidden: int,
    kv_heads: int,
    head_dim: int,
    dtype: str,
    batch: int = 4,
    prefill: int = 32,
    max_len: int = 64,
    mask: str | None = None,
    rope_dim: int | None = None,
) -> str:
    """Buckets of a layer exported as DecoderLayerStaticCacheCall: the decode step (one token) and a
    prefill of 2..``prefill`` tokens, for 1..``batch`` sequences and caches of ``max_len`` slots or more
    (the start slot ranges keep every write inside the smallest). A range of one size is written as
    that size. The mask is additive in ``dtype`` unless ``mask`` names another dtype: sdpa adds an
    additive mask as it is, and converts a bool one in every layer of every step. ``rope_dim``: the
    width of the rotary cos and sin the model's rotary embedding gives (default ``head_dim``; half of
    it for GPT-OSS, whose rotary multiplies each half of a head by them:
    ``thunder_aot.integrations.transformers.decode.rope_width``)."""
    if batch < 1 or prefill < 2 or max_len < prefill:
        raise ValueError(
            f"expected batch >= 1, prefill >= 2 and max_len >= prefill, got {batch}, {prefill}, {max_len}"
        )
    mask = mask or dtype
    b_first, b = (f"[B=1..{batch}]", "[B]") if batch > 1 else ("1", "1")
    s_first, s = (f"[S=2..{prefill}]", "[S]") if prefill > 2 else ("2", "2")
    cache = (
        f"{b}x{kv_heads}x[L={max_len}..{4 * max_len}]x{head_dim}:{dtype}, "
        f"{b}x{kv_heads}x[L]x{head_dim}:{dtype}"
    )
    rope = f"{rope_dim or head_dim}:{dtype}"
    decode = (
        f"{b_first}x1x{hidden}:{dtype}, {b}x1x{rope}, {b}x1x{rope}, {cache}, "
        f"1:int64[0..{max_len - 1}], {b}x1x1x[L]:{mask}"
    )
    fill = (
        f"{b_first}x{s_first}x{hidden}:{dtype}, {b}x{s}x{rope}, {b}x{s}x{rope}, {cache}, "
        f"1:int64[0..{max_len - prefill}], {b}x1x{s}x[L]:{mask}"
    )
    return f"{decode}; {fill}"


def llama_1b_stack():
    """:func:`llama_1b_causal_lm`'s decoder stack as one module (on the CPU: what export traces)."""
    return DecoderStackCall(llama_1b_causal_lm().cpu())


def _gpt_oss_config(**fields):
    """GPT-OSS-20B's settings (yarn rotary, sliding-window layers between full ones, attention sinks,
    biased projections, eager attention, grouped-mm experts) with the sizes given."""
    from transformers import GptOssConfig

    config = GptOssConfig(**fields)
    config._attn_implementation = "eager"  # attention sinks: transformers' sdpa path does not take them
    config._experts_implementation = "grouped_mm"
    return config


#: the GPT-OSS-20B-shaped benchmark model's sizes (its own but 4 layers of 8 experts, 2 per token)
GPT_OSS_BENCH_SIZES = dict(num_hidden_layers=4, num_local_experts=8, num_experts_per_tok=2)


def _gpt_oss_causal_lm(seed: int, **fields):
    """A GptOssForCausalLM of :func:`_gpt_oss_config`, random weights, bf16."""
    from transformers import GptOssForCausalLM

    config = _gpt_oss_config(**fields)
    with torch.device("cuda" if torch.cuda.is_available() else "cpu"):
        model = GptOssForCausalLM(config)
    return _randomize(model, seed).to(torch.bfloat16)


def gpt_oss_causal_lm():
    """A GPT-OSS-20B-shaped causal LM for the model benchmark: hidden 2880, 64 heads of 64, 8 KV
    heads, its vocabulary (201088) and rotary, sliding windows of 128 on every other layer, but 4
    layers of 8 experts (2 per token; the model has 24 layers of 32 experts, 4 per token)."""
    return _gpt_oss_causal_lm(31, **GPT_OSS_BENCH_SIZES)


def gpt_oss_small_causal_lm():
    """GPT-OSS's causal LM at test size (hidden 256, 4 heads of 64, 2 KV heads, 4 experts of 256,
    2 per token, 4 layers, vocabulary 512) with sliding windows of 8, so that short prompts already
    differ between the sliding and the full layers."""
    return _gpt_oss_causal_lm(
        32,
        hidden_size=HIDDEN,
        intermediate_size=HIDDEN,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=64,
        num_local_experts=4,
        num_experts_per_tok=2,
        vocab_size=512,
        sliding_window=8,
    )


def gpt_oss_small_decoder_layer_mask():
    """:func:`gpt_oss_small_causal_lm`'s first (sliding-window) layer with its attention mask as an
    input (eager attention: an additive bf16 mask); one export serves the model's full layers too."""
    return DecoderLayerMaskCall(gpt_oss_small_causal_lm().cpu().model.layers[0])
