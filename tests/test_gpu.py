"""GPU checks of the nvFuser modules in generated/ (run on the GPU machine; skipped elsewhere)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from tests.examples import EXPORTS
from tests.helpers import check_autocast_calls, compare_at_every_bucket
from tests.kernel_pass_modules import COPIES, GATHERS, JOINS, ROUTINGS, TOPKS, VIEWS
from tests.view_modules import KERNELS as VIEW_KERNELS
from tests.view_modules import SOURCE_CALLS as VIEW_SOURCE_CALLS
from thunder_aot.frontend.resolve import resolve_module
from thunder_aot.shapes import parse_shapes
from thunder_aot.verify import bucket_inputs, load_module_from_text
from thunder_aot.verify.judge import check_call, check_chosen, check_outputs, judge, run_recording_choices

ROOT = Path(__file__).resolve().parent.parent
#: GPU tests (skipped without CUDA and nvFuser); most export on the GPU machine, so they trace
pytestmark = [pytest.mark.gpu, pytest.mark.traces]


def _load(stem: str, backend: str, name: str = ""):
    """Load generated/<stem>_<backend>.py; a new ``name`` gives a fresh copy (empty kernel caches)."""
    return load_module_from_text(
        (ROOT / "generated" / f"{stem}_{backend}.py").read_text(), name or f"gen_{stem}_{backend}"
    )


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
                check_outputs(module, [*inputs], got, f"{where} vs eager")
                judge(jitted(*inputs), got, None, f"{where} vs thunder.jit(nvFuser)")
                checked += 1
    assert checked >= 3
    # Thunder itself must have fused with nvFuser, or the second comparison proves nothing
    fusions = thunder.examine.get_fusions(thunder.last_traces(jitted)[-1])
    assert fusions, "thunder.jit formed no nvFuser fusion"


@pytest.mark.parametrize("backend", ["nvfuser", "triton"])
def test_a_call_under_cuda_autocast_runs_the_source_or_says_why_in_one_line(backend):
    """Under ``torch.autocast("cuda")`` the module's torch calls would hand its kernels other dtypes
    (a Triton compile error, an nvFuser internal assert, before runtime version 8): a module with a
    fallback runs its source's forward there (autocast's dtypes, eager's values), one without raises
    one line; outside autocast both run the kernels and match eager."""
    gen = _load("gated_mlp", backend, f"autocast_mlp_{backend}")
    source = resolve_module("thunder_aot.examples.blocks:gated_mlp").eval().cuda()
    x = torch.randn(5, 256, device="cuda", generator=torch.Generator(device="cuda").manual_seed(4))
    check_autocast_calls(
        getattr(gen, type(source).__name__),
        source,
        x,
        lambda out: check_outputs(source, [x], out, f"{backend} gated MLP outside autocast"),
    )


def test_generated_module_does_not_import_thunder():
    import subprocess

    code = (
        "import sys, torch; sys.path.insert(0, '.');"
        "import importlib.util as u;"
        "s = u.spec_from_file_location('g', 'generated/rmsnorm_nvfuser.py');"
        " g = u.module_from_spec(s); s.loader.exec_module(g);"
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
    _, last_inputs = compare_at_every_bucket(module, aot, gen, shapes, "cuda", f"{stem} (triton)")
    with torch.no_grad():
        for inputs in last_inputs:  # capture each bucket's last call in a CUDA graph, replay on new values
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
            check_outputs(module, [*fresh], out, f"{stem} (triton) CUDA graph replay")


_INDEXED = (
    VIEW_KERNELS
    + VIEW_SOURCE_CALLS
    + [g[:2] for g in GATHERS + JOINS + ROUTINGS[:1] + COPIES + VIEWS + TOPKS]
)


@pytest.mark.parametrize("source,shapes", _INDEXED, ids=[k[0].split(":")[1] for k in _INDEXED])
def test_triton_regions_with_views_on_the_gpu(source, shapes):
    """Index kernels (views, transposes, expands, strided slices, cats, reductions under views,
    gathers, joined regions, copies, transposed outputs as views and top-k kernels:
    tests/kernel_pass_modules.py) and a region run as its source's calls: compiled for the GPU, every
    output element written, equal to the source at every bucket's edges and inside (non-finite inputs
    included), and in a CUDA graph."""
    from thunder_aot.pipeline import export
    from thunder_aot.request import ExportRequest

    messages: list[str] = []
    text = export(ExportRequest(source, (shapes,), backend="triton"), progress=messages.append)
    assert any(m.startswith("verified:") for m in messages), messages
    assert not [m for m in messages if "verification refused" in m], messages  # no kernel given up on the GPU
    module = resolve_module(source).eval().cuda()
    gen = load_module_from_text(text, f"gpu_views_{source.split(':')[1]}")
    aot = getattr(gen, type(module).__name__).from_module(module)
    _, last_inputs = compare_at_every_bucket(module, aot, gen, shapes, "cuda", f"{source} (triton)")
    with torch.no_grad():
        static = [t.clone() for t in last_inputs[-1]]
        aot(*static)
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = aot(*static)
        for s in static:
            s.copy_(torch.randn_like(s.float()).to(s.dtype))
        graph.replay()
        torch.cuda.synchronize()
        replayed = out.clone() if isinstance(out, torch.Tensor) else type(out)(o.clone() for o in out)
        # a replay calls no top-k to watch: the picks of a plain call on the same inputs (a router's)
        _, picks = run_recording_choices(aot, static)
        check_chosen(module, static, replayed, picks, f"{source} (triton) CUDA graph replay")


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
            check_outputs(module, [x], got, f"{backend} on cuda:1 at {tokens}")


@pytest.mark.parametrize("backend", ["nvfuser", "triton"])
def test_an_input_on_another_gpu_than_the_first_is_refused(backend):
    """A kernel launched on x's GPU must not be handed another GPU's memory: cos or sin on the other
    GPU gets one clear error, also once the shape's guard is recorded (the guard checks every
    tensor's device), and the GPUs stay healthy."""
    if torch.cuda.device_count() < 2:
        pytest.skip("needs two GPUs (the nvidia-h200-x2 machine)")
    module = resolve_module("thunder_aot.examples.blocks:rotary_embedding").cuda()
    gen = _load("rotary", backend)
    aot = getattr(gen, type(module).__name__).from_module(module)
    x = torch.randn(1, 8, 20, 64, device="cuda:0", dtype=torch.bfloat16)
    cos, sin = (torch.randn(1, 1, 20, 64, device="cuda:0", dtype=torch.bfloat16) for _ in range(2))
    with torch.no_grad():
        check_call(module, aot, [x, cos, sin], f"{backend} rotary before")  # records the guard
        for what, args in (("cos", (x, cos.to("cuda:1"), sin)), ("sin", (x, cos, sin.to("cuda:1")))):
            with pytest.raises(ValueError) as info:
                aot(*args)
            assert f"{what} must be a contiguous CUDA tensor on x's device; got a cuda:1 tensor" in str(
                info.value
            )
        torch.cuda.synchronize(0)
        torch.cuda.synchronize(1)
        check_call(module, aot, [x, cos, sin], f"{backend} rotary after")


@pytest.mark.parametrize("backend", ["nvfuser", "triton"])
def test_first_calls_from_many_threads_at_once(backend):
    """Per-size FusionDefinitions / per-device Triton compiles are created lazily: eight threads
    making their first calls at once (four sizes, two threads each) all get right results."""
    import threading

    gen = _load("rmsnorm", backend, f"gen_rmsnorm_{backend}_threads")  # fresh, empty caches
    module = resolve_module("thunder_aot.examples.gpt_oss:rmsnorm").cuda()
    aot = gen.GptOssRMSNorm.from_module(module)
    sizes = [3, 77, 500, 1999] * 2
    inputs = [torch.randn(1, s, 2880, device="cuda", dtype=torch.bfloat16) for s in sizes]
    results: list = [None] * len(sizes)
    barrier = threading.Barrier(len(sizes))

    def call(i):
        barrier.wait()
        with torch.no_grad():
            results[i] = aot(inputs[i])
        torch.cuda.synchronize()

    threads = [threading.Thread(target=call, args=(i,)) for i in range(len(sizes))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    with torch.no_grad():
        for x, got in zip(inputs, results):
            assert got is not None, "a thread failed"
            check_outputs(module, [x], got, f"{backend} first call from a thread at {tuple(x.shape)}")


@pytest.mark.parametrize("backend", ["nvfuser", "triton"])
def test_unaligned_inputs(backend):
    """A contiguous view at an odd offset: Triton specialises pointers on 16-byte alignment, so an
    unaligned input needs its own compiled kernel; nvFuser checks vectorisation at run time."""
    gen = _load("rmsnorm", backend, f"gen_rmsnorm_{backend}_unaligned")
    module = resolve_module("thunder_aot.examples.gpt_oss:rmsnorm").cuda()
    aot = gen.GptOssRMSNorm.from_module(module)
    with torch.no_grad():
        for tokens in (15, 100, 2048):
            aligned = torch.randn(1, tokens, 2880, device="cuda", dtype=torch.bfloat16)
            buffer = torch.randn(tokens * 2880 + 1, device="cuda", dtype=torch.bfloat16)
            unaligned = buffer[1:].view(1, tokens, 2880)
            assert unaligned.is_contiguous() and unaligned.data_ptr() % 16
            for x in (aligned, unaligned, aligned):  # both variants, in turn
                check_call(
                    module, aot, [x], f"{backend} at {tokens} tokens, data_ptr % 16 = {x.data_ptr() % 16}"
                )


def _with_weight(aot, weight, x):
    saved = aot._parameters["weight"]
    aot._parameters["weight"] = torch.nn.Parameter(weight, requires_grad=False)
    try:
        with torch.no_grad():
            return aot(x)
    finally:
        aot._parameters["weight"] = saved


def _adversarial_calls(gen, aot):
    """(what, call, exception type, message fragment) for inputs that a raw kernel launch would
    trust: each must raise one clear error before any kernel runs."""
    x = torch.randn(1, 15, 2880, device="cuda", dtype=torch.bfloat16)
    weight = aot.weight.detach()

    def bf16(*shape):
        return torch.randn(*shape, device="cuda", dtype=torch.bfloat16)

    return [
        ("CPU input", lambda: aot(x.cpu()), ValueError, "contiguous CUDA tensor"),
        ("transposed view", lambda: aot(bf16(1, 2880, 15).transpose(1, 2)), ValueError, "contiguous"),
        ("strided slice", lambda: aot(bf16(1, 30, 2880)[:, ::2]), ValueError, "contiguous"),
        ("float16", lambda: aot(x.half()), gen.NoBucketError, "float16"),
        ("float32", lambda: aot(x.float()), gen.NoBucketError, "float32"),
        ("rank 2", lambda: aot(x[0]), gen.NoBucketError, "15x2880"),
        ("rank 4", lambda: aot(x[None]), gen.NoBucketError, "1x1x15x2880"),
        ("past the last bucket", lambda: aot(bf16(1, 2049, 2880)), gen.NoBucketError, "1x2049x2880"),
        ("zero tokens", lambda: aot(bf16(1, 0, 2880)), gen.NoBucketError, "1x0x2880"),
        ("hidden size", lambda: aot(bf16(1, 15, 2048)), gen.NoBucketError, "1x15x2048"),
        ("batch 2", lambda: aot(bf16(2, 15, 2880)), gen.NoBucketError, "2x15x2880"),
        ("not a tensor", lambda: aot([1.0, 2.0]), ValueError, "got a list"),
        ("two arguments", lambda: aot(x, x), TypeError, "argument"),
        ("requires grad", lambda: aot(x.clone().requires_grad_()), RuntimeError, "torch.no_grad"),
        (
            "fp16 weight",
            lambda: _with_weight(aot, weight.half(), x),
            ValueError,
            "float32 tensor of shape 2880",
        ),
        ("CPU weight", lambda: _with_weight(aot, weight.cpu(), x), ValueError, "hidden_states's device"),
        ("short weight", lambda: _with_weight(aot, weight[:2000], x), ValueError, "shape 2880"),
        (
            "strided weight",
            lambda: _with_weight(aot, torch.randn(5760, device="cuda")[::2], x),
            ValueError,
            "contiguous",
        ),
    ]


@pytest.mark.parametrize("backend", ["nvfuser", "triton"])
def test_adversarial_inputs_raise_one_clear_error_and_leave_the_gpu_healthy(backend):
    gen = _load("rmsnorm", backend)
    module = resolve_module("thunder_aot.examples.gpt_oss:rmsnorm").cuda()
    aot = gen.GptOssRMSNorm.from_module(module)
    for what, call, error, fragment in _adversarial_calls(gen, aot):
        with pytest.raises(error) as info:
            call()
        message = str(info.value)
        assert fragment in message, f"{what}: {message}"
        assert "\n" not in message.strip(), f"{what}: not one line: {message}"
        torch.cuda.synchronize()  # no kernel ran on bad input, so no asynchronous fault either
    x = torch.randn(1, 33, 2880, device="cuda", dtype=torch.bfloat16)
    with torch.no_grad():
        check_call(module, aot, [x], f"{backend} after the adversarial calls")


def test_triton_kernels_under_compute_sanitizer_memcheck():
    """Every Triton kernel of the bundled examples, at bucket edges and inside, aligned and not,
    under compute-sanitizer's memcheck (PyTorch's caching allocator off, so that an out-of-bounds
    access lands outside any allocation)."""
    import os
    import shutil
    import subprocess

    sanitizer = shutil.which("compute-sanitizer")
    if sanitizer is None:
        pytest.skip("compute-sanitizer is not on PATH")
    env = {**os.environ, "PYTORCH_NO_CUDA_MEMORY_CACHING": "1"}
    command = [sanitizer, "--tool", "memcheck", "--leak-check", "no", "--error-exitcode", "3"]
    out = subprocess.run(
        [*command, sys.executable, str(ROOT / "tests" / "triton_memcheck.py")],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    log = out.stdout + out.stderr
    # the first errors name the kernel and the module being run (the tail holds only the last ones)
    head = "\n".join(
        line for line in log.splitlines() if line.startswith("=========") or line.endswith(": ok")
    )
    assert out.returncode == 0 and "ERROR SUMMARY: 0 errors" in log, head[:6000] + "\n...\n" + log[-3000:]
    assert "calls checked" in log, log[-4000:]


def _fast_path_check(backend: str, *simulated: str) -> dict:
    import json
    import os
    import subprocess

    out = subprocess.run(
        [sys.executable, str(ROOT / "tests" / "fast_path_check.py"), "rmsnorm", backend, *simulated],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
        env={k: v for k, v in os.environ.items() if k not in ("TRITON_INTERPRET", "THUNDER_AOT_FAST_PATHS")},
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_triton_module_launches_through_the_c_launcher_on_the_tested_versions():
    result = _fast_path_check("triton")  # this machine's real torch and Triton
    assert result == {**result, "fast": True, "warnings": []}
    assert result["compiled"] >= 1 and result["checked"] >= 8


def test_triton_module_on_a_simulated_untested_triton_launches_publicly_and_matches():
    result = _fast_path_check("triton", "triton=3.7.0")
    assert result["fast"] is False and result["compiled"] == 0 and result["checked"] >= 8
    assert len(result["warnings"]) == 1 and "triton 3.7.0 is not a tested release" in result["warnings"][0]


def test_nvfuser_module_takes_the_executor_cache_on_the_tested_release():
    pytest.importorskip("nvfuser_direct")
    result = _fast_path_check("nvfuser")
    assert result["fast"] is True and result["warnings"] == []
    assert result["fusions"] >= 1 and result["public_execute"] is False and result["checked"] >= 8


def test_nvfuser_module_on_a_simulated_untested_release_calls_fd_execute_and_matches():
    pytest.importorskip("nvfuser_direct")
    result = _fast_path_check("nvfuser", "nvfuser_direct=0.3.0")
    assert result["fast"] is False and result["fusions"] >= 1 and result["public_execute"] is True
    assert result["checked"] >= 8
    assert (
        len(result["warnings"]) == 1
        and "nvfuser_direct 0.3.0 is not a tested release" in result["warnings"][0]
    )


_KERNEL_STORE_CHILD = """
import json, sys, time
import torch
t0 = time.perf_counter()
from tests.test_gpu import _load
from thunder_aot.frontend.resolve import resolve_module
from thunder_aot.verify.judge import check_outputs
source = resolve_module("thunder_aot.examples.gpt_oss:rmsnorm").eval().cuda()
module = _load("rmsnorm", "nvfuser").GptOssRMSNorm.from_module(source)
x = torch.randn(1, 568, 2880, device="cuda", dtype=torch.bfloat16)
torch.cuda.synchronize()
t1 = time.perf_counter()
with torch.no_grad():
    out = module(x)
    torch.cuda.synchronize()
    t2 = time.perf_counter()
    check_outputs(source, [x], out, "rmsnorm with the kernel store")
print(json.dumps({"first_call_s": t2 - t1, "import_s": t1 - t0}))
"""


def test_nvfuser_kernels_are_reused_by_a_fresh_process_through_the_store(tmp_path):
    """THUNDER_AOT_NVFUSER_KERNELS: the first process compiles the seed's RMSNorm and publishes its
    kernels; a second process finds them (it adds nothing: CURRENT stays) and matches eager. The
    first-call times of both are printed for the results log."""
    import json
    import os
    import subprocess

    from thunder_aot.runtime import nvfuser_kernels

    env = {**os.environ, nvfuser_kernels.VARIABLE: str(tmp_path / "store")}
    times = []
    for _ in range(2):
        done = subprocess.run(
            [sys.executable, "-c", _KERNEL_STORE_CHILD], cwd=ROOT, env=env, capture_output=True, text=True
        )
        assert done.returncode == 0, done.stderr[-3000:]
        times.append(json.loads(done.stdout.strip().splitlines()[-1]))
        (key,) = list((tmp_path / "store").iterdir())
        current = (key / "CURRENT").read_text().strip()
        if len(times) == 1:
            published = current
            db = key / current / "nvfuser_kernel_db"
            assert list(db.glob("*.cubin")) and (db / "db.csv").read_text().strip(), sorted(
                p.name for p in db.iterdir()
            )
    assert current == published, "the second process compiled kernels the first had stored"
    print(f"nvFuser kernel store, first call of the seed's RMSNorm at 1x568x2880: {times}")


@pytest.mark.parametrize("dynamic", [None, True])
def test_a_run_time_row_width_at_every_unit_eagerly_and_under_torch_compile(dynamic):
    """The softmax over S keys has a row kernel whose width S is a run-time size, passed as N_units
    and the constant N_UNIT (runtime.triton.width_unit). Widths of every unit (1, 2, 4, 8, 16) in
    one process, each launched directly and then again (the binaries are keyed by unit: a kernel
    compiled for one unit never runs a width of another), then the same module under torch.compile
    (automatic dynamic shapes, and dynamic=True; a unit of 1 there), all against the source and
    float64."""
    source = resolve_module("thunder_aot.examples.blocks:scaled_masked_softmax").eval().cuda()
    gen = _load("softmax", "triton", f"softmax_units_{dynamic}")
    aot = gen.ScaledMaskedSoftmax.from_module(source)
    generator = torch.Generator(device="cuda").manual_seed(0)

    def inputs(s):
        scores = torch.randn(1, 8, s, s, device="cuda", generator=generator).to(torch.bfloat16)
        mask = torch.randn(1, 1, s, s, device="cuda", generator=generator)
        return [scores, mask]

    widths = [496, 500, 502, 504, 505, 3, 8, 16, 6, 4]  # units 16, 4, 2, 8, 1, then small ones
    with torch.no_grad():
        for s in widths + widths:
            x = inputs(s)
            check_outputs(source, x, aot(*x), f"softmax (triton) at S={s}")
        units = {key % 32 for key in gen.program1_fusion0.binaries}
        assert units == {1, 2, 4, 8, 16}, sorted(gen.program1_fusion0.binaries)
        torch._dynamo.reset()
        compiled = torch.compile(aot, dynamic=dynamic)
        for s in (500, 505, 496):
            x = inputs(s)
            check_outputs(source, x, compiled(*x), f"softmax (triton) under torch.compile at S={s}")
