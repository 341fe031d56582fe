"""Real submodules of transformers' LLM implementations, built from small configs (no weights are
downloaded), with random weights so that a wrong weight path cannot pass a comparison.

Each factory takes no arguments, so each is an import path for ``thunder-aot export``.
"""

from __future__ import annotations

import torch
from torch import nn

from thunder_aot.layers import DecoderLayerCacheCall, DecoderLayerCall, DecoderLayerMaskCall

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


def qwen2_rmsnorm():
    from transformers.models.qwen2.modeling_qwen2 import Qwen2RMSNorm

    return _randomize(Qwen2RMSNorm(HIDDEN, eps=1e-6), 12)


def gemma_rmsnorm():
    """Gemma's weight is offset by one, and it multiplies in fp32 before the cast."""
    from transformers.models.gemma.modeling_gemma import GemmaRMSNorm

    return _randomize(GemmaRMSNorm(HIDDEN, eps=1e-6), 13)


def gpt_oss_rmsnorm():
    from transformers.models.gpt_oss.modeling_gpt_oss import GptOssRMSNorm

    return _randomize(GptOssRMSNorm(2880, eps=1e-5), 14)


def layer_norm():
    # bf16 parameters, as in a model served in bf16 (CUDA's layer_norm refuses bf16 input with fp32 weight)
    return _randomize(nn.LayerNorm(HIDDEN), 15).to(torch.bfloat16)


def llama_mlp():
    from transformers.models.llama.modeling_llama import LlamaMLP

    return _randomize(LlamaMLP(llama_config()), 16)


class ApplyRotary(nn.Module):
    """transformers' apply_rotary_pos_emb(q, k, cos, sin) as a module."""

    def forward(self, q, k, cos, sin):
        from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

        return apply_rotary_pos_emb(q, k, cos, sin)


def apply_rotary():
    return ApplyRotary()


#: a whole decoder layer as export traces it: ``forward(hidden_states, cos, sin)``
DecoderLayer = DecoderLayerCall


def llama_decoder_layer():
    from transformers.models.llama.modeling_llama import LlamaDecoderLayer

    return _randomize(DecoderLayer(LlamaDecoderLayer(llama_config(), layer_idx=0)), 17)


def llama_decoder_layer_eager_attention():
    """:func:`llama_decoder_layer` with transformers' eager attention (matmuls and a softmax)."""
    from transformers.models.llama.modeling_llama import LlamaDecoderLayer

    return _randomize(DecoderLayer(LlamaDecoderLayer(llama_config("eager"), layer_idx=0)), 17)


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


def qwen3_decoder_layer():
    """Qwen3's layer: RMSNorms over each head of q and k (q_norm, k_norm) between the projections
    and the rotary embedding."""
    from transformers import Qwen3Config
    from transformers.models.qwen3.modeling_qwen3 import Qwen3DecoderLayer

    config = Qwen3Config(
        hidden_size=HIDDEN,
        intermediate_size=512,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=64,
        vocab_size=512,
        max_position_embeddings=256,
        rms_norm_eps=1e-6,
    )
    config._attn_implementation = "sdpa"
    return _randomize(DecoderLayer(Qwen3DecoderLayer(config, layer_idx=0)), 19)


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


def gpt_oss_small_decoder_layer():
    """GPT-OSS's decoder layer (attention sinks, grouped-mm experts, clamped SwiGLU) at test size:
    hidden 256, 4 heads of 64, 2 KV heads, 4 experts of 256, 2 per token, bf16 (grouped matmuls on
    the CPU take bf16)."""
    from transformers import GptOssConfig
    from transformers.models.gpt_oss.modeling_gpt_oss import GptOssDecoderLayer

    config = GptOssConfig(
        hidden_size=HIDDEN,
        intermediate_size=HIDDEN,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=64,
        num_local_experts=4,
        num_experts_per_tok=2,
        vocab_size=512,
        max_position_embeddings=256,
        layer_types=["full_attention", "full_attention"],
        rope_parameters={"rope_type": "default", "rope_theta": 150000.0},
    )
    config._attn_implementation = "eager"
    config._experts_implementation = "grouped_mm"
    return _randomize(DecoderLayer(GptOssDecoderLayer(config, layer_idx=1)), 24).to(torch.bfloat16)


def _moe_block(module_path: str, config_name: str, block_name: str, seed: int, **fields):
    """A sparse MoE block of a transformers family at test size (hidden 256, 8 experts, 2 per token,
    grouped-mm experts), bf16."""
    import importlib

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


def gemma_decoder_layer():
    """Gemma's layer: RMSNorm weights offset by one, a GELU-tanh gated MLP."""
    from transformers import GemmaConfig
    from transformers.models.gemma.modeling_gemma import GemmaDecoderLayer

    return _randomize(DecoderLayer(GemmaDecoderLayer(_small_config(GemmaConfig, head_dim=64), 0)), 24)


def gemma2_decoder_layer():
    """Gemma 2's layer: four norms around attention and MLP (sandwich), attention logit softcapping."""
    from transformers import Gemma2Config
    from transformers.models.gemma2.modeling_gemma2 import Gemma2DecoderLayer

    config = _small_config(Gemma2Config, head_dim=64, layer_types=["full_attention", "full_attention"])
    return _randomize(DecoderLayer(Gemma2DecoderLayer(config, 0)), 25)


def phi3_decoder_layer():
    """Phi-3's layer: one fused qkv projection and one fused gate-up projection, split in forward."""
    from transformers import Phi3Config
    from transformers.models.phi3.modeling_phi3 import Phi3DecoderLayer

    return _randomize(DecoderLayer(Phi3DecoderLayer(_small_config(Phi3Config), 0)), 26)


def qwen2_decoder_layer():
    """Qwen2's layer: biases on the q, k and v projections."""
    from transformers import Qwen2Config
    from transformers.models.qwen2.modeling_qwen2 import Qwen2DecoderLayer

    return _randomize(DecoderLayer(Qwen2DecoderLayer(_small_config(Qwen2Config), 0)), 27)


def cohere_layernorm():
    """Cohere's LayerNorm: mean-centred, variance in float32, a weight and no bias."""
    from transformers.models.cohere.modeling_cohere import CohereLayerNorm

    return _randomize(CohereLayerNorm(hidden_size=HIDDEN, eps=1e-5), 40)


def t5_layernorm():
    """T5's LayerNorm: an RMSNorm whose weight's dtype decides the output's (half weights: half out)."""
    from transformers.models.t5.modeling_t5 import T5LayerNorm

    return _randomize(T5LayerNorm(HIDDEN), 41)


def starcoder2_mlp():
    """Starcoder2's MLP: two biased projections around GELU-tanh, then dropout (eval mode: none)."""
    from transformers import Starcoder2Config
    from transformers.models.starcoder2.modeling_starcoder2 import Starcoder2MLP

    config = Starcoder2Config(
        hidden_size=HIDDEN // 2, intermediate_size=HIDDEN, hidden_act="gelu_pytorch_tanh"
    )
    return _randomize(Starcoder2MLP(config), 42)


def gpt_neox_decoder_layer():
    """GPT-NeoX's layer: one fused qkv projection, rotary over a quarter of each head (rotary_pct),
    attention and MLP in parallel from two LayerNorms. Its cos and sin are 16 wide (64 * 0.25)."""
    from transformers import GPTNeoXConfig
    from transformers.models.gpt_neox.modeling_gpt_neox import GPTNeoXLayer

    config = GPTNeoXConfig(
        hidden_size=HIDDEN,
        num_attention_heads=4,
        intermediate_size=512,
        rotary_pct=0.25,
        num_hidden_layers=2,
        vocab_size=512,
        max_position_embeddings=256,
    )
    config._attn_implementation = "sdpa"
    return _randomize(DecoderLayer(GPTNeoXLayer(config, 0)), 43)


def olmo2_decoder_layer():
    """OLMo 2's layer: RMSNorms over the whole q and k projections, norms after attention and MLP."""
    from transformers import Olmo2Config
    from transformers.models.olmo2.modeling_olmo2 import Olmo2DecoderLayer

    return _randomize(DecoderLayer(Olmo2DecoderLayer(_small_config(Olmo2Config), 0)), 44)


def granite_decoder_layer():
    """Granite's layer: residual and attention multipliers from its config."""
    from transformers import GraniteConfig
    from transformers.models.granite.modeling_granite import GraniteDecoderLayer

    config = _small_config(GraniteConfig, residual_multiplier=0.22, attention_multiplier=0.0078)
    return _randomize(DecoderLayer(GraniteDecoderLayer(config, 0)), 45)


def cohere_decoder_layer():
    """Cohere's layer: per-head LayerNorms on q and k (use_qk_norm), interleaved rotary, attention and
    MLP in parallel from one LayerNorm."""
    from transformers import CohereConfig
    from transformers.models.cohere.modeling_cohere import CohereDecoderLayer

    return _randomize(DecoderLayer(CohereDecoderLayer(_small_config(CohereConfig, use_qk_norm=True), 0)), 46)


def gemma3_decoder_layer():
    """Gemma 3's layer: RMSNorms over each head of q and k, four norms around attention and MLP."""
    from transformers import Gemma3TextConfig
    from transformers.models.gemma3.modeling_gemma3 import Gemma3DecoderLayer

    config = _small_config(Gemma3TextConfig, head_dim=64, layer_types=["full_attention", "full_attention"])
    return _randomize(DecoderLayer(Gemma3DecoderLayer(config, 0)), 47)


def phi_decoder_layer():
    """Phi's layer (Phi-2): one LayerNorm before attention and MLP in parallel, biased projections,
    rotary over half of each head (partial_rotary_factor). Its cos and sin are 32 wide."""
    from transformers import PhiConfig
    from transformers.models.phi.modeling_phi import PhiDecoderLayer

    return _randomize(
        DecoderLayer(PhiDecoderLayer(_small_config(PhiConfig, partial_rotary_factor=0.5), 0)), 48
    )


def stablelm_decoder_layer():
    """StableLM's layer: LayerNorms, per-head LayerNorms on q and k (qk_layernorm), rotary over a
    quarter of each head. Its cos and sin are 16 wide."""
    from transformers import StableLmConfig
    from transformers.models.stablelm.modeling_stablelm import StableLmDecoderLayer

    config = _small_config(StableLmConfig, partial_rotary_factor=0.25, qk_layernorm=True)
    return _randomize(DecoderLayer(StableLmDecoderLayer(config, 0)), 49)


def falcon_decoder_layer():
    """Falcon's layer as Falcon-40B and -180B build it (new_decoder_architecture): one fused qkv
    projection laid out by KV group and split with list indices, the keys and values broadcast to
    the query heads, two LayerNorms before attention and MLP in parallel. Its forward takes
    ``alibi`` (None: rotary embeddings) and its KV cache as ``layer_past``."""
    from transformers import FalconConfig
    from transformers.models.falcon.modeling_falcon import FalconDecoderLayer

    config = FalconConfig(
        hidden_size=HIDDEN,
        num_attention_heads=4,
        num_kv_heads=2,
        new_decoder_architecture=True,
        num_hidden_layers=2,
        vocab_size=512,
        max_position_embeddings=256,
        ffn_hidden_size=512,
    )
    config._attn_implementation = "sdpa"
    return _randomize(DecoderLayer(FalconDecoderLayer(config, 0)), 52)


def nemotron_decoder_layer():
    """Nemotron's layer: LayerNorm1P (weights offset by one), a squared-ReLU MLP without a gate,
    rotary over half of each head. Its cos and sin are 32 wide."""
    from transformers import NemotronConfig
    from transformers.models.nemotron.modeling_nemotron import NemotronDecoderLayer

    return _randomize(DecoderLayer(NemotronDecoderLayer(_small_config(NemotronConfig, head_dim=64), 0)), 53)


def persimmon_decoder_layer():
    """Persimmon's layer: one fused qkv projection, per-head LayerNorms on q and k, rotary over half
    of each head, a squared-ReLU MLP. Its cos and sin are 32 wide."""
    from transformers import PersimmonConfig
    from transformers.models.persimmon.modeling_persimmon import PersimmonDecoderLayer

    config = _small_config(PersimmonConfig, num_key_value_heads=4, qk_layernorm=True)
    return _randomize(DecoderLayer(PersimmonDecoderLayer(config, 0)), 54)


def glm_decoder_layer():
    """GLM's layer: one fused gate-up projection, an interleaved rotary over half of each head.
    Its cos and sin are 32 wide."""
    from transformers import GlmConfig
    from transformers.models.glm.modeling_glm import GlmDecoderLayer

    return _randomize(DecoderLayer(GlmDecoderLayer(_small_config(GlmConfig, head_dim=64), 0)), 55)


def olmo_decoder_layer():
    """OLMo's layer: LayerNorms without weights or bias (non-parametric)."""
    from transformers import OlmoConfig
    from transformers.models.olmo.modeling_olmo import OlmoDecoderLayer

    return _randomize(DecoderLayer(OlmoDecoderLayer(_small_config(OlmoConfig), 0)), 56)


def deepseek_v3_decoder_layer():
    """DeepSeek-V3's first (dense) layer: multi-head latent attention (queries and keys through
    low-rank projections with RMSNorms, an interleaved rotary over a 16-wide part of each head, the
    keys' rotary part shared by the heads). Its cos and sin are 16 wide."""
    from transformers import DeepseekV3Config
    from transformers.models.deepseek_v3.modeling_deepseek_v3 import DeepseekV3DecoderLayer

    config = _small_config(
        DeepseekV3Config,
        q_lora_rank=64,
        kv_lora_rank=32,
        qk_rope_head_dim=16,
        qk_nope_head_dim=32,
        v_head_dim=32,
        first_k_dense_replace=1,
        num_key_value_heads=4,
        rope_interleave=True,
    )
    return _randomize(DecoderLayer(DeepseekV3DecoderLayer(config, 0)), 50)


def qwen3_moe_decoder_layer():
    """Qwen3-MoE's layer: Qwen3's attention (per-head q and k norms) and a sparse MoE block (softmax
    router, top-2 of 8 experts renormalized, grouped-mm experts), bf16."""
    from transformers import Qwen3MoeConfig
    from transformers.models.qwen3_moe.modeling_qwen3_moe import Qwen3MoeDecoderLayer

    config = _small_config(
        Qwen3MoeConfig, head_dim=64, num_experts=8, num_experts_per_tok=2, moe_intermediate_size=128
    )
    config._experts_implementation = "grouped_mm"
    return _randomize(DecoderLayer(Qwen3MoeDecoderLayer(config, 0)), 51).to(torch.bfloat16)


class Block(nn.Module):
    """A transformers block called with its hidden states alone (GPT-2: no rotary inputs)."""

    def __init__(self, block: nn.Module) -> None:
        super().__init__()
        self.block = block

    def forward(self, hidden_states):
        out = self.block(hidden_states)
        return out[0] if isinstance(out, tuple) else out


def gpt2_block():
    """GPT-2's block: LayerNorms, Conv1D projections (addmm), sdpa attention, the tanh GELU."""
    from transformers import GPT2Config
    from transformers.models.gpt2.modeling_gpt2 import GPT2Block

    config = GPT2Config(n_embd=HIDDEN, n_head=4, n_layer=2, vocab_size=512, n_positions=256)
    config._attn_implementation = "sdpa"
    return _randomize(Block(GPT2Block(config, layer_idx=0)), 23)


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


def mistral_small_causal_lm():
    """A 2-layer MistralForCausalLM (sdpa attention, sliding windows of 8 on every layer: bool mask
    layers), random weights, fp32."""
    from transformers import MistralConfig, MistralForCausalLM

    config = _small_config(MistralConfig, head_dim=64, sliding_window=8, pad_token_id=0)
    return _randomize(MistralForCausalLM(config), 34)


def mistral_small_decoder_layer_mask():
    """:func:`mistral_small_causal_lm`'s first layer with its (bool) mask as an input."""
    return DecoderLayerMaskCall(mistral_small_causal_lm().model.layers[0])


def tiny_llama():
    """A 2-layer LlamaForCausalLM from a config, for the replace() example and test."""
    from transformers import LlamaForCausalLM

    return _randomize(LlamaForCausalLM(llama_config()), 18)


def llama_decoder_layer_cache():
    """:func:`llama_decoder_layer` with its KV cache as inputs and outputs (prefill and decode)."""
    from transformers.models.llama.modeling_llama import LlamaDecoderLayer

    return _randomize(DecoderLayerCacheCall(LlamaDecoderLayer(llama_config(), layer_idx=0)), 17)


def llama_decoder_layer_mask():
    """:func:`llama_decoder_layer` with the attention mask as an input (what a CUDA-graph capture gets)."""
    from transformers.models.llama.modeling_llama import LlamaDecoderLayer

    return _randomize(DecoderLayerMaskCall(LlamaDecoderLayer(llama_config(), layer_idx=0)), 17)


def tiny_llama_stack():
    """:func:`tiny_llama`'s decoder stack (embeddings in, last-token logits out) as one module."""
    from thunder_aot.layers import DecoderStackCall

    return DecoderStackCall(tiny_llama())


def llama_1b_stack():
    """:func:`llama_1b_causal_lm`'s decoder stack as one module (on the CPU: what export traces)."""
    from thunder_aot.layers import DecoderStackCall

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
