"""GPU checks of CUDA graphs around generated modules (runtime.graphs) and of the KV-cache layers
(run on the GPU machine; skipped elsewhere)."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch

from tests.helpers import greedy_tokens
from thunder_aot import replace
from thunder_aot.examples.gpt_oss import rmsnorm
from thunder_aot.verify import load_module_from_text
from thunder_aot.verify.judge import check_outputs

ROOT = Path(__file__).resolve().parent.parent
#: GPU tests (skipped without CUDA and nvFuser); most export on the GPU machine, so they trace
pytestmark = [pytest.mark.gpu, pytest.mark.traces]
BACKENDS = ["nvfuser", "triton"]


def _rmsnorm(backend: str):
    gen = load_module_from_text(
        (ROOT / "generated" / f"rmsnorm_{backend}.py").read_text(), f"graphs_rmsnorm_{backend}"
    )
    source = rmsnorm().cuda()
    return source, gen.GptOssRMSNorm.from_module(source)


def _x(tokens: int, seed: int) -> torch.Tensor:
    gen = torch.Generator(device="cuda").manual_seed(seed)
    return torch.randn(1, tokens, 2880, device="cuda", generator=gen).to(torch.bfloat16)


@pytest.mark.parametrize("backend", BACKENDS)
def test_graph_replays_match_eager_per_size_with_fresh_outputs(backend):
    source, module = _rmsnorm(backend)
    graphed = module.cuda_graphs()
    assert list(graphed.state_dict()) == list(module.state_dict())
    with torch.no_grad():
        for seed, tokens in enumerate((1, 15, 568, 15, 1, 2048, 568)):
            x = _x(tokens, seed)
            first = graphed(x)
            check_outputs(source, [x], first, f"{backend} graph replay at {tokens} tokens")
            second = graphed(_x(tokens, seed + 100))
            assert first.data_ptr() != second.data_ptr()  # fresh outputs: the first is still the caller's
            check_outputs(source, [x], first, f"{backend} first output after a second replay")
    assert graphed.graphs == 4 and set(graphed.memory) == {((1, n, 2880),) for n in (1, 15, 568, 2048)}


@pytest.mark.parametrize("backend", BACKENDS)
def test_static_outputs_are_the_graphs_buffers_and_weights_are_read_in_place(backend):
    source, module = _rmsnorm(backend)
    graphed = module.cuda_graphs(outputs="static")
    with torch.no_grad():
        a, b = _x(15, 1), _x(15, 2)
        out_a = graphed(a)
        kept = out_a.clone()
        out_b = graphed(b)
        assert out_a.data_ptr() == out_b.data_ptr()  # the next call of the size overwrote it
        check_outputs(source, [b], out_b, f"{backend} static output")
        assert not torch.equal(kept, out_b)
        static = graphed.static_inputs(a)
        static[0].copy_(a)
        check_outputs(source, [a], graphed(*static), f"{backend} inputs written into the static buffers")
        source.weight.mul_(-2.0)  # in place: the graph reads the new weights
        check_outputs(source, [a], graphed(a), f"{backend} after an in-place weight update")


@pytest.mark.parametrize("backend", BACKENDS)
def test_generated_module_inside_a_callers_graph_capture(backend):
    """SGLang's way: the caller captures its own graph around the generated module."""
    source, module = _rmsnorm(backend)
    graphed = module.cuda_graphs()
    static_x = _x(16, 3)
    with torch.no_grad():
        assert graphed.warmup(s0=[16]) >= 1 and graphed.graphs >= 1
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            module(static_x)  # first call outside the capture: compiles
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = graphed(static_x) * 1.0
        for seed in (4, 5):
            static_x.copy_(_x(16, seed))
            graph.replay()
            check_outputs(source, [static_x.clone()], out, f"{backend} inside the caller's graph")


@pytest.mark.parametrize("backend", BACKENDS)
def test_decoder_layers_replayed_from_graphs_keep_a_models_logits(backend):
    """Whole layers (no cache) through replace(..., cuda_graphs=...) in a transformers model."""
    from transformers.models.llama.modeling_llama import LlamaDecoderLayer

    from tests.helpers import Logits
    from thunder_aot.examples.hf import tiny_llama
    from thunder_aot.pipeline import export
    from thunder_aot.request import ExportRequest

    text = export(
        ExportRequest(
            "thunder_aot.examples.hf:llama_decoder_layer",
            ("1x[S=1..64]x256, 1x[S]x64, 1x[S]x64",),
            backend=backend,
        ),
        verify=False,
    )
    gen = load_module_from_text(text, f"graphs_layer_{backend}")
    model = tiny_llama().cuda()
    original = copy.deepcopy(model)
    replace(model, LlamaDecoderLayer, gen.DecoderLayerCall, cuda_graphs="fresh")
    generator = torch.Generator().manual_seed(torch.seed() >> 1)
    with torch.no_grad():
        for tokens in (1, 9, 64, 9):
            ids = torch.randint(0, 512, (1, tokens), generator=generator).cuda()
            check_outputs(
                Logits(original), [ids], Logits(model)(ids), f"{backend} graphed layers at {tokens} tokens"
            )
    assert [layer.calls["generated"] for layer in model.model.layers] == [4, 4]
    assert [layer.__dict__["generated"].graphs for layer in model.model.layers] == [3, 3]


@pytest.mark.parametrize("backend", BACKENDS)
def test_kv_cache_layers_generate_transformers_tokens_on_the_gpu(backend):
    """fp32 greedy generation of 64 tokens through the KV-cache layers: transformers' own tokens."""
    from transformers.models.llama.modeling_llama import LlamaDecoderLayer

    from tests.examples import LLAMA_CACHE_SHAPES
    from thunder_aot.examples.hf import tiny_llama
    from thunder_aot.pipeline import export
    from thunder_aot.request import ExportRequest

    messages: list[str] = []
    text = export(
        ExportRequest(
            "thunder_aot.examples.hf:llama_decoder_layer_cache", (LLAMA_CACHE_SHAPES,), backend=backend
        ),
        progress=messages.append,
    )
    assert any(m.startswith("verified:") for m in messages), messages
    gen = load_module_from_text(text, f"cache_layer_{backend}")
    model = tiny_llama().cuda()
    original = copy.deepcopy(model)
    replace(model, LlamaDecoderLayer, gen.DecoderLayerCacheCall)
    prompt = torch.randint(0, 512, (1, 12), generator=torch.Generator().manual_seed(torch.seed() >> 1)).cuda()
    want, got = greedy_tokens(original, prompt, 64), greedy_tokens(model, prompt, 64)
    assert torch.equal(got, want)
    assert [dict(layer.calls) for layer in model.model.layers] == [{"generated": 64}] * 2


@pytest.mark.parametrize("backend", BACKENDS)
def test_graphed_static_decoder_logits_judged_against_float64_in_bf16(backend):
    """bf16: a tiny Llama's static-cache layer exported per backend, the decode step one CUDA graph;
    a left-padded batch of two, the prefill's and 16 steps' logits each judged against the model in
    float64 over the same tokens (judge_steps), every layer call the generated module's."""
    from thunder_aot import export
    from thunder_aot.examples.hf import static_cache_shapes, tiny_llama
    from thunder_aot.integrations.transformers import DecoderLayerStaticCacheCall, StaticDecoder, judge_steps

    model = tiny_llama().eval().to(torch.bfloat16).cuda()
    shapes = static_cache_shapes(256, 2, 64, "bf16", batch=2, prefill=16, max_len=64)
    text = export(DecoderLayerStaticCacheCall(model.model.layers[0]), shapes, backend=backend)
    layer_class = load_module_from_text(text, f"static_layer_bf16_{backend}").DecoderLayerStaticCacheCall
    decoder = StaticDecoder(model, layer_class, max_len=64, batch_size=2)
    assert decoder.cuda_graph and all(isinstance(layer, layer_class) for layer in decoder.layers)
    ids = torch.randint(0, 512, (2, 12), generator=torch.Generator().manual_seed(torch.seed() >> 1)).cuda()
    mask = torch.ones_like(ids)
    mask[1, :5] = 0
    assert judge_steps(decoder, ids, 16, mask) == 17
    assert decoder._graph is not None


def test_export_of_a_module_on_the_gpu_traces_a_cpu_copy_and_leaves_the_module_there():
    from thunder_aot import export

    source = rmsnorm().cuda()
    messages: list[str] = []
    text = export(source, "1x[1..16]x2880:bf16", backend="triton", progress=messages.append)
    assert any("export traces a copy on the CPU" in m for m in messages), messages
    assert source.weight.is_cuda
    gen = load_module_from_text(text, "gpu_instance_export")
    x = _x(16, 9)
    with torch.no_grad():
        check_outputs(source, [x], gen.GptOssRMSNorm.from_module(source)(x), "exported from a CUDA module")
