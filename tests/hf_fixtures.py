"""The transformers fixtures only the tests export: real submodules of more transformers families
(norms, MLPs, decoder layers, blocks, small causal LMs), built from small configs with random weights
as thunder_aot.examples.hf builds its own (its helpers: ``_randomize``, ``llama_config``,
``_small_config``). Tests name them as ``tests.hf_fixtures:NAME`` (the repository root is on the
import path of the tests and of their subprocesses: tests/helpers.python_env).

transformers is an optional dependency: each factory imports it inside, as in
thunder_aot.examples.hf.
"""

from __future__ import annotations

import torch
from torch import nn

from thunder_aot.examples.hf import (
    HIDDEN,
    DecoderLayer,
    _randomize,
    _small_config,
    llama_config,
    tiny_llama,
)
from thunder_aot.integrations.transformers import DecoderLayerMaskCall, DecoderStackCall


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


def llama_decoder_layer_eager_attention():
    """:func:`llama_decoder_layer` with transformers' eager attention (matmuls and a softmax)."""
    from transformers.models.llama.modeling_llama import LlamaDecoderLayer

    return _randomize(DecoderLayer(LlamaDecoderLayer(llama_config("eager"), layer_idx=0)), 17)


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


def mistral_small_causal_lm():
    """A 2-layer MistralForCausalLM (sdpa attention, sliding windows of 8 on every layer: bool mask
    layers), random weights, fp32."""
    from transformers import MistralConfig, MistralForCausalLM

    config = _small_config(MistralConfig, head_dim=64, sliding_window=8, pad_token_id=0)
    return _randomize(MistralForCausalLM(config), 34)


def mistral_small_decoder_layer_mask():
    """:func:`mistral_small_causal_lm`'s first layer with its (bool) mask as an input."""
    return DecoderLayerMaskCall(mistral_small_causal_lm().model.layers[0])


def llama_decoder_layer_mask():
    """:func:`llama_decoder_layer` with the attention mask as an input (what a CUDA-graph capture gets)."""
    from transformers.models.llama.modeling_llama import LlamaDecoderLayer

    return _randomize(DecoderLayerMaskCall(LlamaDecoderLayer(llama_config(), layer_idx=0)), 17)


def tiny_llama_stack():
    """:func:`tiny_llama`'s decoder stack (embeddings in, last-token logits out) as one module."""
    return DecoderStackCall(tiny_llama())
