"""The bundled exports that generated/ holds: one place for tests, the Makefile and the README."""

from __future__ import annotations

from thunder_aot.examples.gpt_oss import SEED_SHAPES

#: (file stem, import path, shapes)
EXPORTS = [
    ("rmsnorm", "thunder_aot.examples.gpt_oss:rmsnorm", SEED_SHAPES),
    ("gated_mlp", "thunder_aot.examples.blocks:gated_mlp", "[1..512]x256:fp32"),
    (
        "residual_rmsnorm",
        "thunder_aot.examples.blocks:residual_rmsnorm",
        "1x[S=1..2048]x2880:bf16, 1x[S]x2880:bf16",
    ),
    ("layer_norm", "thunder_aot.examples.blocks:layer_norm", "[1..2048]x1024:bf16"),
    (
        "softmax",
        "thunder_aot.examples.blocks:scaled_masked_softmax",
        "1x8x[S=1..512]x[S]:bf16, 1x1x[S]x[S]:fp32",
    ),
    ("gelu_gate", "thunder_aot.examples.blocks:gelu_gate", "[1..2048]x2048:bf16"),
    (
        "rotary",
        "thunder_aot.examples.blocks:rotary_embedding",
        "1x8x[S=1..2048]x64:bf16, 1x1x[S]x64:bf16, 1x1x[S]x64:bf16",
    ),
    ("vocab_softmax", "thunder_aot.examples.blocks:vocab_softmax", "[1..64]x32000:bf16"),
    ("wide_rmsnorm", "thunder_aot.examples.blocks:wide_rmsnorm", "1x[1..128]x16384:bf16"),
]
BACKENDS = ["nvfuser", "torch", "triton"]

#: modules whose every op must land in a fusion region (the coverage the fusion tests hold them to),
#: with shapes
FULLY_FUSED = [
    ("thunder_aot.examples.gpt_oss:rmsnorm", "1x[1..64]x2880:bf16"),
    ("thunder_aot.examples.blocks:layer_norm", "[1..64]x1024:bf16"),
    ("thunder_aot.examples.blocks:scaled_masked_softmax", "1x8x[S=2..128]x[S]:bf16, 1x1x[S]x[S]:fp32"),
    ("thunder_aot.examples.blocks:gelu_gate", "[1..64]x1024:bf16"),
    (
        "thunder_aot.examples.blocks:rotary_embedding",
        "1x8x[S=1..128]x64:bf16, 1x1x[S]x64:bf16, 1x1x[S]x64:bf16",
    ),
    ("thunder_aot.examples.blocks:residual_rmsnorm", "1x[S=1..64]x2880:bf16, 1x[S]x2880:bf16"),
]

#: what stays torch calls in a decoder layer with sdpa attention: projections, attention, views
_LAYER_CALLS = {
    "torch.nn.functional.linear",
    "torch.nn.functional.scaled_dot_product_attention",
    "torch.Tensor.view",
    "torch.transpose",
    "torch.reshape",
    "torch.Tensor.contiguous",
}
#: the tiny Llama's layer with its KV cache as tensors: a prefill bucket and a decode-step bucket
LLAMA_CACHE_SHAPES = (
    "1x[S=2..64]x256, 1x[S]x64, 1x[S]x64, 1x2x0x64, 1x2x0x64; "
    "1x1x256, 1x1x64, 1x1x64, 1x2x[P=1..255]x64, 1x2x[P]x64"
)
#: the MoE routing's torch calls where the backend has no routing program (nvFuser)
_ROUTING_CALLS = (
    "torch.topk",
    "torch.sort",
    "torch.histc",
    "torch.cumsum",
    "torch.empty",
    "torch.index_put",
    "torch.Tensor.__getitem__",
)
#: real submodules of transformers models: (import path, shapes, torch calls that may stay unfused).
#: Llama's layer, its KV-cache layer and GPT-OSS's take S=1, where transformers' sdpa call turns
#: is_causal off and export splits the bucket there; the other families start at S=2: the split is
#: the same transformers code in every family, and it cost each layer four of its nine traces
HF_SUBMODULES = [
    ("thunder_aot.examples.hf:llama_rmsnorm", "1x[1..64]x256:bf16", set()),
    ("tests.hf_fixtures:qwen2_rmsnorm", "1x[1..64]x256:bf16", set()),
    ("tests.hf_fixtures:gemma_rmsnorm", "1x[1..64]x256:bf16", set()),
    ("tests.hf_fixtures:gpt_oss_rmsnorm", "1x[1..64]x2880:bf16", set()),
    ("tests.hf_fixtures:layer_norm", "1x[1..64]x256:bf16", set()),
    ("tests.hf_fixtures:llama_mlp", "1x[1..64]x256", {"torch.nn.functional.linear"}),
    (
        "tests.hf_fixtures:apply_rotary",
        "1x4x[S=1..64]x64:bf16, 1x2x[S]x64:bf16, 1x[S]x64:bf16, 1x[S]x64:bf16",
        set(),
    ),
    (
        "thunder_aot.examples.hf:llama_decoder_layer",
        "1x[S=1..64]x256, 1x[S]x64, 1x[S]x64",
        {
            "torch.nn.functional.linear",
            "torch.nn.functional.scaled_dot_product_attention",
            "torch.Tensor.view",
            "torch.transpose",
            "torch.reshape",
            "torch.Tensor.contiguous",
        },
    ),
    (
        "tests.hf_fixtures:llama_decoder_layer_eager_attention",
        "1x[S=2..64]x256, 1x[S]x64, 1x[S]x64",
        {
            "torch.nn.functional.linear",
            "torch.matmul",
            "torch.Tensor.view",
            "torch.transpose",
            "torch.reshape",
            "torch.Tensor.contiguous",
            "torch.permute",
        },  # (passes.transposed_outputs_as_views: the key's transpose read as a view by the matmul)
    ),
    *[
        (f"tests.hf_fixtures:{name}", "1x[S=2..64]x256, 1x[S]x64, 1x[S]x64", _LAYER_CALLS)
        for name in (
            "gemma_decoder_layer",
            "gemma2_decoder_layer",
            "phi3_decoder_layer",
            "qwen2_decoder_layer",
        )
    ],
    (  # prefill (an empty past) and decode steps (one token, any past): keys and values come back longer
        "thunder_aot.examples.hf:llama_decoder_layer_cache",
        LLAMA_CACHE_SHAPES,
        _LAYER_CALLS,
    ),
    (  # the MoE's routing (topk, sort, histc, cumsum, gathers, index_put) stays torch calls; its in-place
        # ops' write-backs (copy_) into fresh tensors are dropped (passes.drop_unobserved_write_backs)
        "tests.hf_fixtures:gpt_oss_small_decoder_layer",
        "1x[S=1..32]x256:bf16, 1x[S]x32:bf16, 1x[S]x32:bf16",
        {
            "torch.nn.functional.linear",
            "torch.matmul",
            "torch._grouped_mm",
            "torch.topk",
            "torch.sort",
            "torch.histc",
            "torch.cumsum",
            "torch.empty",
            "torch.index_put",
            "torch.Tensor.__getitem__",
            "torch.Tensor.to",
            "torch.Tensor.contiguous",
            "torch.reshape",
            "torch.transpose",
            "torch.Tensor.view",
            "torch.permute",
        },
    ),
    (
        "tests.hf_fixtures:gpt2_block",
        "1x[S=2..64]x256",
        {
            "torch.addmm",
            "torch.nn.functional.scaled_dot_product_attention",
            "torch.Tensor.view",
            "torch.transpose",
            "torch.reshape",
            "torch.split",
            "torch.Tensor.contiguous",
        },
    ),
    (
        "tests.hf_fixtures:qwen3_decoder_layer",
        "1x[S=2..64]x256, 1x[S]x64, 1x[S]x64",
        {
            "torch.nn.functional.linear",
            "torch.nn.functional.scaled_dot_product_attention",
            "torch.Tensor.view",
            "torch.transpose",
            "torch.reshape",
            "torch.Tensor.contiguous",
        },
    ),
    # more families: Cohere's and T5's norms, Starcoder2's MLP (its eval-mode dropout leaves no call:
    # passes.drop_identity_calls), and layers with a partial rotary (GPT-NeoX), whole-projection q/k norms
    # (OLMo 2), config multipliers (Granite), per-head LayerNorms and interleaved rotary (Cohere)
    ("tests.hf_fixtures:cohere_layernorm", "1x[1..64]x256:bf16", set()),
    ("tests.hf_fixtures:t5_layernorm", "1x[1..64]x256:bf16", set()),
    ("tests.hf_fixtures:starcoder2_mlp", "1x[1..64]x128", {"torch.nn.functional.linear"}),
    ("tests.hf_fixtures:gpt_neox_decoder_layer", "1x[S=2..64]x256, 1x[S]x16, 1x[S]x16", _LAYER_CALLS),
    *[
        (
            f"tests.hf_fixtures:{name}",
            "1x[S=2..64]x256, 1x[S]x64, 1x[S]x64",
            _LAYER_CALLS | {"torch.narrow"},
        )
        for name in ("olmo2_decoder_layer", "granite_decoder_layer", "cohere_decoder_layer")
    ],
    # per-head q/k norms and sandwich norms (Gemma 3), partial rotary with LayerNorms (Phi, StableLM),
    # a MoE layer (Qwen3-MoE: its routing in kernels), multi-head latent attention (DeepSeek-V3: its
    # keys are filled into an empty tensor by two copy_ calls, which stay torch calls)
    (
        "tests.hf_fixtures:gemma3_decoder_layer",
        "1x[S=2..64]x256, 1x[S]x64, 1x[S]x64",
        _LAYER_CALLS | {"torch.narrow"},
    ),
    ("tests.hf_fixtures:phi_decoder_layer", "1x[S=2..64]x256, 1x[S]x32, 1x[S]x32", _LAYER_CALLS),
    ("tests.hf_fixtures:stablelm_decoder_layer", "1x[S=2..64]x256, 1x[S]x16, 1x[S]x16", _LAYER_CALLS),
    (
        "tests.hf_fixtures:qwen3_moe_decoder_layer",
        "1x[S=2..32]x256:bf16, 1x[S]x64:bf16, 1x[S]x64:bf16",
        _LAYER_CALLS | {"torch._grouped_mm", *_ROUTING_CALLS},
    ),
    (
        "tests.hf_fixtures:deepseek_v3_decoder_layer",
        "1x[S=2..64]x256, 1x[S]x16, 1x[S]x16",
        _LAYER_CALLS
        | {
            "torch.split",
            "torch.Tensor.expand",
            "torch.Tensor.new_empty",
            "torch.Tensor.__getitem__",
            "torch.Tensor.copy_",
        },
    ),
    # Falcon's linear layers multiply by the weight's transpose (input @ weight.T: a view, no copy of
    # the weight: passes.transposed_outputs_as_views) and its fused projection is split by basic and
    # one-position list
    # indices (kernels load them: passes.move_slices_into_kernels; nvFuser leaves them to torch)
    (
        "tests.hf_fixtures:falcon_decoder_layer",
        "1x[S=2..64]x256, 1x[S]x64, 1x[S]x64",
        {
            "torch.matmul",
            "torch.nn.functional.scaled_dot_product_attention",
            "torch.Tensor.view",
            "torch.permute",
            "torch.reshape",
            "torch.Tensor.__getitem__",
        },
    ),
]
#: what issue 17 lets stay torch calls in a Triton module of a transformers submodule: matmuls,
#: attention, embeddings and shape-only views (a Triton export's calls are held to it, the nvFuser
#: export's to each entry's own set: the routing and DeepSeek-V3's key fill stay torch calls there)
TRITON_CALLS = frozenset(
    {
        "torch.nn.functional.linear",
        "torch.matmul",
        "torch._grouped_mm",
        "torch.addmm",
        "torch.nn.functional.scaled_dot_product_attention",
        "torch.nn.functional.embedding",
        "torch.Tensor.view",
        "torch.reshape",
        "torch.transpose",
        "torch.Tensor.contiguous",
        "torch.split",
        "torch.narrow",
        "torch.permute",
        "torch.Tensor.expand",
        "torch.unsqueeze",
        "torch.squeeze",
    }
)
#: more families, held to TRITON_CALLS by the Triton coverage test only (no 20-seed export each: CI's
#: time): Nemotron (LayerNorm1P, squared ReLU), Persimmon (fused qkv, per-head LayerNorms), GLM
#: (interleaved partial rotary, fused gate-up) and OLMo (non-parametric LayerNorms)
TRITON_ONLY_SUBMODULES = [
    (f"tests.hf_fixtures:{name}", f"1x[S=2..64]x256, 1x[S]x{width}, 1x[S]x{width}", TRITON_CALLS)
    for name, width in (
        ("nemotron_decoder_layer", 32),
        ("persimmon_decoder_layer", 32),
        ("glm_decoder_layer", 32),
        ("olmo_decoder_layer", 64),
    )
]
