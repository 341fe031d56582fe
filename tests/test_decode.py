"""Decoding over a static KV cache: indexed writes into the caller's tensors done in place (and judged
by verification), the static-cache layer, and StaticDecoder's greedy tokens against transformers'
``generate``."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from thunder_aot.errors import ExportError
from thunder_aot.frontend.resolve import resolve_module
from thunder_aot.pipeline import export
from thunder_aot.request import ExportRequest
from thunder_aot.shapes import parse_shapes
from thunder_aot.verify import load_module_from_text, verify

CACHE_SHAPES = "1x2x1x4, 1x2x16x4, 1:int64[0..15]"


class CacheWrite(nn.Module):
    """A step's keys written into a cache at one position, then the whole cache read."""

    def forward(self, keys, cache, position):
        cache.index_copy_(2, position, keys)
        return cache * 2


def cache_write():
    return CacheWrite()


pytestmark = pytest.mark.traces


def test_an_indexed_write_into_an_input_is_done_in_place_and_verified():
    """Thunder's index_copy plus copy_ write-back becomes one index_copy_ (no pass over the whole
    cache), and the module verifies with the cache judged as an output."""
    messages = []
    text = export(
        ExportRequest("tests.test_decode:cache_write", (CACHE_SHAPES,), backend="torch"),
        progress=messages.append,
    )
    assert any(m.startswith("verified:") for m in messages), messages
    body = text.split("def forward(")[1]
    assert "torch.Tensor.index_copy_(cache, 2, position, keys)" in body
    assert "copy_(" not in body.replace("index_copy_(", "")
    # verification sees the write: the same module writing nothing is refused on the cache
    broken = text.replace(
        "torch.Tensor.index_copy_(cache, 2, position, keys)", "torch.index_copy(cache, 2, position, keys)"
    )
    with pytest.raises(ExportError, match="output 1"):
        verify(
            broken,
            resolve_module("tests.test_decode:cache_write"),
            parse_shapes(CACHE_SHAPES),
            "CacheWrite",
            seed=3,
        )


def test_an_indexed_write_whose_old_value_is_read_later_keeps_its_write_back():
    """The cache's value before the write, read after it (here a read of the input placed after the
    write in the traced program by hand: Thunder orders the reads it traces before the write): the
    out-of-place write and its write-back stay."""
    import dataclasses

    from thunder_aot.backends import get_backend
    from thunder_aot.frontend.program import module_to_trace, traced_program
    from thunder_aot.ir import Ref, TorchCall, Value
    from thunder_aot.passes.index_writes_in_place import index_writes_in_place

    request = ExportRequest("tests.test_decode:cache_write", (CACHE_SHAPES,), backend="torch")
    program = traced_program(request, module_to_trace(request, print), get_backend("torch"), print).programs[
        0
    ]
    steps = list(program.steps)
    write = next(
        i for i, s in enumerate(steps) if isinstance(s, TorchCall) and s.target == "torch.index_copy"
    )
    cache = steps[write].args[0]
    assert isinstance(cache, Ref)
    spec = next(v.spec for v in program.inputs if v.name == cache.name)
    read = TorchCall("torch.clone", (Value("old_cache", spec),), (cache,))
    with_read = dataclasses.replace(program, steps=(*steps[: write + 1], read, *steps[write + 1 :]))
    assert index_writes_in_place(with_read) == with_read
    done = index_writes_in_place(program)
    assert [s.target for s in done.steps if isinstance(s, TorchCall)] == ["torch.Tensor.index_copy_"]


def _generate(model, ids, n):
    with torch.no_grad():
        return model.generate(ids, max_new_tokens=n, min_new_tokens=n, do_sample=False)


@pytest.fixture(scope="module")
def tiny_llama():
    pytest.importorskip("transformers")
    from thunder_aot.examples.hf import tiny_llama

    return tiny_llama().eval()


def _check_against_generate(model, layer_class, n: int) -> None:
    from thunder_aot.integrations.transformers import StaticDecoder

    generator = torch.Generator().manual_seed(11)
    ids = torch.randint(0, model.config.vocab_size, (1, 7), generator=generator)
    decoder = StaticDecoder(model, layer_class, max_len=max(7 + n, 64))
    assert torch.equal(decoder.generate(ids, n), _generate(model, ids, n))
    # a batch of two with different prompt lengths (left-padded), each as generate runs it alone
    ids = torch.randint(0, model.config.vocab_size, (2, 9), generator=generator)
    mask = torch.ones_like(ids)
    mask[1, :4] = 0
    decoder = StaticDecoder(model, layer_class, max_len=max(9 + n, 64), batch_size=2)
    got = decoder.generate(ids, n, attention_mask=mask)
    assert torch.equal(got[0], _generate(model, ids[:1], n)[0])
    assert torch.equal(got[1, 4:], _generate(model, ids[1:, 4:], n)[0])


def test_static_decoder_with_the_models_layers_makes_generates_tokens(tiny_llama):
    """fp32, greedy: 200 tokens at batch 1 and at batch 2 with different prompt lengths."""
    _check_against_generate(tiny_llama, None, 200)


@pytest.fixture(scope="module")
def static_layer_class():
    """Tiny Llama's layer exported over a static cache (torch backend, verified), once per module."""
    from thunder_aot.examples.hf import static_cache_shapes

    shapes = static_cache_shapes(256, 2, 64, "fp32", batch=2, prefill=16, max_len=64)
    text = export(
        ExportRequest("thunder_aot.examples.hf:llama_decoder_layer_static", (shapes,), backend="torch")
    )
    assert "torch.Tensor.index_copy_(keys" in text and "torch.Tensor.index_copy_(values" in text
    # the attention reads the cache's heads, its query heads grouped (no repeat_kv copy of the cache)
    expands = [line for line in text.splitlines() if "torch.Tensor.expand(" in line]
    assert expands and all("attention_mask" in line for line in expands), expands  # the prefill's mask only
    assert text.count("q_embed_grouped = torch.reshape(q_embed") == 2
    return load_module_from_text(text, "static_layer_torch").DecoderLayerStaticCacheCall


def test_static_decoder_with_generated_layers_makes_generates_tokens(tiny_llama, static_layer_class):
    """The layers exported with an additive mask (static_cache_shapes' default), which the decoder reads
    from the generated class and makes (the model's own layers take sdpa's bool mask)."""
    from thunder_aot.integrations.transformers import StaticDecoder

    assert StaticDecoder(tiny_llama, None, max_len=64).mask_dtype == torch.bool
    assert StaticDecoder(tiny_llama, static_layer_class, max_len=64).mask_dtype == torch.float32
    _check_against_generate(tiny_llama, static_layer_class, 40)


@pytest.mark.traces
def test_static_decoder_with_qwen2s_generated_layers_makes_generates_tokens():
    """Another family's layer (Qwen2: biased q/k/v projections) exported over a static cache by the
    torch backend: StaticDecoder's 40 greedy tokens are generate's, at batch 1 and in a padded batch."""
    from thunder_aot import export as thunder_aot_export
    from thunder_aot.examples.hf import static_cache_shapes
    from thunder_aot.integrations.transformers import DecoderLayerStaticCacheCall
    from thunder_aot.integrations.transformers.decode import kv_cache_dims, rope_width

    model = _family_causal_lm("qwen2")
    kv_heads, head_dim = kv_cache_dims(model.config)
    hidden, rope = model.config.hidden_size, rope_width(model)
    shapes = static_cache_shapes(hidden, kv_heads, head_dim, "fp32", batch=2, prefill=16, rope_dim=rope)
    text = thunder_aot_export(DecoderLayerStaticCacheCall(model.model.layers[0]), shapes, backend="torch")
    layer_class = load_module_from_text(text, "static_qwen2").DecoderLayerStaticCacheCall
    _check_against_generate(model, layer_class, 40)


def test_rope_width_is_what_each_familys_rotary_gives():
    """GPT-OSS's rotary gives cos and sin of half a head (it multiplies each half by them): a static
    layer's rotary inputs are that wide (static_cache_shapes' rope_dim); Llama's and Qwen2's a head."""
    pytest.importorskip("transformers")
    from thunder_aot.integrations.transformers.decode import kv_cache_dims, rope_width

    for family, half in (("llama", False), ("qwen2", False), ("gpt_oss", True)):
        model = _family_causal_lm(family)
        head_dim = kv_cache_dims(model.config)[1]
        assert rope_width(model) == (head_dim // 2 if half else head_dim), family


def test_generate_with_transformers_static_cache_runs_the_generated_layers(tiny_llama, static_layer_class):
    """``model.generate(..., cache_implementation="static")`` with the layers replaced: the prefill and
    every step run the generated module over transformers' StaticCache, with generate's tokens."""
    import copy

    from transformers.models.llama.modeling_llama import LlamaDecoderLayer

    from thunder_aot import replace

    ids = torch.randint(0, tiny_llama.config.vocab_size, (1, 7), generator=torch.Generator().manual_seed(2))
    expected = _generate(tiny_llama, ids, 60)
    model = copy.deepcopy(tiny_llama)
    replace(model, LlamaDecoderLayer, static_layer_class)
    with torch.no_grad():
        got = model.generate(
            ids, max_new_tokens=60, min_new_tokens=60, do_sample=False, cache_implementation="static"
        )
    assert torch.equal(got, expected)
    assert [dict(layer.calls) for layer in model.model.layers] == [{"generated": 60}] * 2


def test_generate_with_static_cache_takes_a_padded_batch_making_its_bool_mask_additive(
    tiny_llama, static_layer_class, monkeypatch
):
    """A left-padded batch of two: transformers hands the layers sdpa's bool mask, which the adapter
    makes additive, as the layers were exported (static_cache_shapes); generate's tokens."""
    import copy

    from transformers.models.llama.modeling_llama import LlamaDecoderLayer

    from thunder_aot import replace
    from thunder_aot.integrations.transformers import cache_slots

    made = []
    as_mask = cache_slots.as_mask
    monkeypatch.setattr(cache_slots, "as_mask", lambda m, dtype: made.append(m.dtype) or as_mask(m, dtype))
    ids = torch.randint(0, tiny_llama.config.vocab_size, (2, 9), generator=torch.Generator().manual_seed(3))
    mask = torch.ones_like(ids)
    mask[1, :4] = 0
    options = dict(max_new_tokens=60, min_new_tokens=60, do_sample=False, cache_implementation="static")
    with torch.no_grad():
        expected = tiny_llama.generate(ids, attention_mask=mask, **options)
        model = copy.deepcopy(tiny_llama)
        replace(model, LlamaDecoderLayer, static_layer_class)
        got = model.generate(ids, attention_mask=mask, **options)
    assert torch.equal(got, expected)
    assert [dict(layer.calls) for layer in model.model.layers] == [{"generated": 60}] * 2
    assert made and set(made) == {torch.bool}


def test_a_finished_sequences_row_takes_a_new_prompt_while_the_others_go_on(tiny_llama):
    from thunder_aot.integrations.transformers import StaticDecoder

    generator = torch.Generator().manual_seed(5)
    ids = torch.randint(0, tiny_llama.config.vocab_size, (2, 12), generator=generator)
    decoder = StaticDecoder(tiny_llama, None, max_len=64, batch_size=2)
    tokens = [decoder.prefill(ids)]
    for _ in range(9):
        tokens.append(decoder.step(tokens[-1]))
    prompt = torch.randint(0, tiny_llama.config.vocab_size, (7,), generator=generator)
    row1 = [decoder.insert(1, prompt)]
    current = tokens[-1].clone()
    current[1] = row1[0]
    for _ in range(20):
        current = decoder.step(current)
        tokens.append(current)
        row1.append(current[1])
    row0 = torch.stack([t[0] for t in tokens[:10]] + [t[0] for t in tokens[10:]])
    assert torch.equal(torch.cat([ids[0], row0[:10], row0[10:]]), _generate(tiny_llama, ids[:1], 30)[0])
    assert torch.equal(torch.stack(row1), _generate(tiny_llama, prompt[None], 21)[0, 7:])


def test_judge_steps_accepts_a_bf16_decode_and_refuses_a_layer_that_errs(tiny_llama):
    """A left-padded batch of two in bf16, prefill and 16 steps each judged against float64; the
    same decoder with its last layer's output off by 5% of itself (rolled along the hidden dim: the
    final norm would undo a scale) is refused at the prefill, naming it (bf16's own error here is
    about 1% of the logits: 2% is accepted)."""
    import copy

    from thunder_aot.integrations.transformers import StaticDecoder, judge_steps

    model = copy.deepcopy(tiny_llama).to(torch.bfloat16)
    ids = torch.randint(0, model.config.vocab_size, (2, 9), generator=torch.Generator().manual_seed(3))
    mask = torch.ones_like(ids)
    mask[1, :3] = 0
    decoder = StaticDecoder(model, None, max_len=64, batch_size=2)
    assert judge_steps(decoder, ids, 16, mask) == 17
    assert decoder.logits.dtype == torch.bfloat16 and decoder.logits.shape == (2, model.config.vocab_size)
    last = decoder.layers[-1]
    decoder.layers[-1] = lambda *args: (lambda out: out + 0.05 * out.roll(1, -1))(last(*args))
    with pytest.raises(ExportError, match=r"StaticDecoder's prefill \(logits\): generated module's error"):
        judge_steps(decoder, ids, 16, mask)


class _NearTiesBrokenOtherwise(torch.overrides.TorchFunctionMode):
    """Moves each top-k's input (a router's logits) by up to ``size`` of its row's largest magnitude
    (uniform, a seeded draw per call): a decoder whose routers break near ties otherwise than eager's."""

    def __init__(self, size: float) -> None:
        super().__init__()
        self.size, self.generator = size, torch.Generator().manual_seed(6)

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func in (torch.topk, torch.Tensor.topk) and args[0].is_floating_point():
            x = args[0]
            scale = x.abs().amax(-1, keepdim=True)
            moved = x + self.size * scale * (2 * torch.rand(x.shape, generator=self.generator) - 1).to(x)
            args = (moved, *args[1:])
        return func(*args, **(kwargs or {}))


def test_judge_steps_routes_eager_and_float64_as_the_decoder_did():
    """GPT-OSS in bf16 (routed experts), a left-padded batch of two: a decoder whose routers break
    near ties otherwise than eager (their logits moved by up to 1.5% of the row) sends some tokens to other
    experts, and judge_steps accepts it against the float64 run that routes as it did (its padding
    tokens routed as eager's: nothing attends them); moved by 30%, its picks are no near ties and
    it is refused."""
    import copy

    from thunder_aot.integrations.transformers import StaticDecoder, judge_steps
    from thunder_aot.integrations.transformers.decode import decoder_choices

    model = copy.deepcopy(_family_causal_lm("gpt_oss")).to(torch.bfloat16)
    ids = torch.randint(0, model.config.vocab_size, (2, 9), generator=torch.Generator().manual_seed(3))
    mask = torch.ones_like(ids)
    mask[1, :3] = 0

    def decoder(size: float) -> StaticDecoder:
        made = StaticDecoder(model, None, max_len=64, batch_size=2)
        for name in ("prefill", "step"):
            call = getattr(made, name)
            setattr(made, name, lambda *args, call=call: _under(_NearTiesBrokenOtherwise(size), call, *args))
        return made

    assert judge_steps(decoder(0.015), ids, 16, mask) == 17
    # it did route some tokens otherwise than the model over the same sequence
    from thunder_aot.verify.judge import run_recording_choices

    nudged = decoder(0.015)
    picks = [run_recording_choices(nudged.prefill, [ids, mask])[1]]
    tokens = [nudged.next_tokens.clone()]
    for _ in range(4):
        picks.append(run_recording_choices(nudged.step, [tokens[-1]])[1])
        tokens.append(nudged.next_tokens.clone())
    sequence = torch.cat([ids, torch.stack(tokens[:-1], 1)], 1)
    full_mask = torch.cat([mask, torch.ones_like(sequence[:, 9:])], 1)
    positions = (full_mask.cumsum(-1) - 1).clamp(min=0)
    _, eager = run_recording_choices(
        lambda: model(input_ids=sequence, attention_mask=full_mask, position_ids=positions, use_cache=False),
        [],
    )
    joined = decoder_choices(picks, 2)
    real = full_mask.bool().reshape(-1)
    assert sum(int((e[real] != c[real]).any(-1).sum()) for e, c in zip(eager, joined)) > 0
    with pytest.raises(ExportError, match="StaticDecoder's (prefill|step)"):
        judge_steps(decoder(0.3), ids, 16, mask)


def _under(mode, call, *args):
    with mode:
        return call(*args)


def test_gpt_oss_generated_static_layer_decodes_judged_against_float64():
    """GPT-OSS's layer (sinks, routed experts through torch's grouped matmul, bf16) exported over a
    static cache by the torch backend at batch 1 serves its sliding and full layers alike (the mask
    is an input): StaticDecoder's prefill and 16 steps are judged against the model in float64,
    routed as the decoder routed (judge_steps)."""
    from thunder_aot import export as thunder_aot_export
    from thunder_aot.examples.hf import gpt_oss_small_causal_lm, static_cache_shapes
    from thunder_aot.integrations.transformers import DecoderLayerStaticCacheCall, StaticDecoder, judge_steps
    from thunder_aot.integrations.transformers.decode import kv_cache_dims, rope_width

    model = gpt_oss_small_causal_lm().eval()
    assert model.dtype == torch.bfloat16 and model.config.layer_types[:2] == [
        "sliding_attention",
        "full_attention",
    ]
    kv_heads, head_dim = kv_cache_dims(model.config)
    shapes = static_cache_shapes(
        model.config.hidden_size, kv_heads, head_dim, "bf16", batch=1, prefill=16, rope_dim=rope_width(model)
    )
    text = thunder_aot_export(DecoderLayerStaticCacheCall(model.model.layers[0]), shapes, backend="torch")
    assert "torch._grouped_mm(" in text
    layer_class = load_module_from_text(text, "static_gpt_oss").DecoderLayerStaticCacheCall
    ids = torch.randint(0, model.config.vocab_size, (1, 11), generator=torch.Generator().manual_seed(8))
    decoder = StaticDecoder(model, layer_class, max_len=64)
    assert judge_steps(decoder, ids, 16) == 17
    assert all(type(layer).__name__ == "DecoderLayerStaticCacheCall" for layer in decoder.layers)


def test_static_decoder_refuses_bad_calls_in_one_line(tiny_llama):
    from thunder_aot.integrations.transformers import StaticDecoder

    decoder = StaticDecoder(tiny_llama, None, max_len=8)
    cases = [
        (lambda: decoder.step(torch.tensor([1])), "no sequence started"),
        (lambda: decoder.prefill(torch.ones(2, 3, dtype=torch.long)), r"shape \[1, prompt\]"),
        (lambda: decoder.prefill(torch.ones(1, 8, dtype=torch.long)), "does not fit max_len 8"),
        (lambda: decoder.generate(torch.ones(1, 4, dtype=torch.long), 5), "exceed max_len 8"),
        (lambda: StaticDecoder(tiny_llama, nn.Linear, max_len=8), "DecoderLayerStaticCacheCall"),
        (lambda: StaticDecoder(tiny_llama, {"full_attention": nn.Linear}), "dict of them by layer type"),
        (lambda: StaticDecoder(nn.Linear(2, 2), None), "Llama layout"),
        (lambda: decoder.insert(3, torch.ones(2, dtype=torch.long)), r"row in 0\.\.0"),
        (lambda: decoder.insert(0, torch.ones(2, dtype=torch.long)), "prefill a new batch instead"),
    ]
    for call, message in cases:
        with pytest.raises((ValueError, RuntimeError, TypeError), match=message) as info:
            call()
        assert "\n" not in str(info.value)
    token = decoder.prefill(torch.ones(1, 6, dtype=torch.long))
    token = decoder.step(token)
    with pytest.raises(RuntimeError, match="the cache is full"):
        decoder.step(decoder.step(token))
    with pytest.raises(ValueError, match="expected 1 token ids"):
        decoder.step(torch.tensor([1, 2]))


def _family_causal_lm(family: str):
    """fp32 causal LMs at test size: Llama (sdpa), Qwen2 (biased q/k/v; sdpa), GPT-OSS (eager
    attention, sinks, sliding windows of 8 between full layers, routed experts), Phi (a final
    layernorm, half a head rotated) and Gemma 3 (a sliding layer and a full one, each with its own
    rotary embedding)."""
    from thunder_aot.examples import hf

    if family == "llama":
        return hf.tiny_llama().eval()
    if family == "qwen2":
        from transformers import Qwen2Config, Qwen2ForCausalLM

        return hf._randomize(Qwen2ForCausalLM(hf._small_config(Qwen2Config)), 41).eval()
    if family == "phi":  # a final_layernorm, not a norm; rotary over part of a head
        from transformers import PhiConfig, PhiForCausalLM

        config = hf._small_config(PhiConfig, partial_rotary_factor=0.5, bos_token_id=1, eos_token_id=2)
        return hf._randomize(PhiForCausalLM(config), 43).eval()
    if family == "gemma3":  # a rotary embedding per layer type (local base 1e4, global 1e6)
        from transformers import Gemma3ForCausalLM, Gemma3TextConfig

        config = hf._small_config(
            Gemma3TextConfig,
            head_dim=64,
            sliding_window=4,
            layer_types=["sliding_attention", "full_attention"],
            pad_token_id=0,
            bos_token_id=1,
            eos_token_id=2,
        )
        return hf._randomize(Gemma3ForCausalLM(config), 42).eval()
    model = hf.gpt_oss_small_causal_lm().float().eval()
    model.config._experts_implementation = "eager"  # (torch's grouped matmul takes bf16 on the CPU)
    return model


def test_a_rotary_per_layer_type_reaches_each_layer_its_own():
    """Gemma 3 (and OLMo 3) have a rotary embedding per layer type, called with the layer type:
    StaticDecoder keeps a table per kind and gives each layer its own. Its logits are judged against
    the model in float64 (judge_steps); given the sliding layer's table, the full layer errs and
    is refused."""
    pytest.importorskip("transformers")
    from thunder_aot.integrations.transformers import StaticDecoder, judge_steps, rotary_kinds

    model = _family_causal_lm("gemma3")
    assert rotary_kinds(model) == ["sliding_attention", "full_attention"]
    decoder = StaticDecoder(model, None, max_len=24)
    local, full = decoder.rope_tables["sliding_attention"], decoder.rope_tables["full_attention"]
    assert not torch.allclose(local[0], full[0])  # other bases: a mix-up would show
    ids = torch.randint(0, model.config.vocab_size, (1, 9), generator=torch.Generator().manual_seed(3))
    assert judge_steps(decoder, ids, steps=6) == 7
    decoder.rope_tables["full_attention"] = local
    with pytest.raises(ExportError, match="error against float64"):
        judge_steps(decoder, ids, steps=6)


def test_a_final_layernorm_and_a_partial_rotary_decode_as_the_model_does():
    """Phi names its final norm final_layernorm and rotates half of each head: StaticDecoder takes
    the norm by either name, and its logits pass judge_steps against the model in float64."""
    pytest.importorskip("transformers")
    from thunder_aot.integrations.transformers import StaticDecoder, judge_steps
    from thunder_aot.integrations.transformers.decode import kv_cache_dims, rope_width

    model = _family_causal_lm("phi")
    assert rope_width(model) == kv_cache_dims(model.config)[1] // 2
    decoder = StaticDecoder(model, None, max_len=24)
    assert decoder.norm is model.model.final_layernorm
    ids = torch.randint(0, model.config.vocab_size, (1, 9), generator=torch.Generator().manual_seed(4))
    assert judge_steps(decoder, ids, steps=6) == 7


@pytest.mark.traces
def test_static_decoder_takes_a_generated_class_per_layer_type():
    """Gemma 3's sliding and full layers differ in a setting export records (``is_sliding``): one
    export serves one type, and StaticDecoder takes a class per layer type (the torch backend here);
    its logits pass judge_steps and its 20 greedy tokens are generate's."""
    from thunder_aot import export as thunder_aot_export
    from thunder_aot.examples.hf import static_cache_shapes
    from thunder_aot.integrations.transformers import DecoderLayerStaticCacheCall, StaticDecoder, judge_steps
    from thunder_aot.integrations.transformers.decode import kv_cache_dims, rope_width

    model = _family_causal_lm("gemma3")
    kv_heads, head_dim = kv_cache_dims(model.config)
    hidden, rope = model.config.hidden_size, rope_width(model)
    shapes = static_cache_shapes(hidden, kv_heads, head_dim, "fp32", batch=1, prefill=16, rope_dim=rope)
    classes = {}
    for k, kind in enumerate(model.config.layer_types):
        text = thunder_aot_export(DecoderLayerStaticCacheCall(model.model.layers[k]), shapes, backend="torch")
        classes[kind] = load_module_from_text(text, f"static_gemma3_{kind}").DecoderLayerStaticCacheCall
    with pytest.raises(ValueError, match="is_sliding"):  # one type's class for every layer
        StaticDecoder(model, classes["sliding_attention"], max_len=64)
    with pytest.raises(TypeError, match="no generated class for layer type"):
        StaticDecoder(model, {"sliding_attention": classes["sliding_attention"]}, max_len=64)
    ids = torch.randint(0, model.config.vocab_size, (1, 9), generator=torch.Generator().manual_seed(4))
    assert judge_steps(StaticDecoder(model, classes, max_len=64), ids, steps=6) == 7
    assert torch.equal(StaticDecoder(model, classes, max_len=64).generate(ids, 20), _generate(model, ids, 20))


@pytest.mark.traces  # whole models generate 256 tokens five times each: the full tier
@pytest.mark.parametrize("family", ["llama", "qwen2", "gpt_oss"])
def test_static_decoder_makes_generates_256_tokens_across_families(family):
    """fp32, greedy, the models' own layers through StaticDecoder's cache, masks (sliding windows
    included), rotary table and graph-free step: 256 tokens at batch 1, and at batch 4 with four
    prompt lengths (left-padded), each row as generate runs it alone."""
    pytest.importorskip("transformers")
    from thunder_aot.integrations.transformers import StaticDecoder

    model = _family_causal_lm(family)
    n = 256
    generator = torch.Generator().manual_seed(5)
    ids = torch.randint(0, model.config.vocab_size, (1, 6), generator=generator)
    assert torch.equal(StaticDecoder(model, None, max_len=6 + n).generate(ids, n), _generate(model, ids, n))
    ids = torch.randint(0, model.config.vocab_size, (4, 12), generator=generator)
    mask = torch.ones_like(ids)
    pads = [0, 3, 7, 10]
    for row, pad in enumerate(pads):
        mask[row, :pad] = 0
    got = StaticDecoder(model, None, max_len=12 + n, batch_size=4).generate(ids, n, attention_mask=mask)
    for row, pad in enumerate(pads):
        assert torch.equal(got[row, pad:], _generate(model, ids[row : row + 1, pad:], n)[0]), (family, row)
