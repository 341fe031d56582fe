"""generated/ is current, and its torch-backend modules compute what their sources compute."""

from __future__ import annotations

import ast
import linecache
import subprocess
import sys

import pytest
import torch

from tests.examples import BACKENDS, EXPORTS
from tests.helpers import ROOT, run_cli
from thunder_aot.frontend.resolve import resolve_module
from thunder_aot.shapes import parse_shapes
from thunder_aot.verify import bucket_inputs, load_module_from_text
from thunder_aot.verify.judge import check_call, judge, upcast64

IDS = [e[0] for e in EXPORTS]


def _load(stem: str, backend: str):
    return load_module_from_text(
        (ROOT / "generated" / f"{stem}_{backend}.py").read_text(), f"gen_{stem}_{backend}"
    )


def _assigned(stem: str, backend: str, name: str) -> str:
    """The source of the module-level assignment to ``name`` in a golden file."""
    tree = ast.parse((ROOT / "generated" / f"{stem}_{backend}.py").read_text())
    (value,) = [n.value for n in tree.body if isinstance(n, ast.Assign) and ast.unparse(n.targets[0]) == name]
    return ast.unparse(value)


def test_generated_dir_holds_every_example_for_every_backend():
    """Golden files: one per bundled example and backend, nothing else. That each regenerates byte
    for byte is ``thunder-aot check generated``, which CI's lint step runs (.ci/run, make lint)."""
    expected = {f"{stem}_{backend}.py" for stem, _, _ in EXPORTS for backend in BACKENDS}
    assert {p.name for p in (ROOT / "generated").glob("*.py")} - {"__init__.py"} == expected


@pytest.mark.parametrize("stem,source,shapes", EXPORTS, ids=IDS)
def test_torch_backend_matches_source_at_edges_and_inside(stem, source, shapes):
    module = resolve_module(source).eval()
    gen = _load(stem, "torch")
    aot = getattr(gen, type(module).__name__).from_module(module)
    generator = torch.Generator().manual_seed(torch.seed() >> 1)  # fresh inputs every run
    checked = 0
    with torch.no_grad():
        for bucket in parse_shapes(shapes):
            for env, inputs in bucket_inputs(bucket, "cpu", generator):
                assert all(t.abs().sum() > 0 for t in inputs if t.is_floating_point())
                check_call(module, aot, [*inputs], f"{stem} at {env}")
                checked += 1
    assert checked >= 3


@pytest.mark.parametrize("stem,source,shapes", EXPORTS, ids=IDS)
def test_state_dict_compatible_and_from_module_shares(stem, source, shapes):
    module = resolve_module(source).eval()
    cls = getattr(_load(stem, "torch"), type(module).__name__)
    fresh = cls()
    assert fresh.state_dict().keys() == module.state_dict().keys()
    fresh.load_state_dict(module.state_dict())
    shared = cls.from_module(module)
    for name, tensor in module.state_dict().items():
        assert shared.state_dict()[name].data_ptr() == tensor.data_ptr(), name
    bucket, *_ = parse_shapes(shapes)
    _, inputs = next(bucket_inputs(bucket, "cpu", torch.Generator().manual_seed(3)))
    with torch.no_grad():
        check_call(module, fresh, [*inputs], f"{stem} after load_state_dict")


def test_shape_outside_every_bucket_lists_the_buckets():
    gen = _load("rmsnorm", "torch")
    aot = gen.GptOssRMSNorm.from_module(resolve_module("thunder_aot.examples.gpt_oss:rmsnorm"))
    with pytest.raises(gen.NoBucketError) as info:
        aot(torch.randn(1, 4096, 2880, dtype=torch.bfloat16))
    message = str(info.value)
    assert "hidden_states 1x4096x2880:bfloat16" in message and "1x[s0=1..2048]x2880:bfloat16" in message
    with pytest.raises(gen.NoBucketError, match="float32"):
        aot(torch.randn(1, 15, 2880))
    with pytest.raises(gen.NoBucketError, match="1x15"):
        aot(torch.randn(1, 15, dtype=torch.bfloat16))


def _programs_run(gen, *args) -> set[int]:
    """Which programs' branches of ``forward`` ran lines (each branch opens with ``if program == <i>:``
    and ends at the next statement of forward's own indentation)."""
    lines = linecache.getlines(gen.forward.__code__.co_filename)
    bucket_of, current = {}, None
    for number, line in enumerate(lines, start=1):
        if line.strip().startswith("if program == "):
            current = int(line.split()[3].rstrip(":"))
        elif line.strip() and len(line) - len(line.lstrip()) <= 4:  # the next bucket's `if`, or the end
            current = None
        bucket_of[number] = current
    ran = set()

    def trace(frame, event, arg):
        if frame.f_code is gen.forward.__code__:
            if event == "line" and bucket_of.get(frame.f_lineno) is not None:
                ran.add(bucket_of[frame.f_lineno])
            return trace
        return None

    sys.settrace(trace)
    try:
        gen.forward(*args)
    finally:
        sys.settrace(None)
    return ran


def test_buckets_that_share_a_program_run_one_branch():
    """The seed's exact buckets trace to the dynamic bucket's program at their sizes: all four
    buckets dispatch to one program, written once (the header says which bucket runs which)."""
    gen = _load("rmsnorm", "torch")
    weight = torch.ones(2880)
    assert _programs_run(gen, torch.randn(1, 15, 2880, dtype=torch.bfloat16), weight) == {0}
    assert _programs_run(gen, torch.randn(1, 16, 2880, dtype=torch.bfloat16), weight) == {0}
    text = (ROOT / "generated" / "rmsnorm_torch.py").read_text()
    assert text.count("if program == ") == 1 and text.count(" -> 0\n") == 4


@pytest.mark.traces
def test_exact_buckets_outside_a_range_share_one_program_over_their_sizes(tmp_path):
    """Exact buckets whose traces differ only in sizes get one program with a dim for the sizes
    that differ; the generated module still serves those shapes only."""
    out = tmp_path / "exact.py"
    result = run_cli(
        "export",
        "thunder_aot.examples.gpt_oss:rmsnorm",
        "--shapes",
        "1x3x2880:bf16; 1x5x2880:bf16",
        "--backend",
        "torch",
        "--out",
        str(out),
    )
    assert result.returncode == 0, result.stderr
    text = out.read_text()
    assert text.count("if program == ") == 1
    gen = load_module_from_text(text, "gen_exact_shared")
    source = resolve_module("thunder_aot.examples.gpt_oss:rmsnorm")
    aot = gen.GptOssRMSNorm.from_module(source)
    with torch.no_grad():
        for s in (3, 5):
            x = torch.randn(1, s, 2880, dtype=torch.bfloat16)
            check_call(source, aot, [x], f"exact bucket at {s}")
        with pytest.raises(gen.NoBucketError):
            aot(torch.randn(1, 4, 2880, dtype=torch.bfloat16))


def test_generated_module_imports_torch_and_the_runtime_only():
    code = (
        "import sys, torch, importlib.util as u;"
        "s = u.spec_from_file_location('g', 'generated/residual_rmsnorm_torch.py');"
        " g = u.module_from_spec(s);"
        "s.loader.exec_module(g);"
        "m = g.ResidualRMSNorm(); m.norm.weight.data.fill_(1.0);"
        "x = torch.randn(1, 9, 2880, dtype=torch.bfloat16);"
        " r = torch.randn(1, 9, 2880, dtype=torch.bfloat16);"
        "y, res = m(x, r);"
        "ours = sorted(k for k in sys.modules if 'thunder' in k or k in ('jinja2', 'black'));"
        "assert ours[:2] == ['thunder_aot', 'thunder_aot.runtime'], ours;"
        "assert all(k.startswith('thunder_aot.runtime.') for k in ours[2:]), ours;"
        "print('ok', tuple(y.shape), tuple(res.shape))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "ok (1, 9, 2880) (1, 9, 2880)" in out.stdout


@pytest.mark.parametrize("stem", IDS)
def test_nvfuser_module_structure(stem):
    """What CI can check of the nvFuser modules without nvFuser: they parse, import torch, nvFuser
    and the runtime only, define every region's FusionDefinition once (per size for dynamic
    buckets), and execute it inline in forward."""
    text = (ROOT / "generated" / f"{stem}_nvfuser.py").read_text()
    tree = ast.parse(text)
    modules = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert modules == {"__future__", "thunder_aot.runtime", "thunder_aot.runtime.nvfuser"}
    assert (
        'FusionDefinition, DataType = frontend("nvfuser_direct")' in text
    )  # the library, through the runtime
    plain = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    assert plain == {"torch"}  # no `import thunder`, nothing else either
    defines = [n.name for n in tree.body if isinstance(n, ast.FunctionDef) and n.name.startswith("define_")]
    forward = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "forward")
    executes = [
        n
        for n in ast.walk(forward)
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "execute"
    ]
    for d in defines:  # each region: one definition recorded at import, or one per size at first call
        region = d.removeprefix("define_")
        assert (
            f"{region} = Fusion(FusionDefinition, {d})" in text
            or f"{region} = SizedFusions(FusionDefinition, {d}" in text
        )
    # the hot path: every region is one `<fusion>.execute([...])` inline in forward, no call around it
    assert defines and len(executes) == len(defines) and len(set(defines)) == len(defines)
    # the runtime is imported, not copied: no lock, no Fusion class in the file
    assert "fd.add_output(" in text and "threading" not in text and "class Fusion" not in text
    if ".." in next(e[2] for e in EXPORTS if e[0] == stem):
        # dynamic buckets: one static FusionDefinition per size, recorded at that size's first call
        assert ".record(" in text and "contiguity=contiguity([" in text


@pytest.mark.traces
def test_nvfuser_symbolic_mode_defines_minus_one_sizes():
    result = run_cli(
        "export",
        "thunder_aot.examples.gpt_oss:rmsnorm",
        "--shapes",
        "1x[1..2048]x2880:bf16",
        "--nvfuser-dynamic",
        "symbolic",
        "--backend",
        "nvfuser",
        "--no-verify",
    )
    assert result.returncode == 0, result.stderr
    text = result.stdout
    assert "shape=[1, -1, 2880]" in text and "s0 = hidden_states.size(1)" in text
    assert (
        "fusion0 = Fusion(FusionDefinition, define_fusion0)" in text and "--nvfuser-dynamic symbolic" in text
    )
    assert "(t16,) = fusion0.execute([hidden_states, t_weight])" in text


@pytest.mark.traces
@pytest.mark.parametrize(
    "mode,divisor",
    [
        ("specialize", "fd.define_scalar(float(s0), dtype=DataType.Double)"),
        ("symbolic", "fd.ops.cast(s0, DataType.Double)"),
    ],
)
def test_nvfuser_divides_a_mean_over_a_dynamic_dim_by_its_size_as_a_double(mode, divisor):
    """A mean over the dynamic dim traced 64.0 and 33.0 (SizeArg.real): the definition divides by the
    size made a Double scalar, recorded per size (specialize) or read from the input (symbolic). Its
    numerics are a GPU test (tools/gpu_suites.py sound)."""
    result = run_cli(
        "export",
        "tests.sound_modules:sequence_statistics",
        "--shapes",
        "2x[2..40]x64:bf16",
        "--nvfuser-dynamic",
        mode,
        "--backend",
        "nvfuser",
        "--no-verify",
    )
    assert result.returncode == 0, result.stderr
    assert f"fd.ops.reciprocal({divisor})" in result.stdout


@pytest.mark.traces
def test_unchecked_export_leaves_out_the_per_call_checks_and_says_so():
    shapes = "1x[1..2048]x2880:bf16"
    checked = run_cli(
        "export",
        "thunder_aot.examples.gpt_oss:rmsnorm",
        "--shapes",
        shapes,
        "--backend",
        "nvfuser",
        "--no-verify",
    )
    unchecked = run_cli(
        "export",
        "thunder_aot.examples.gpt_oss:rmsnorm",
        "--shapes",
        shapes,
        "--backend",
        "nvfuser",
        "--no-verify",
        "--unchecked",
    )
    assert checked.returncode == 0 and unchecked.returncode == 0, checked.stderr + unchecked.stderr
    for call in ("raise bad_input(", "raise bad_state(", "raise no_autograd("):
        assert call in checked.stdout and call not in unchecked.stdout, call
    assert "UNCHECKED" not in checked.stdout
    header = unchecked.stdout.splitlines()[:12]
    assert any(line.startswith("# UNCHECKED (--unchecked)") for line in header)
    assert any(
        line.startswith("# Regenerate: ") and line.endswith("--unchecked --no-verify") for line in header
    )
    # the dispatch stays: a shape outside every bucket still raises NoBucketError
    assert "raise no_bucket(_OWNER" in unchecked.stdout and "1 <= shape_0[1] <= 2048" in unchecked.stdout


@pytest.mark.traces
def test_nvfuser_legacy_frontend():
    result = run_cli(
        "export",
        "thunder_aot.examples.gpt_oss:rmsnorm",
        "--shapes",
        "1x8x2880:bf16",
        "--nvfuser-frontend",
        "legacy",
        "--backend",
        "nvfuser",
        "--no-verify",
    )
    assert result.returncode == 0, result.stderr
    text = result.stdout
    assert 'FusionDefinition, DataType = frontend("nvfuser")' in text and "nvfuser_direct" not in text
    assert 'frontend="legacy"' in text and "--nvfuser-frontend legacy" in text


@pytest.mark.traces
def test_fallback_option_runs_the_source_module_outside_every_bucket(tmp_path):
    out = tmp_path / "rms_fallback.py"
    result = run_cli(
        "export",
        "thunder_aot.examples.gpt_oss:rmsnorm",
        "--shapes",
        "1x[1..64]x2880:bf16",
        "--backend",
        "torch",
        "--fallback",
        "--out",
        str(out),
    )
    assert result.returncode == 0, result.stderr
    gen = load_module_from_text(out.read_text(), "gen_fallback")
    source = resolve_module("thunder_aot.examples.gpt_oss:rmsnorm")
    module = gen.GptOssRMSNorm.from_module(source)
    x = torch.randn(2, 100, 2880, dtype=torch.bfloat16)  # outside the bucket
    with torch.no_grad():
        check_call(source, module, [x], "fallback")
    with pytest.raises(gen.NoBucketError):  # the pure function has no source module to fall back to
        gen.forward(x, source.weight)
    with pytest.raises(gen.NoBucketError):  # nor has a module built without from_module
        gen.GptOssRMSNorm()(x)


def test_hooks_and_module_compile_still_run_through_the_fast_call_path():
    gen = _load("rmsnorm", "torch")
    source = resolve_module("thunder_aot.examples.gpt_oss:rmsnorm")
    module = gen.GptOssRMSNorm.from_module(source)
    x = torch.randn(1, 15, 2880, dtype=torch.bfloat16)
    seen = []
    handle = module.register_forward_hook(lambda m, args, out: seen.append("local") or out * 2)
    with torch.no_grad():
        judge(source(x) * 2, module(x), None, "with a forward hook")
    handle.remove()
    with torch.no_grad():
        expected = source(x)
    handle = torch.nn.modules.module.register_module_forward_pre_hook(lambda m, args: seen.append("global"))
    with torch.no_grad():
        judge(expected, module(x), None, "with a global pre-hook")
    handle.remove()
    with torch.no_grad():
        check_call(source, module, [x], "with no hooks")
    assert seen == ["local", "global"]


def test_nvfuser_modules_refuse_autograd_instead_of_returning_gradient_free_results():
    text = (ROOT / "generated" / "rmsnorm_nvfuser.py").read_text()
    assert "if torch.is_grad_enabled() and (hidden_states.requires_grad or t_weight.requires_grad):" in text
    assert 'raise no_autograd(_OWNER, "nvfuser")' in text
    torch_text = (ROOT / "generated" / "rmsnorm_torch.py").read_text()
    assert "no_autograd" not in torch_text  # torch ops carry gradients: nothing to refuse


def test_torch_backend_gradients_match_the_source():
    source = resolve_module("thunder_aot.examples.blocks:gated_mlp").requires_grad_(True)
    gen = _load("gated_mlp", "torch")
    aot = gen.GatedMLP.from_module(source)
    x = torch.randn(9, 256, requires_grad=True)
    (g_src,) = torch.autograd.grad(source(x).square().sum(), x)
    (g_aot,) = torch.autograd.grad(aot(x).square().sum(), x)
    x64 = x.detach().double().requires_grad_(True)
    (g_64,) = torch.autograd.grad(upcast64(source)(x64).square().sum(), x64)
    judge(g_src, g_aot, g_64, "input gradient")


def test_warmup_calls_every_bucket_at_its_edges_or_the_sizes_asked_for():
    gen = _load("rmsnorm", "torch")
    module = gen.GptOssRMSNorm.from_module(resolve_module("thunder_aot.examples.gpt_oss:rmsnorm"))
    seen = []
    original = gen.forward
    gen.forward = lambda x, w: seen.append(tuple(x.shape)) or original(x, w)
    try:
        assert module.warmup() == 5  # three exact buckets, the dynamic one at 1 and 2048
        assert seen[-2:] == [(1, 1, 2880), (1, 2048, 2880)]
        seen.clear()
        assert module.warmup(s0=[7, 4096]) == 4  # 4096 lies outside the bucket: skipped
        assert (1, 7, 2880) in seen and (1, 4096, 2880) not in seen
    finally:
        gen.forward = original


def test_a_forward_replaced_on_the_instance_or_overridden_in_a_subclass_is_the_one_called():
    """__call__ skips nn.Module's generic path, but not a forward someone put in its place (as
    accelerate's hooks do on the instance)."""
    gen = _load("rmsnorm", "torch")
    source = resolve_module("thunder_aot.examples.gpt_oss:rmsnorm")
    x = torch.randn(1, 15, 2880, dtype=torch.bfloat16)
    module = gen.GptOssRMSNorm.from_module(source)
    module.forward = lambda hidden_states: hidden_states + 1
    with torch.no_grad():
        judge(x + 1, module(x), None, "forward replaced on the instance")

    class Doubled(gen.GptOssRMSNorm):
        def forward(self, hidden_states):
            return super().forward(hidden_states) * 2

    with torch.no_grad():
        judge(source(x) * 2, Doubled.from_module(source)(x), None, "forward overridden in a subclass")


@pytest.mark.parametrize("backend", ["nvfuser", "triton"])
def test_kernel_inputs_after_the_first_must_be_on_its_device(backend):
    """A kernel is launched on the first input's GPU and reads every input as a raw pointer: the
    checks refuse another GPU's tensor (run on two GPUs by tests/test_gpu.py)."""
    text = (ROOT / "generated" / f"rotary_{backend}.py").read_text()
    check = next(n for n in ast.parse(text).body if isinstance(n, ast.FunctionDef) and n.name == "_dispatch")
    tests = {
        ast.unparse(n.exc.args[1]): ast.unparse(parent.test)
        for parent in ast.walk(check)
        if isinstance(parent, ast.If)
        for n in parent.body
        if isinstance(n, ast.Raise) and getattr(n.exc.func, "id", "") == "bad_input"
    }
    assert set(tests) == {"'x'", "'cos'", "'sin'"}
    assert "get_device()" not in tests["'x'"]
    for name in ("cos", "sin"):
        assert f"{name}.get_device() == x.get_device()" in tests[f"'{name}'"]
        assert f'raise bad_input(_OWNER, "{name}", {name}, "a contiguous CUDA tensor on x\'s device")' in text


def test_each_program_branch_reads_a_size_once():
    """Generated code is reviewed like any code: in every module's forward, each block (a program's
    branch, the function body) reads a size off the input shapes into a name once (a Triton region
    once re-read ``S`` that its bucket's branch had already bound)."""
    import ast

    from thunder_aot.cli import generated_files

    reads_seen = 0
    for path in generated_files([str(ROOT / "generated")]):
        forward = next(
            n
            for n in ast.parse(path.read_text()).body
            if isinstance(n, ast.FunctionDef) and n.name == "forward"
        )
        blocks = [
            getattr(n, f)
            for n in ast.walk(forward)
            for f in ("body", "orelse")
            if isinstance(getattr(n, f, None), list)
        ]
        for block in blocks:
            reads = [s for s in block if isinstance(s, ast.Assign) and "shape" in ast.unparse(s.value)]
            bound = [ast.unparse(t) for s in reads for t in s.targets]
            assert len(bound) == len(set(bound)), (path.name, bound)
            reads_seen += len(reads)
    assert reads_seen > 5  # the test looks at the dims the programs bind


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("stem", IDS)
def test_typed_bucket_table_is_the_bucket_text(stem, backend):
    """BUCKET_SPECS (what adapters read) says what BUCKETS says: per bucket the same inputs' shapes,
    dynamic sizes, dtypes, value ranges and dims as the text parses to."""
    from thunder_aot.runtime import Size
    from thunder_aot.runtime.specs import bucket_specs

    if backend == "nvfuser":  # not importable on CPU: its table is the torch file's, written alike
        assert _assigned(stem, "nvfuser", "BUCKET_SPECS") == _assigned(stem, "torch", "BUCKET_SPECS")
        return
    gen = _load(stem, backend)
    specs = bucket_specs(getattr(gen, gen._OWNER))
    assert gen.BUCKETS == tuple(s.text for s in specs) and gen.INPUTS
    for spec in specs:
        (parsed,) = parse_shapes(spec.text)
        assert len(spec.inputs) == len(parsed.inputs) == len(gen.INPUTS)
        for i, (typed, text) in enumerate(zip(spec.inputs, parsed.inputs)):
            assert typed.dtype == getattr(torch, text.dtype)
            assert typed.values == parsed.value_range(i)
            assert typed.shape == tuple(
                d if isinstance(d, int) else Size(d.name, d.coeff, d.offset) for d in text.shape
            )
        assert spec.dims == tuple((r.name, r.lo, r.hi) for r in parsed.dims)
