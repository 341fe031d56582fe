"""GPU checks of the nvFuser modules in generated/ (run on the GPU machine; skipped elsewhere)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from tests.examples import EXPORTS
from tests.helpers import poisoned_outputs
from thunder_aot.resolve import resolve_module
from thunder_aot.shapes import parse_shapes
from thunder_aot.verify import bucket_inputs, compare, load_module_from_text

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.gpu


def _load(stem: str, backend: str):
    return load_module_from_text((ROOT / "generated" / f"{stem}_{backend}.py").read_text(), f"gen_{stem}_{backend}")


@pytest.mark.parametrize("stem,source,shapes", EXPORTS, ids=[e[0] for e in EXPORTS])
def test_nvfuser_matches_eager_and_thunder(stem, source, shapes):
    import thunder
    import thunder.examine

    module = resolve_module(source).eval().cuda()
    gen = _load(stem, "nvfuser")
    aot = getattr(gen, type(module).__name__).from_module(module)
    jitted = thunder.jit(module)
    generator = torch.Generator().manual_seed(torch.seed() >> 1)
    checked = 0
    with torch.no_grad():
        for bucket in parse_shapes(shapes):
            for env, inputs in bucket_inputs(bucket, "cuda", generator):
                where = f"{stem} at {env or [tuple(t.shape) for t in inputs]}"
                got = aot(*inputs)
                compare(module(*inputs), got, f"{where} vs eager")
                compare(jitted(*inputs), got, f"{where} vs thunder.jit(nvFuser)")
                checked += 1
    assert checked >= 3
    # Thunder itself must have fused with nvFuser, or the second comparison proves nothing
    fusions = thunder.examine.get_fusions(thunder.last_traces(jitted)[-1])
    assert fusions, "thunder.jit formed no nvFuser fusion"


def test_generated_module_does_not_import_thunder():
    import subprocess

    code = (
        "import sys, torch; sys.path.insert(0, '.');"
        "import importlib.util as u;"
        "s = u.spec_from_file_location('g', 'generated/rmsnorm_nvfuser.py'); g = u.module_from_spec(s); s.loader.exec_module(g);"
        "from thunder_aot.examples.gpt_oss import rmsnorm;"
        "m = g.GptOssRMSNorm.from_module(rmsnorm().cuda());"
        "y = m(torch.randn(1, 7, 2880, device='cuda', dtype=torch.bfloat16));"
        "assert 'thunder' not in sys.modules, sorted(k for k in sys.modules if 'thunder' in k);"
        "print('ok', tuple(y.shape))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "ok (1, 7, 2880)" in out.stdout


def test_wrong_device_and_layout_raise_one_clear_error():
    gen = _load("rmsnorm", "nvfuser")
    module = resolve_module("thunder_aot.examples.gpt_oss:rmsnorm").cuda()
    aot = gen.GptOssRMSNorm.from_module(module)
    with pytest.raises(ValueError, match="contiguous CUDA tensor"):
        aot(torch.randn(1, 15, 2880, dtype=torch.bfloat16))
    with pytest.raises(ValueError, match="contiguous CUDA tensor"):
        aot(torch.randn(1, 2880, 15, device="cuda", dtype=torch.bfloat16).transpose(1, 2))
    with pytest.raises(gen.NoBucketError, match="1x4096x2880"):
        aot(torch.randn(1, 4096, 2880, device="cuda", dtype=torch.bfloat16))
    with pytest.raises(gen.NoBucketError, match="float16"):
        aot(torch.randn(1, 15, 2880, device="cuda", dtype=torch.float16))


@pytest.mark.parametrize("stem,source,shapes", EXPORTS, ids=[e[0] for e in EXPORTS])
def test_triton_matches_eager_writes_every_element_and_replays_in_a_cuda_graph(stem, source, shapes):
    module = resolve_module(source).eval().cuda()
    gen = _load(stem, "triton")
    aot = getattr(gen, type(module).__name__).from_module(module)
    generator = torch.Generator().manual_seed(torch.seed() >> 1)
    with torch.no_grad():
        for bucket in parse_shapes(shapes):
            for env, inputs in bucket_inputs(bucket, "cuda", generator):
                expected = module(*inputs)
                with poisoned_outputs():
                    got = aot(*inputs)
                compare(expected, got, f"{stem} (triton) at {env}")
            # capture the last inputs' call in a CUDA graph, replay on new values
            static = [t.clone() for t in inputs]
            aot(*static)
            torch.cuda.synchronize()
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                out = aot(*static)
            fresh = [torch.randn_like(t.float()).to(t.dtype) for t in static]
            for s, f in zip(static, fresh):
                s.copy_(f)
            graph.replay()
            torch.cuda.synchronize()
            compare(module(*fresh), out, f"{stem} (triton) CUDA graph replay")


@pytest.mark.parametrize("backend", ["nvfuser", "triton"])
def test_inputs_on_the_second_gpu(backend):
    if torch.cuda.device_count() < 2:
        pytest.skip("needs two GPUs (the nvidia-h200-x2 machine)")
    module = resolve_module("thunder_aot.examples.gpt_oss:rmsnorm").to("cuda:1")
    aot = _load("rmsnorm", backend).GptOssRMSNorm.from_module(module)
    for tokens in (15, 100):
        x = torch.randn(1, tokens, 2880, device="cuda:1", dtype=torch.bfloat16)
        with torch.no_grad():
            got = aot(x)
            assert got.device == x.device
            compare(module(x), got, f"{backend} on cuda:1 at {tokens}")
