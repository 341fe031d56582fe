"""Issue 6 on CPU: transformers' own submodules export and match eager; replace() swaps them into
a small transformers model whose outputs stay equal."""

from __future__ import annotations

import copy
import os

import pytest
import torch

from tests.examples import HF_SUBMODULES, TRITON_CALLS, TRITON_ONLY_SUBMODULES
from tests.helpers import ROOT, Logits, greedy_tokens, python_env
from thunder_aot import replace
from thunder_aot.errors import ExportError
from thunder_aot.frontend.lower import state_name
from thunder_aot.ir import TorchCall
from thunder_aot.pipeline import build_program, export
from thunder_aot.request import ExportRequest
from thunder_aot.verify import load_module_from_text
from thunder_aot.verify.judge import check_call, check_outputs

#: every test here exports (traces with Thunder) or builds a wheel
pytestmark = pytest.mark.traces

pytest.importorskip("transformers")


@pytest.mark.parametrize(
    "source,shapes,unfused", HF_SUBMODULES, ids=[m[0].split(":")[1] for m in HF_SUBMODULES]
)
def test_export_matches_eager_and_fuses_all_but_matmuls_and_views(source, shapes, unfused):
    """transformers' norms, MLP, rotary and decoder layers: the torch backend's module verifies (no
    false refusal under any of 20 seeds: tests.test_sound_export, one export for both). With
    nvFuser's claims only matmuls and views stay torch calls: tests/test_gpu_models.py holds the
    nvFuser export to that where it runs (here it cost a third trace of each layer)."""
    from tests.test_sound_export import refusals

    messages: list[str] = []
    text = export(ExportRequest(source, (shapes,), backend="torch"), progress=messages.append)  # verifies
    assert any(m.startswith("verified:") and "(against float64; seed" in m for m in messages), messages
    assert not [m for m in messages if "verification refused" in m], messages  # Thunder's prims as they are
    refused = refusals(text, source, shapes)
    assert not refused, refused[:3]
    program, _, _ = build_program(ExportRequest(source, (shapes,), backend="torch"), progress=lambda m: None)
    for bucket in program.programs:
        assert len(bucket.steps) > len([s for s in bucket.steps if isinstance(s, TorchCall)])
    # parameters and buffers are named for their state_dict keys (GPT-OSS's experts came out as
    # "weight" and "selected_weights", Thunder's names of the locals that held them)
    state = [(i.name, i.source_name) for i in program.inputs if i.kind != "input"]
    assert all(name == state_name(key) for name, key in state), state  # (none in apply_rotary)


def test_gpt_oss_layer_with_triton_kernels_verifies_under_the_interpreter(tmp_path):
    """GPT-OSS's layer (attention sinks: a softmax over the logits and one more column, sliced back;
    clamped SwiGLU experts; integer floor division and arange in the routing): every region a Triton
    kernel, and the module verified against float64 through Triton's interpreter (the structural
    test above passed while the sinks' kernel could not run)."""
    import subprocess
    import sys

    pytest.importorskip("triton")
    source, shapes = (
        "tests.hf_fixtures:gpt_oss_small_decoder_layer",
        "1x[S=1..32]x256:bf16, 1x[S]x32:bf16, 1x[S]x32:bf16",
    )
    env = python_env(TRITON_INTERPRET="1")
    out = tmp_path / "layer.py"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "thunder_aot",
            "export",
            source,
            "--shapes",
            shapes,
            "--backend",
            "triton",
            "--out",
            str(out),
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "no triton kernel" not in done.stderr and "(against float64; seed" in done.stderr, done.stderr[
        -3000:
    ]
    # the routing's gathers load inside their readers' kernels (passes.move_gathers_into_kernels), the regions
    # Thunder left apart around them are joined (passes.join_regions), and the sort, histc, cumsum and
    # inverse permutation are one program (passes.fuse_moe_routing); the attention output's transposed
    # copy is a kernel of its own (passes.copies_as_kernels: its reader is o_proj's matmul), and so is the
    # router's top-k (passes.topk_as_regions): 11 kernels, where there were 16 and torch's copy and topk;
    # what stays torch calls is matmuls and views
    (unfused,) = [line for line in done.stderr.splitlines() if "not fused" in line]
    assert _unfused_calls(unfused) <= MATMULS_AND_VIEWS, unfused
    text = out.read_text()
    assert text.count("@triton.jit") == 11 and "_copy: transpose" in text and "_topk: topk" in text


MOE_BLOCKS = ["qwen3_moe_block", "mixtral_moe_block", "qwen2_moe_block", "olmoe_block"]
#: the torch calls a layer may keep with the Triton backend (issue 17): matmuls and views
MATMULS_AND_VIEWS = {
    "torch.nn.functional.linear",
    "torch.matmul",
    "torch._grouped_mm",
    "torch.nn.functional.scaled_dot_product_attention",
    "torch.nn.functional.embedding",
    "torch.reshape",
    "torch.Tensor.view",
    "torch.Tensor.reshape",
    "torch.transpose",
    "torch.permute",
    "torch.Tensor.transpose",
    "torch.Tensor.permute",
}


def _unfused_calls(line: str) -> set[str]:
    """The calls export's "not fused (run as torch calls): a x1, b x2" line names."""
    return {part.rsplit(" x", 1)[0] for part in line.split("torch calls): ", 1)[1].split(", ")}


@pytest.mark.traces
@pytest.mark.parametrize("factory", MOE_BLOCKS)
def test_moe_blocks_route_in_one_program_and_verify_under_the_interpreter(factory, tmp_path):
    """Every transformers MoE family's grouped-mm bookkeeping (the sort of the top-k ids, histc,
    cumsum, the inverse permutation) is one routing program (passes.fuse_moe_routing), the ids followed
    to topk through a region where the family reshapes them there (Qwen3-MoE), and the block
    verifies against float64 through Triton's interpreter."""
    import subprocess
    import sys

    pytest.importorskip("triton")
    env = python_env(TRITON_INTERPRET="1")
    out = tmp_path / "block.py"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "thunder_aot",
            "export",
            f"thunder_aot.examples.hf:{factory}",
            "--shapes",
            "1x[S=1..24]x256:bf16",
            "--backend",
            "triton",
            "--out",
            str(out),
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "no triton kernel" not in done.stderr and "(against float64; seed" in done.stderr, done.stderr[
        -3000:
    ]
    (unfused,) = [line for line in done.stderr.splitlines() if "not fused" in line]
    assert (
        _unfused_calls(unfused) <= MATMULS_AND_VIEWS
    ), unfused  # the router's top-k too (passes.topk_as_regions)
    assert "_routing.launch(" in out.read_text() and "_topk.launch(" in out.read_text()


def test_replace_in_a_transformers_model_keeps_its_outputs():
    from transformers.models.llama.modeling_llama import LlamaRMSNorm

    from thunder_aot.examples.hf import tiny_llama

    text = export(
        ExportRequest("thunder_aot.examples.hf:llama_rmsnorm", ("1x[1..64]x256:fp32",), backend="torch")
    )
    gen = load_module_from_text(text, "gen_llama_rmsnorm")
    model = tiny_llama()
    original = copy.deepcopy(model)
    replaced = replace(model, LlamaRMSNorm, gen.LlamaRMSNorm)
    assert replaced == [
        "model.layers.0.input_layernorm",
        "model.layers.0.post_attention_layernorm",
        "model.layers.1.input_layernorm",
        "model.layers.1.post_attention_layernorm",
        "model.norm",
    ]
    assert not any(isinstance(m, LlamaRMSNorm) for m in model.modules())
    assert model.model.norm.weight is original.model.norm.weight or torch.equal(
        model.model.norm.weight, original.model.norm.weight
    )
    ids = torch.randint(0, 512, (1, 37), generator=torch.Generator().manual_seed(torch.seed() >> 1))
    with torch.no_grad():
        check_outputs(Logits(original), [ids], Logits(model)(ids), "tiny llama logits after replace")
    assert model.state_dict().keys() == original.state_dict().keys()


def test_replace_refuses_a_submodule_with_other_settings():
    from transformers.models.llama.modeling_llama import LlamaRMSNorm

    text = export(
        ExportRequest("thunder_aot.examples.hf:llama_rmsnorm", ("1x[1..8]x256:fp32",), backend="torch"),
        verify=False,
    )
    gen = load_module_from_text(text, "gen_llama_rmsnorm_eps")
    model = torch.nn.Sequential(LlamaRMSNorm(256, eps=1e-5))
    with pytest.raises(ValueError, match="exported for variance_epsilon=1e-06; the source has 1e-05"):
        replace(model, LlamaRMSNorm, gen.LlamaRMSNorm)
    assert isinstance(model[0], LlamaRMSNorm)  # nothing half-replaced


def test_replaced_model_under_torch_compile():
    """torch.compile traces through torch-backend modules (dispatch becomes guards); here with the
    "eager" dynamo backend so that CI needs no C++ toolchain time."""
    from transformers.models.llama.modeling_llama import LlamaRMSNorm

    from thunder_aot.examples.hf import tiny_llama

    text = export(
        ExportRequest("thunder_aot.examples.hf:llama_rmsnorm", ("1x[1..64]x256:fp32",), backend="torch"),
        verify=False,
    )
    gen = load_module_from_text(text, "gen_llama_rmsnorm_compile")
    model = tiny_llama()
    original = copy.deepcopy(model)
    replace(model, LlamaRMSNorm, gen.LlamaRMSNorm)
    compiled = torch.compile(model, backend="eager")
    ids = torch.randint(0, 512, (1, 21), generator=torch.Generator().manual_seed(torch.seed() >> 1))
    with torch.no_grad():
        check_outputs(Logits(original), [ids], Logits(compiled)(ids), "compiled tiny llama after replace")


def test_kernel_regions_get_contiguous_inputs_from_torch_calls():
    """In a decoder layer, q and k reach the rotary region as transposed views made by torch calls;
    nvFuser reads a region's inputs as contiguous (it refused the strides on the GPU), so each
    input that a torch call made is made contiguous first. (The GPU test verifies the numbers.)"""
    request = ExportRequest(
        "thunder_aot.examples.hf:llama_decoder_layer", ("1x[S=1..64]x256, 1x[S]x64, 1x[S]x64",)
    )
    text = export(request, verify=False)
    program, _, _ = build_program(request, progress=lambda m: None)
    needed: set[str] = set()
    for bucket in program.programs:
        made_by_torch: set[str] = set()
        for step in bucket.steps:
            if isinstance(step, TorchCall):
                made_by_torch |= {o.name for o in step.outputs}
            else:
                needed |= {v.name for v in step.inputs} & made_by_torch
    assert len(needed) >= 2  # at least q and k
    for name in needed:
        assert f"{name} = {name}.contiguous()" in text, name


#: the Triton test's modules, last first: test_export_matches_eager... traces them first first, so two
#: workers that take one test each meet in the middle instead of each waiting for the other's trace
#: of the same module (tests/export_cache.py shares the traces of the torch and Triton backends)
TRITON_ORDER = [*reversed(TRITON_ONLY_SUBMODULES), *reversed(HF_SUBMODULES)]


@pytest.mark.parametrize(
    "source,shapes,unfused", TRITON_ORDER, ids=[m[0].split(":")[1] for m in TRITON_ORDER]
)
def test_every_region_of_transformers_submodules_is_a_triton_kernel(source, shapes, unfused):
    """The Triton backend takes every region Thunder forms in transformers' norms, MLP, rotary and
    decoder layers (Llama's, Qwen3's with its per-head norms): export reports none without a kernel,
    and only matmuls, attention, embeddings and views stay torch calls (tests.examples.TRITON_CALLS)."""
    from thunder_aot.backends import get_backend
    from thunder_aot.pipeline import regions_without_kernels

    program, _, _ = build_program(ExportRequest(source, (shapes,), backend="triton"), progress=lambda m: None)
    assert program.programs and not regions_without_kernels(program, get_backend("triton"))
    calls = {s.target for bp in program.programs for s in bp.steps if isinstance(s, TorchCall)}
    assert calls <= unfused and calls <= TRITON_CALLS, sorted(calls - (unfused & TRITON_CALLS))


def test_whole_decoder_layers_replaced_in_a_transformers_model():
    """A module generated from a whole decoder layer takes the place of each bare transformers layer
    of a model: the model keeps its logits (judged against float64) and its state_dict keys and
    tensors; prefills inside the bucket run the generated module, decoding with a KV cache and calls
    outside the bucket the original layers, with the same greedy tokens as the untouched model."""
    from transformers.models.llama.modeling_llama import LlamaDecoderLayer

    from thunder_aot.examples.hf import tiny_llama
    from thunder_aot.integrations.transformers import LayerAdapter

    text = export(
        ExportRequest(
            "thunder_aot.examples.hf:llama_decoder_layer",
            ("1x[S=1..64]x256, 1x[S]x64, 1x[S]x64",),
            backend="torch",
        ),
        verify=False,
    )
    gen = load_module_from_text(text, "gen_llama_decoder_layer_swap")
    model = tiny_llama()
    original = copy.deepcopy(model)
    state = model.state_dict()
    assert replace(model, LlamaDecoderLayer, gen.DecoderLayerCall) == ["model.layers.0", "model.layers.1"]
    adapters = [model.model.layers[0], model.model.layers[1]]
    assert all(isinstance(a, LayerAdapter) for a in adapters)
    after = model.state_dict()
    assert list(after) == list(state) and all(torch.equal(after[k], state[k]) for k in state)
    # no weight held twice: the layers' merged projections are the model's own q/k/v weights
    for i, adapter in enumerate(adapters):
        merged = adapter.generated.get_buffer("layer.self_attn.merged_q_proj_k_proj_v_proj_weight")
        assert (
            model.get_parameter(f"model.layers.{i}.self_attn.k_proj.weight").untyped_storage().data_ptr()
            == merged.data_ptr()
        )
    generator = torch.Generator().manual_seed(torch.seed() >> 1)
    with torch.no_grad():
        for tokens in (1, 9, 64, 65):
            ids = torch.randint(0, 512, (1, tokens), generator=generator)
            check_outputs(
                Logits(original),
                [ids],
                Logits(model)(ids),
                f"tiny llama logits at {tokens} tokens, layers replaced",
            )
    assert [a.calls["generated"] for a in adapters] == [3, 3]
    assert [a.calls["outside every bucket"] for a in adapters] == [1, 1]
    prompt = torch.randint(0, 512, (1, 12), generator=generator)
    want, got = greedy_tokens(original, prompt, 6), greedy_tokens(model, prompt, 6)
    assert torch.equal(got, want)
    assert all(a.calls["a KV cache"] >= 6 for a in adapters), [dict(a.calls) for a in adapters]


def _cache_layers_model(backend: str):
    from transformers.models.llama.modeling_llama import LlamaDecoderLayer

    from tests.examples import LLAMA_CACHE_SHAPES
    from thunder_aot.examples.hf import tiny_llama

    text = export(
        ExportRequest(
            "thunder_aot.examples.hf:llama_decoder_layer_cache", (LLAMA_CACHE_SHAPES,), backend=backend
        ),
        verify=False,
    )
    gen = load_module_from_text(text, f"gen_llama_decoder_layer_cache_{backend}")
    model = tiny_llama()
    original = copy.deepcopy(model)
    assert replace(model, LlamaDecoderLayer, gen.DecoderLayerCacheCall) == [
        "model.layers.0",
        "model.layers.1",
    ]
    return original, model


@pytest.mark.parametrize("backend,new_tokens", [("torch", 64), ("triton", 6)])
def test_kv_cache_layers_generate_transformers_tokens(backend, new_tokens):
    """Issue 19: decoder layers exported with their KV cache as tensors (a prefill bucket and a
    decode-step bucket) serve every forward of transformers' greedy ``generate`` (fp32, its default
    DynamicCache): the same tokens as the untouched model, and the same cache contents."""

    if backend == "triton":
        pytest.importorskip("triton")
        if not torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") != "1":
            # Triton reads TRITON_INTERPRET at import: this test again, in a process that sets it
            import subprocess
            import sys

            env = python_env(TRITON_INTERPRET="1")
            done = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "pytest",
                    "-q",
                    "-p",
                    "no:cacheprovider",
                    f"{__file__}::test_kv_cache_layers_generate_transformers_tokens[triton-{new_tokens}]",
                ],
                cwd=ROOT,
                env=env,
                capture_output=True,
                text=True,
            )
            assert done.returncode == 0 and "1 passed" in done.stdout, (
                done.stdout[-3000:] + done.stderr[-2000:]
            )
            return
    original, model = _cache_layers_model(backend)
    prompt = torch.randint(0, 512, (1, 12), generator=torch.Generator().manual_seed(torch.seed() >> 1))
    want, got = greedy_tokens(original, prompt, new_tokens), greedy_tokens(model, prompt, new_tokens)
    assert torch.equal(got, want), (got, want)
    assert [dict(a.calls) for a in model.model.layers] == [{"generated": new_tokens}] * 2
    with torch.no_grad():  # the cache after a prefill and one decode step, judged against float64
        check_outputs(_CacheAfterStep(original), [got], _CacheAfterStep(model)(got), "KV cache after a step")


class _CacheAfterStep(torch.nn.Module):
    """A causal LM's DynamicCache contents (every layer's keys and values) after a prefill of all but
    the last token and a decode step of the last one."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, ids):
        from transformers import DynamicCache

        cache = DynamicCache(config=self.model.config)
        self.model(ids[:, :-1], past_key_values=cache, use_cache=True)
        self.model(ids[:, -1:], past_key_values=cache, use_cache=True)
        assert all(layer.keys.shape[-2] == ids.shape[1] for layer in cache.layers)
        return tuple(t for layer in cache.layers for t in (layer.keys, layer.values))


def test_kv_cache_layers_run_the_original_layer_for_other_caches():
    """A cache the generated module cannot hold (a StaticCache, a padded batch's mask) runs the
    original layer, counted by reason; a forward without a cache runs the prefill bucket."""
    from transformers import StaticCache

    original, model = _cache_layers_model("torch")
    ids = torch.randint(0, 512, (1, 9), generator=torch.Generator().manual_seed(torch.seed() >> 1))
    with torch.no_grad():
        check_outputs(
            Logits(original), [ids], Logits(model)(ids), "tiny llama logits, cache layers, no cache"
        )
        cache = StaticCache(config=model.config, max_cache_len=32)
        got = model(ids, past_key_values=cache, use_cache=True).logits
        want = original(
            ids, past_key_values=StaticCache(config=original.config, max_cache_len=32), use_cache=True
        ).logits
    torch.testing.assert_close(got, want)
    calls = [dict(a.calls) for a in model.model.layers]
    assert calls == [{"generated": 1, "a StaticCache": 1}] * 2, calls


def test_mask_layers_serve_padded_batches_and_calls_without_a_mask():
    """Layers exported with the attention mask as an input (what transformers passes inside a CUDA
    graph capture, a compile, or for a padded batch) serve masked and unmasked calls alike."""
    from transformers.models.llama.modeling_llama import LlamaDecoderLayer

    from thunder_aot.examples.hf import tiny_llama

    text = export(
        ExportRequest(
            "tests.hf_fixtures:llama_decoder_layer_mask",
            ("[B=1..2]x[S=1..64]x256, 1x[S]x64, 1x[S]x64, [B]x1x[S]x[S]:bool",),
            backend="torch",
        ),
        verify=False,
    )
    gen = load_module_from_text(text, "gen_llama_decoder_layer_mask")
    model = tiny_llama()
    original = copy.deepcopy(model)
    replace(model, LlamaDecoderLayer, gen.DecoderLayerMaskCall)
    generator = torch.Generator().manual_seed(torch.seed() >> 1)
    ids = torch.randint(0, 512, (2, 11), generator=generator)
    padding = torch.ones(2, 11, dtype=torch.long)
    padding[1, :4] = 0  # the second sequence is left-padded
    with torch.no_grad():
        for mask in (torch.ones_like(padding), padding):
            got = _UnpaddedLogits(model)(ids, mask)
            check_outputs(_UnpaddedLogits(original), [ids, mask], got, "tiny llama logits, mask layers")
    assert [dict(a.calls) for a in model.model.layers] == [{"generated": 2}] * 2


class _UnpaddedLogits(torch.nn.Module):
    """A causal LM's logits at the positions its 2D attention mask keeps (all ones: no mask passed)."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, ids, mask):
        logits = self.model(ids, attention_mask=None if bool(mask.all()) else mask, use_cache=False).logits
        return logits[mask.bool()]


def test_whole_decoder_stack_serves_a_causal_lms_last_token_forward():
    """A causal LM's whole decoder stack exported as one module (DecoderStackCall): StackAdapter runs
    it for forwards without a cache that keep the last logits (judged against float64), the model's
    own forward for every other call, and refuses a model whose forward is not that stack."""
    from thunder_aot.examples.hf import tiny_llama
    from thunder_aot.integrations.transformers import StackAdapter

    text = export(
        ExportRequest("tests.hf_fixtures:tiny_llama_stack", ("1x[S=1..64]x256",), backend="torch"),
        verify=False,
    )
    gen = load_module_from_text(text, "gen_tiny_llama_stack")
    model = tiny_llama()
    generator = torch.Generator().manual_seed(torch.seed() >> 1)
    ids = torch.randint(0, 512, (1, 23), generator=generator)
    adapter = StackAdapter(model, gen.DecoderStackCall, check_ids=ids)
    assert list(adapter.state_dict()) == list(model.state_dict())
    with torch.no_grad():
        for tokens in (1, 2, 64):
            ids = torch.randint(0, 512, (1, tokens), generator=generator)
            got = adapter(ids, use_cache=False, logits_to_keep=1).logits
            check_outputs(_LastLogitsOf(model), [ids], got, f"stack at {tokens} tokens")
        adapter(ids)  # a cache and all logits: the model's forward
        adapter(torch.randint(0, 512, (1, 65), generator=generator), use_cache=False, logits_to_keep=1)
    assert dict(adapter.calls) == {"generated": 4, "a cache or all logits": 1, "outside every bucket": 1}

    from transformers.models.llama.modeling_llama import LlamaModel

    class ScaledLlamaModel(LlamaModel):  # scales its embeddings, as Gemma's model does: not the stack
        def forward(self, input_ids=None, inputs_embeds=None, **kwargs):
            return super().forward(inputs_embeds=self.embed_tokens(input_ids) * 2.0, **kwargs)

    scaled = tiny_llama()
    scaled.model.__class__ = ScaledLlamaModel
    with pytest.raises(ExportError, match="forward against its decoder stack"):
        StackAdapter(scaled, gen.DecoderStackCall, check_ids=ids[:, :8])


class _LastLogitsOf(torch.nn.Module):
    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, ids):
        return self.model(ids, use_cache=False, logits_to_keep=1).logits


def test_a_stack_of_generated_layers_serves_a_causal_lms_last_token_forward():
    """One layer exported (DecoderLayerCall) runs every layer of the model: StackAdapter with the
    generated layer class calls the layers directly (LayerStack), matches the model's forward
    (float64 judgement) inside the bucket, and runs the model's own forward outside it; the rotary
    table it keeps gives, for a shorter forward, exactly the cos and sin the model computes."""
    from thunder_aot.examples.hf import tiny_llama
    from thunder_aot.integrations.transformers import LayerStack, StackAdapter

    text = export(
        ExportRequest(
            "thunder_aot.examples.hf:llama_decoder_layer",
            ("1x[S=1..64]x256, 1x[S]x64, 1x[S]x64",),
            backend="torch",
        ),
        verify=False,
    )
    gen = load_module_from_text(text, "gen_llama_layer_for_stack")
    model = tiny_llama()
    generator = torch.Generator().manual_seed(torch.seed() >> 1)
    adapter = StackAdapter(
        model, gen.DecoderLayerCall, check_ids=torch.randint(0, 512, (1, 64), generator=generator)
    )
    assert list(adapter.state_dict()) == list(model.state_dict())
    with torch.no_grad():
        for tokens in (1, 2, 37, 64):
            ids = torch.randint(0, 512, (1, tokens), generator=generator)
            got = adapter(ids, use_cache=False, logits_to_keep=1).logits
            check_outputs(_LastLogitsOf(model), [ids], got, f"layer stack at {tokens} tokens")
        adapter(torch.randint(0, 512, (1, 65), generator=generator), use_cache=False, logits_to_keep=1)
        stack = adapter.__dict__["generated"]
        x = torch.randn(1, 5, 256, generator=generator)
        for got, want in zip(stack.rotary(x), model.model.rotary_emb(x, torch.arange(5).unsqueeze(0))):
            assert torch.equal(got, want) and got.is_contiguous()
    assert dict(adapter.calls) == {"generated": 5, "outside every bucket": 1}  # the check, 4 sizes
    with pytest.raises(TypeError, match="generated from DecoderLayerCall"):
        LayerStack(model, gen.DecoderLayerCall.__mro__[1])


#: the small GPT-OSS causal LM's layer with its (additive, bf16) mask: windows of 8 inside the bucket
GPT_OSS_MASK_SHAPES = "1x[S=1..32]x256:bf16, 1x[S]x32:bf16, 1x[S]x32:bf16, 1x1x[S]x[S]:bf16"


def test_gpt_oss_mask_layers_serve_its_sliding_and_full_layers():
    """GPT-OSS's layers (eager attention with sinks, sliding windows of 8 on every other layer): one
    export of its first layer as DecoderLayerMaskCall serves every layer, both in the model's own
    forward (replace: the model builds the masks) and in a LayerStack (the stack builds them, per
    layer kind); both match the model (float64 judgement) at lengths inside and past the window,
    and a stack that gave the sliding layers full causal masks would not (by a tenth of the logits'
    range: MoE routing that flips between bf16 and float64 can widen the judgement's tolerance).
    DecoderLayerCall layers and a whole-stack export, which pass no mask (eager attention would see
    every key), are refused."""
    from transformers.models.gpt_oss.modeling_gpt_oss import GptOssDecoderLayer

    from thunder_aot.examples.hf import gpt_oss_small_causal_lm
    from thunder_aot.integrations.transformers import DecoderStackCall, LayerStack, StackAdapter

    messages = []
    text = export(
        ExportRequest(
            "thunder_aot.examples.hf:gpt_oss_small_decoder_layer_mask",
            (GPT_OSS_MASK_SHAPES,),
            backend="torch",
        ),
        verify=False,
        progress=messages.append,
    )
    assert any("sliding_window" in m or "more do not change the trace" in m for m in messages), messages
    gen = load_module_from_text(text, "gen_gpt_oss_mask_layer")
    model = gpt_oss_small_causal_lm()
    assert model.config.layer_types[:2] == ["sliding_attention", "full_attention"]
    generator = torch.Generator().manual_seed(torch.seed() >> 1)
    adapter = StackAdapter(
        model, gen.DecoderLayerMaskCall, check_ids=torch.randint(0, 512, (1, 32), generator=generator)
    )
    swapped = copy.deepcopy(model)
    replace(swapped, GptOssDecoderLayer, gen.DecoderLayerMaskCall)
    with torch.no_grad():
        for tokens in (1, 8, 9, 23):
            ids = torch.randint(0, 512, (1, tokens), generator=generator)
            # each judged against the float64 run that routes every token as the generated layers
            # did: bf16 routers that flip a near tie send a token to another expert, and float64's
            # own routing is no measure of that
            check_call(
                _LastLogitsOf(model), _LastLogitsOf(adapter), [ids], f"GPT-OSS layer stack at {tokens} tokens"
            )
            check_call(Logits(model), Logits(swapped), [ids], f"GPT-OSS with mask layers at {tokens} tokens")
        # without its mask an eager layer sees every key: the adapter gives the generated module that
        layer, hidden = model.model.layers[1], torch.randn(1, 12, 256, generator=generator).to(torch.bfloat16)
        rotary = model.model.rotary_emb(hidden, torch.arange(12).unsqueeze(0))
        check_call(
            _UnmaskedLayer(layer, rotary),
            _UnmaskedLayer(swapped.model.layers[1], rotary),
            [hidden],
            "GPT-OSS layer called without a mask",
        )
        stack = adapter.__dict__["generated"]
        stack.windows = [None] * len(stack.windows)  # every layer full: the sliding layers' answer changes
        stack._masks.clear()
        ids = torch.randint(0, 512, (1, 23), generator=generator)
        got = adapter(ids, use_cache=False, logits_to_keep=1).logits.float()
        want = model(ids, use_cache=False, logits_to_keep=1).logits.float()
        assert (got - want).abs().max() > 0.1 * want.abs().max()  # not a rounding difference
    assert dict(adapter.calls) == {"generated": 6}
    assert [dict(a.calls) for a in swapped.model.layers] == [
        {"generated": 4},
        {"generated": 5},
        {"generated": 4},
        {"generated": 4},
    ]
    with pytest.raises(TypeError, match="need their attention mask.*DecoderLayerMaskCall"):
        LayerStack(model, type("DecoderLayerCall", (), {}))
    with pytest.raises(TypeError, match="need their attention mask"):
        DecoderStackCall(model)


class _UnmaskedLayer(torch.nn.Module):
    def __init__(self, layer: torch.nn.Module, rotary) -> None:
        super().__init__()
        self.layer, self.rotary = layer, rotary

    def forward(self, hidden):
        return self.layer(hidden, attention_mask=None, position_embeddings=self.rotary)


def test_sdpa_layers_with_sliding_windows_get_bool_masks_in_the_stack():
    """Mistral's layers (sdpa, a sliding window of 8 on every layer): the stack of one exported mask
    layer gives them transformers' bool sliding-window mask and matches the model past the window."""
    from tests.hf_fixtures import mistral_small_causal_lm
    from thunder_aot.integrations.transformers import StackAdapter

    text = export(
        ExportRequest(
            "tests.hf_fixtures:mistral_small_decoder_layer_mask",
            ("1x[S=1..32]x256, 1x[S]x64, 1x[S]x64, 1x1x[S]x[S]:bool",),
            backend="torch",
        ),
        verify=False,
    )
    gen = load_module_from_text(text, "gen_mistral_mask_layer")
    model = mistral_small_causal_lm()
    generator = torch.Generator().manual_seed(torch.seed() >> 1)
    adapter = StackAdapter(
        model, gen.DecoderLayerMaskCall, check_ids=torch.randint(0, 512, (1, 32), generator=generator)
    )
    stack = adapter.__dict__["generated"]
    assert stack.windows == [8, 8] and stack.mask_dtype == torch.bool
    with torch.no_grad():
        for tokens in (1, 8, 9, 29):
            ids = torch.randint(0, 512, (1, tokens), generator=generator)
            check_outputs(
                _LastLogitsOf(model),
                [ids],
                adapter(ids, use_cache=False, logits_to_keep=1).logits,
                f"Mistral layer stack at {tokens} tokens",
            )
    assert dict(adapter.calls) == {"generated": 5}
