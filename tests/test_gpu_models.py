"""Issue 6 on the GPU machine: transformers' own submodules exported with the nvFuser and Triton
backends and checked against eager; those modules swapped into a transformers model, run eagerly,
captured in a CUDA graph, and under torch.compile (skipped without CUDA and nvFuser)."""

from __future__ import annotations

import copy

import pytest
import torch

from tests.examples import HF_SUBMODULES
from tests.helpers import Logits
from thunder_aot import replace
from thunder_aot.pipeline import export
from thunder_aot.request import ExportRequest
from thunder_aot.verify import load_module_from_text
from thunder_aot.verify.judge import check_chosen, check_outputs, run_recording_choices

#: GPU tests (skipped without CUDA and nvFuser); most export on the GPU machine, so they trace
pytestmark = [pytest.mark.gpu, pytest.mark.traces]
pytest.importorskip("transformers")

BACKENDS = ["nvfuser", "triton"]


def _generated_llama_rmsnorm(backend: str):
    # export verifies the module against the source on fresh random inputs on the GPU
    text = export(
        ExportRequest("thunder_aot.examples.hf:llama_rmsnorm", ("1x[1..64]x256:fp32",), backend=backend)
    )
    return load_module_from_text(text, f"gpu_llama_rmsnorm_{backend}").LlamaRMSNorm


def _models(backend: str):
    from transformers.models.llama.modeling_llama import LlamaRMSNorm

    from thunder_aot.examples.hf import tiny_llama

    model = tiny_llama().cuda()
    original = copy.deepcopy(model)
    assert len(replace(model, LlamaRMSNorm, _generated_llama_rmsnorm(backend))) == 5
    return original, model


def _ids(tokens: int) -> torch.Tensor:
    return torch.randint(0, 512, (1, tokens), device="cuda")


def _logits(model, ids):
    return Logits(model)(ids)


def _capture(fn, static_inputs):
    """Warm up on a side stream, then capture ``fn(*static_inputs)`` in a CUDA graph."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(2):
            fn(*static_inputs)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = fn(*static_inputs)
    return graph, out


@pytest.mark.parametrize("backend", BACKENDS)
def test_replaced_llama_matches_on_the_gpu(backend):
    original, model = _models(backend)
    with torch.no_grad():
        for tokens in (1, 37, 64):
            ids = _ids(tokens)
            check_outputs(
                Logits(original), [ids], _logits(model, ids), f"tiny llama ({backend}) at {tokens} tokens"
            )


@pytest.mark.parametrize("backend", BACKENDS)
def test_replaced_llama_in_a_cuda_graph(backend):
    original, model = _models(backend)
    static = _ids(29)
    with torch.no_grad():
        try:
            _capture(lambda ids: _logits(original, ids), [static.clone()])
        except Exception as e:  # transformers' own forward, not ours
            pytest.skip(f"transformers' Llama forward cannot be captured here: {type(e).__name__}: {e}")
        graph, out = _capture(lambda ids: _logits(model, ids), [static])
        for _ in range(3):
            static.copy_(_ids(29))
            graph.replay()
            torch.cuda.synchronize()
            check_outputs(Logits(original), [static], out, f"tiny llama ({backend}) CUDA graph replay")


@pytest.mark.parametrize("backend", BACKENDS)
def test_generated_module_in_a_plain_model_captured_in_a_cuda_graph(backend):
    """A plain PyTorch model (linear, generated RMSNorm, linear) captured whole, replayed on new inputs."""
    norm = _generated_llama_rmsnorm(backend)
    from thunder_aot.examples.hf import llama_rmsnorm

    source_norm = llama_rmsnorm().cuda()
    torch.manual_seed(0)
    original = (
        torch.nn.Sequential(torch.nn.Linear(256, 256), source_norm, torch.nn.Linear(256, 64)).cuda().eval()
    )
    model = copy.deepcopy(original)
    model[1] = norm.from_module(model[1])
    static = torch.randn(1, 40, 256, device="cuda")
    with torch.no_grad():
        graph, out = _capture(model, [static])
        for _ in range(3):
            static.copy_(torch.randn(1, 40, 256, device="cuda"))
            graph.replay()
            torch.cuda.synchronize()
            check_outputs(original, [static], out, f"Sequential with a {backend} RMSNorm, CUDA graph replay")


@pytest.mark.parametrize("backend", BACKENDS)
def test_replaced_llama_under_torch_compile(backend):
    """torch.compile (inductor) over a model holding generated modules: dynamo traces the checks and
    dispatch, and breaks the graph at the nvFuser execute / Triton launch, which run as they are."""
    original, model = _models(backend)
    compiled = torch.compile(model)
    with torch.no_grad():
        for tokens in (5, 48):
            ids = _ids(tokens)
            check_outputs(
                Logits(original),
                [ids],
                _logits(compiled, ids),
                f"compiled tiny llama ({backend}) at {tokens} tokens",
            )


@pytest.mark.parametrize("backend", BACKENDS)
def test_replaced_llama_on_the_second_gpu(backend):
    if torch.cuda.device_count() < 2:
        pytest.skip("needs two GPUs (the nvidia-h200-x2 machine)")
    original, model = _models(backend)
    original, model = original.to("cuda:1"), model.to("cuda:1")
    with torch.no_grad():
        ids = _ids(17).to("cuda:1")
        got = _logits(model, ids)
        assert got.device == torch.device("cuda:1")
        check_outputs(Logits(original), [ids], got, f"tiny llama ({backend}) on cuda:1")


#: layers whose nvFuser region verification refuses on the GPU machine (they export, as their source's
#: torch calls there, and verify): the region's values are wrong, not rounded (H100, c698d4d)
NVFUSER_REFUSED = {
    "tests.hf_fixtures:cohere_decoder_layer": (
        "nvFuser's region of Cohere's layer (fp32) errs 0.016 RMS / 0.098 largest at S=2 against "
        "float64, eager 2.3e-07; not yet found why. Suspect: per-head LayerNorms on q and k (use_qk_norm), "
        "which only this and StableLM's fixture have (per-head RMSNorms, Qwen3 and Gemma 3, pass)"
    ),
    "tests.hf_fixtures:stablelm_decoder_layer": (
        "nvFuser's region of StableLM's layer (fp32) is refused by verification as Cohere's is; not yet "
        "found why. Suspect: its per-head LayerNorms on q and k (qk_layernorm), as Cohere's"
    ),
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(
    "source,shapes,unfused", HF_SUBMODULES, ids=[m[0].split(":")[1] for m in HF_SUBMODULES]
)
def test_real_submodule_matches_eager_on_the_gpu(source, shapes, unfused, backend, request):
    """Export verifies on the GPU: the generated module against the source module in eager, on fresh
    random inputs at each bucket's edges and inside; every region is a kernel, and with nvFuser's
    claims only matmuls and views (``unfused``) stay torch calls."""
    from tests.test_real_models import _unfused_calls

    if backend == "nvfuser" and source in NVFUSER_REFUSED:
        request.applymarker(pytest.mark.xfail(reason=NVFUSER_REFUSED[source], strict=False))

    messages: list[str] = []
    export(ExportRequest(source, (shapes,), backend=backend), progress=messages.append)
    assert any(m.startswith("verified:") for m in messages), messages
    assert not [m for m in messages if "kernel for" in m], messages  # every region a kernel
    if backend == "nvfuser":
        said = [m for m in messages if m.startswith("not fused")]
        assert not said or _unfused_calls(said[0]) <= unfused, said


@pytest.mark.parametrize("backend", BACKENDS)
def test_gpt_oss_mask_layer_stack_on_the_gpu_with_cuda_graphs(backend):
    """The small GPT-OSS causal LM (eager attention with sinks, sliding windows of 8, grouped-mm
    experts) served by a stack of one exported mask layer: per call, with per-layer CUDA graphs,
    and captured whole by the caller (the stack makes its masks inside the capture), judged
    against the model at lengths inside and past the window."""
    from tests.test_real_models import GPT_OSS_MASK_SHAPES
    from thunder_aot.examples.hf import gpt_oss_small_causal_lm
    from thunder_aot.integrations.transformers import LastTokenLogits, StackAdapter

    text = export(
        ExportRequest(
            "thunder_aot.examples.hf:gpt_oss_small_decoder_layer_mask",
            (GPT_OSS_MASK_SHAPES,),
            backend=backend,
        )
    )
    gen = load_module_from_text(text, f"gpu_gpt_oss_mask_{backend}")
    model = gpt_oss_small_causal_lm().cuda()
    source = LastTokenLogits(model)
    plain = StackAdapter(model, gen.DecoderLayerMaskCall)

    def picks(ids):  # the experts the stack routes to (a graph's replay calls no topk to watch)
        return run_recording_choices(lambda i: plain(i, use_cache=False, logits_to_keep=1).logits, [ids])[1]

    # each judged against the float64 run that routes as it did: a near tie between two experts'
    # logits is a discrete choice, not a rounding error (thunder_aot.verify.judge)
    with torch.no_grad():
        for graphs in (None, "static"):
            adapter = StackAdapter(model, gen.DecoderLayerMaskCall, cuda_graphs=graphs)
            for tokens in (1, 9, 23, 32):
                ids = _ids(tokens)
                got = adapter(ids, use_cache=False, logits_to_keep=1).logits
                check_chosen(
                    source, [ids], got, picks(ids), f"GPT-OSS stack ({backend}, graphs {graphs}) at {tokens}"
                )
            assert dict(adapter.calls) == {"generated": 4}
        adapter = StackAdapter(model, gen.DecoderLayerMaskCall)
        static = _ids(23)
        graph, out = _capture(lambda ids: adapter(ids, use_cache=False, logits_to_keep=1).logits, [static])
        for _ in range(2):
            static.copy_(_ids(23))
            graph.replay()
            torch.cuda.synchronize()
            check_chosen(source, [static], out, picks(static), f"GPT-OSS stack ({backend}) captured whole")


@pytest.mark.parametrize(
    "factory", ["qwen3_moe_block", "mixtral_moe_block", "qwen2_moe_block", "olmoe_block"]
)
def test_moe_blocks_route_in_one_program_on_the_gpu(factory):
    """Every transformers MoE family's block exported with Triton verifies on the GPU (export judges
    each call against the float64 run that routes as it did), its bookkeeping one routing program;
    then captured in a CUDA graph and replayed on fresh tokens, judged with the picks of a plain call."""
    messages: list[str] = []
    text = export(
        ExportRequest(f"thunder_aot.examples.hf:{factory}", ("1x[S=1..512]x256:bf16",), backend="triton"),
        progress=messages.append,
    )
    assert any(m.startswith("verified:") for m in messages), messages
    assert "_routing.launch(" in text
    gen = load_module_from_text(text, f"gpu_{factory}")
    from thunder_aot.examples import hf

    source = getattr(hf, factory)().cuda()
    (name,) = [n for n in dir(gen) if n.endswith("SparseMoeBlock")]
    block = getattr(gen, name).from_module(source)
    seeds = torch.Generator(device="cuda").manual_seed(1234)
    with torch.no_grad():
        for tokens in (1, 77, 512):
            static = torch.randn(1, tokens, 256, device="cuda", dtype=torch.bfloat16, generator=seeds)
            graph, out = _capture(block, [static])
            for _ in range(2):
                static.copy_(torch.randn(static.shape, device="cuda", dtype=static.dtype, generator=seeds))
                graph.replay()
                torch.cuda.synchronize()
                picks = run_recording_choices(block, [static])[1]
                check_chosen(source, [static], out, picks, f"{factory} (triton) replayed at {tokens}")
