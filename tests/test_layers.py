"""thunder_aot.integrations.transformers without tracing: the masks a layer stack builds and how a
model's config picks the layer call a prefill exports."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("transformers")


@pytest.mark.parametrize("attention", ["sdpa", "eager"])
@pytest.mark.parametrize("length", [1, 7, 8, 9, 30])
def test_causal_masks_are_transformers_own(attention, length):
    """causal_mask gives, for a batch without padding, exactly the masks transformers builds for
    full and sliding-window layers: bool for sdpa, additive in the model's dtype for eager."""
    from transformers import Qwen2Config, masking_utils

    from thunder_aot.examples.hf import _small_config
    from thunder_aot.integrations.transformers import causal_mask

    config = _small_config(Qwen2Config, sliding_window=8, use_sliding_window=True, max_window_layers=1)
    config._attn_implementation = attention
    embeds = torch.randn(2, length, config.hidden_size, dtype=torch.bfloat16)
    kwargs = dict(
        config=config,
        inputs_embeds=embeds,
        attention_mask=None,
        past_key_values=None,
        position_ids=torch.arange(length).unsqueeze(0),
    )
    dtype = torch.bool if attention == "sdpa" else torch.bfloat16
    for make, window in (
        (masking_utils.create_causal_mask, None),
        (masking_utils.create_sliding_window_causal_mask, 8),
    ):
        want = make(**kwargs)
        if want is None:  # sdpa's causal flag serves it: the materialized mask is the causal one
            want = torch.ones(length, length, dtype=torch.bool).tril().expand(2, 1, length, length)
        got = causal_mask(2, length, dtype, "cpu", window)
        assert got.dtype == want.dtype and torch.equal(got, want), (make.__name__, length)
        assert got.is_contiguous()


def test_a_models_layers_need_their_mask_for_eager_attention_and_sliding_windows():
    from transformers import GptOssConfig, LlamaConfig, MistralConfig

    from thunder_aot.examples.hf import llama_config
    from thunder_aot.integrations.transformers import (
        DecoderLayerCall,
        DecoderLayerMaskCall,
        layer_windows,
        needs_mask,
        prefill_call,
    )

    assert prefill_call(llama_config()) is DecoderLayerCall
    assert prefill_call(llama_config("eager")) is DecoderLayerMaskCall
    gpt_oss = GptOssConfig(num_hidden_layers=4, sliding_window=16)
    gpt_oss._attn_implementation = "sdpa"
    assert layer_windows(gpt_oss) == [16, None, 16, None] and needs_mask(gpt_oss)
    mistral = MistralConfig(num_hidden_layers=2, sliding_window=64)
    mistral._attn_implementation = "sdpa"
    assert layer_windows(mistral) == [64, 64] and needs_mask(mistral)
    plain = LlamaConfig(num_hidden_layers=3)
    plain._attn_implementation = "sdpa"
    assert layer_windows(plain) == [None] * 3 and not needs_mask(plain)
    odd = LlamaConfig(num_hidden_layers=2)
    odd.layer_types = ["full_attention", "chunked_attention"]
    with pytest.raises(
        TypeError, match="layer types chunked_attention: expected full_attention and sliding_attention"
    ):
        layer_windows(odd)


def test_strided_rotary_tables_reach_the_kernels_contiguous_once_per_pair():
    """GPT-OSS's rotary embedding returns strided cos and sin (the generated kernels refused them on
    the GPU machine at b3b7b31): they are made contiguous once for all the
    layers of a forward, and again after an in-place update."""
    from thunder_aot.integrations.transformers import contiguous_rotary

    generator = torch.Generator().manual_seed(5)
    cos, sin = (torch.randn(1, 32, 7, generator=generator).transpose(1, 2) for _ in range(2))
    assert not cos.is_contiguous()
    first = contiguous_rotary((cos, sin))
    assert all(t.is_contiguous() for t in first)
    torch.testing.assert_close(first[0], cos, rtol=0, atol=0)
    torch.testing.assert_close(first[1], sin, rtol=0, atol=0)
    again = contiguous_rotary((cos, sin))
    assert again[0] is first[0] and again[1] is first[1], "the next layer of the forward reuses the copies"
    cos.mul_(2.0)
    updated = contiguous_rotary((cos, sin))
    torch.testing.assert_close(updated[0], cos, rtol=0, atol=0)
    plain = (torch.randn(1, 7, 32), torch.randn(1, 7, 32))
    assert contiguous_rotary(plain) is plain


def test_a_falcon_layer_gets_alibi_none_and_its_cache_as_layer_past():
    """Falcon's layer takes a required ``alibi`` (None: rotary embeddings) and its KV cache as
    ``layer_past``: the layer calls pass both (a Llama layer needs neither), so the cache call
    appends the step's keys and values; an adapter refuses a cache under any keyword, and serves
    calls whose other keywords are flags."""
    from tests.hf_fixtures import falcon_decoder_layer
    from thunder_aot.examples.hf import llama_decoder_layer
    from thunder_aot.integrations.transformers import (
        DecoderLayerCacheCall,
        LayerAdapter,
        LayerKeywords,
        StepCache,
    )

    falcon = falcon_decoder_layer()
    keywords = LayerKeywords.of(falcon.layer)
    assert (keywords.nones, keywords.cache) == ({"alibi": None}, "layer_past")
    keywords = LayerKeywords.of(llama_decoder_layer().layer)
    assert (keywords.nones, keywords.cache) == ({}, "past_key_values")
    torch.manual_seed(0)
    x, cos, sin = torch.randn(1, 3, 256), torch.randn(1, 3, 64), torch.randn(1, 3, 64)
    past = torch.randn(1, 4, 2, 64)
    assert falcon(x, cos, sin).shape == (1, 3, 256)
    out, keys, values = DecoderLayerCacheCall(falcon.layer)(x, cos, sin, past, past)
    assert out.shape == (1, 3, 256) and keys.shape == values.shape == (1, 4, 5, 64)
    assert torch.equal(keys[:, :, :2], past)
    cache = StepCache(past, past)
    assert (
        LayerAdapter._unserved(None, None, (cos, sin), {"layer_past": cache, "alibi": None})
        == "a layer_past argument"
    )
    assert LayerAdapter._unserved(None, None, (cos, sin), {"alibi": None, "output_attentions": False}) is None
    assert LayerAdapter._unserved(None, None, (cos, sin), {"alibi": cos}) == "tensor keyword arguments"
