"""The generated nvFuser module's run-time plumbing, on CPU, with a fake ``nvfuser_direct``.

What this proves, for generated/rmsnorm_nvfuser.py: forward dispatches to the right recorded
FusionDefinition and passes it [hidden_states, weight]; ``Fusion`` compiles through ``fd.execute``
once, then calls the executor cache ``fd.fec.execute``; a dynamic bucket records one definition per
size, with that concrete shape, once even when threads race on a new size; and
``thunder_aot.bench.nvfuser_executions`` sees the executed definition and puts ``execute`` back.

What it cannot prove: that nvFuser computes the right numbers from these definitions (the fake
computes the reference with torch). nvFuser's numerics are proven by the GPU tests."""

from __future__ import annotations

import collections
import sys
import threading
import time
import types
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch

import thunder_aot.runtime
import thunder_aot.runtime.nvfuser as runtime_nvfuser
from tests.helpers import ROOT
from thunder_aot.bench import nvfuser_executions
from thunder_aot.examples.gpt_oss import rmsnorm
from thunder_aot.verify import load_module_from_text


def _reference(inputs):
    x, w = inputs[0], inputs[1]
    xf = x.float()
    return (w * (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-5))).to(x.dtype)


def _fake_nvfuser_direct() -> types.ModuleType:
    """``FusionDefinition`` records its tensors' kwargs; executes count calls (in ``fake.calls``:
    "fd" for ``fd.execute``, "fec" for ``fd.fec.execute``) and return the torch reference."""
    fake = types.ModuleType("nvfuser_direct")
    fake.__version__ = "0.2.35+fake"  # a tested release: the runtime takes its fast path
    fake.calls = collections.Counter()
    fake.recorded = []  # every FusionDefinition, in the order recorded
    lock = threading.Lock()

    def count(kind):
        with lock:
            fake.calls[kind] += 1

    class AnyAttribute:
        def __getattr__(self, name):
            return name

    class Ops:
        def __getattr__(self, name):
            return lambda *args, **kwargs: object()

    class Executor:
        def execute(self, inputs):
            count("fec")
            return [_reference(inputs)]

    class FusionDefinition:
        def __init__(self):
            self.tensors, self.outputs, self.ops = [], [], Ops()

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            time.sleep(0.005)  # recording takes a while: two threads recording one size would overlap
            with lock:
                fake.recorded.append(self)

        def define_tensor(self, **kwargs):
            self.tensors.append(kwargs)
            return object()

        def define_scalar(self, *args, **kwargs):
            return object()

        def add_output(self, token):
            self.outputs.append(token)

        def execute(self, inputs):
            count("fd")
            time.sleep(0.02)  # compiling takes a while: two threads compiling at once would overlap
            self.fec = Executor()
            return [_reference(inputs)]

    fake.DataType = AnyAttribute()
    fake.FusionDefinition = FusionDefinition
    return fake


@pytest.fixture
def env(monkeypatch, request):
    """(generated module, fake nvfuser_direct, exported module, source module), fresh per test."""
    fake = _fake_nvfuser_direct()
    monkeypatch.setitem(sys.modules, "nvfuser_direct", fake)
    monkeypatch.setattr(runtime_nvfuser, "_FAST_EXECUTE", {})  # decided again, for this fake
    text = (ROOT / "generated" / "rmsnorm_nvfuser.py").read_text()
    assert text.count(".is_cuda") == 1
    # the only change: the device check accepts the CPU tensors this machine has
    name = f"gen_rmsnorm_nvfuser_fake_{request.node.name}"
    request.addfinalizer(lambda: sys.modules.pop(name, None))
    gen = load_module_from_text(text.replace(".is_cuda", ".is_cpu"), name)
    src = rmsnorm()
    with torch.no_grad():
        src.weight.copy_(torch.randn(2880))
    return gen, fake, gen.GptOssRMSNorm.from_module(src), src


def _x(s: int) -> torch.Tensor:
    return torch.randn(1, s, 2880, dtype=torch.bfloat16)


def _check(out, src, x):
    torch.testing.assert_close(out, src(x), atol=1.6e-2, rtol=1.6e-2)


@torch.no_grad()
def test_exact_bucket_compiles_once_then_calls_the_executor_cache(env):
    gen, fake, aot, src = env
    fusion = gen.fusion0.by_size[15]  # an exact bucket's size: recorded at import, compiled at its first call
    assert not fusion.ready and fake.calls == {} and fusion.fd in fake.recorded
    x = _x(15)
    _check(aot(x), src, x)
    assert fake.calls == {"fd": 1} and fusion.ready and fusion.execute == fusion.fd.fec.execute
    for _ in range(2):
        x = _x(15)
        _check(aot(x), src, x)
    assert fake.calls == {"fd": 1, "fec": 2}
    assert sorted(gen.fusion0.by_size) == [15, 568, 1369] and not (
        gen.fusion0.by_size[568].ready or gen.fusion0.by_size[1369].ready
    )


@torch.no_grad()
def test_dynamic_bucket_records_one_definition_per_size_with_its_shape(env):
    gen, fake, aot, src = env
    for s in (16, 2048):
        x = _x(s)
        _check(aot(x), src, x)
        fd = gen.fusion0.by_size[s].fd
        assert fd is fake.recorded[-1] and fd.tensors[0]["shape"] == [1, s, 2880]
        before = len(fake.recorded)
        x = _x(s)
        _check(aot(x), src, x)
        assert len(fake.recorded) == before and gen.fusion0.by_size[s].fd is fd
    assert list(gen.fusion0.by_size) == [15, 568, 1369, 16, 2048]
    assert fake.calls == {"fd": 2, "fec": 2}


def test_threads_racing_on_a_new_size_record_and_compile_it_once(env):
    gen, fake, aot, src = env
    xs = [_x(100) for _ in range(8)]
    barrier = threading.Barrier(len(xs))

    def first_call(x):
        barrier.wait(timeout=30)
        with torch.no_grad():
            return aot(x)

    with ThreadPoolExecutor(len(xs)) as pool:
        outs = list(pool.map(first_call, xs))
    ours = [fd for fd in fake.recorded if fd.tensors[0]["shape"] == [1, 100, 2880]]
    assert len(ours) == 1 and gen.fusion0.by_size[100].fd is ours[0]
    assert fake.calls == {"fd": 1, "fec": 7}
    with torch.no_grad():
        for x, out in zip(xs, outs):
            _check(out, src, x)


@torch.no_grad()
def test_bench_nvfuser_executions_records_the_fd_and_restores_execute(env):
    gen, fake, aot, src = env
    fusions = [gen.fusion0.by_size[15], gen.fusion0.by_size[568], gen.fusion0.by_size[1369]]
    before = [f.execute for f in fusions]
    x = _x(300)
    ((fd, args),) = nvfuser_executions(aot, [x])
    fusion = gen.fusion0.by_size[300]
    assert fd is fusion.fd and len(args) == 2 and args[0] is x and args[1] is src.weight
    assert [f.execute for f in fusions] == before and fusion.execute == fd.fec.execute
    calls = dict(fake.calls)
    x = _x(300)
    _check(aot(x), src, x)
    assert fake.calls == {"fd": calls["fd"], "fec": calls["fec"] + 1}


def _counting_dispatch(gen, monkeypatch) -> list:
    """Wraps the generated module's checked path; the list grows by the shape of each call through it."""
    calls, real = [], gen._dispatch
    monkeypatch.setattr(
        gen, "_dispatch", lambda x, w: calls.append(tuple(getattr(x, "shape", ()))) or real(x, w)
    )
    return calls


@torch.no_grad()
def test_fast_path_takes_over_after_the_first_checked_call_of_each_shape(env, monkeypatch):
    gen, fake, aot, src = env
    checked = _counting_dispatch(gen, monkeypatch)
    for s in (15, 15, 16, 16, 2048, 15):
        x = _x(s)
        _check(aot(x), src, x)
    assert checked == [(1, 15, 2880), (1, 16, 2880), (1, 2048, 2880)]
    # every bucket of the seed's module runs one program, on its size s0; CPU tensors: device index -1
    assert {shape: entry[1:] for shape, entry in gen._FAST.items()} == {
        (1, 15, 2880): (0, True, -1, (15,)),
        (1, 16, 2880): (0, True, -1, (16,)),
        (1, 2048, 2880): (0, True, -1, (2048,)),
    }
    assert gen._FAST.last is gen._FAST[(1, 15, 2880)]  # the entry that passed last


@torch.no_grad()
def test_calls_that_repeat_a_shape_pass_the_last_guard_without_a_lookup(env, monkeypatch):
    """The guard that passed last is tried first: a decode loop's calls look nothing up; a call of
    another recorded shape finds its entry (which becomes the last), a new shape is checked."""
    gen, fake, aot, src = env
    checked = _counting_dispatch(gen, monkeypatch)
    found = []
    find = thunder_aot.runtime.GuardTable.find
    monkeypatch.setattr(
        thunder_aot.runtime.GuardTable,
        "find",
        lambda table, *a: found.append(getattr(a[0], "shape", [None] * 2)[1]) or find(table, *a),
    )
    for s in (15, 15, 15, 16, 16, 15, 16, 16):
        x = _x(s)
        _check(aot(x), src, x)
    assert checked == [(1, 15, 2880), (1, 16, 2880)]
    # a lookup where the last guard failed: the first 16 (none recorded: then checked), and each switch
    assert found == [16, 15, 16]
    assert gen._FAST.last is gen._FAST[(1, 16, 2880)]
    with pytest.raises(ValueError, match="hidden_states must be a contiguous"):
        aot(_x(16).tolist())  # not a tensor: the last guard fails, find finds nothing, the checks say why
    assert found[3:] == [None]


def test_the_guard_refuses_whatever_the_checks_refuse(env, monkeypatch):
    """After a shape's guard is recorded, a call of that shape that breaks a requirement still gets
    the checked path's one-line error (the guard fails, _dispatch raises), and good calls stay fast."""
    gen, fake, aot, src = env
    checked = _counting_dispatch(gen, monkeypatch)
    good = _x(15)
    with torch.no_grad():
        aot(good)
    assert len(checked) == 1
    with torch.no_grad():
        with pytest.raises(ValueError, match="hidden_states must be a contiguous"):
            aot(torch.randn(1, 2880, 15, dtype=torch.bfloat16).transpose(1, 2))  # same shape, not contiguous
        with pytest.raises(gen.NoBucketError, match="hidden_states 1x15x2880:float32"):
            aot(good.float())
        with pytest.raises(ValueError, match="hidden_states must be a contiguous"):
            aot(good.tolist())
        weight = src.weight.data
        src.weight.data = weight.half()  # the module converted after export: same tensor object
        try:
            with pytest.raises(ValueError, match="weight must be a contiguous float32 tensor"):
                aot(good)
        finally:
            src.weight.data = weight
    # gradients on and a parameter that requires them: refused, though under no_grad its guard is recorded
    src.weight.requires_grad_(True)
    with torch.no_grad():
        aot(good)
    assert gen._FAST[good.shape][0](good, src.weight) and not gen._FAST[good.shape][2]
    with pytest.raises(RuntimeError, match="computes no gradients"):
        aot(good)
    src.weight.requires_grad_(False)
    checked.clear()
    with torch.no_grad():
        x = _x(15)
        _check(aot(x), src, x)  # the weight's requires_grad changed: checked once more, guard re-recorded
        _check(aot(x), src, x)
        x = _x(15).requires_grad_()  # under no_grad a tensor that requires grad is fine: its own guard
        _check(aot(x), src, x)
        _check(aot(x), src, x)
    assert checked == [(1, 15, 2880)] * 2


def test_with_gradients_on_the_fast_path_serves_only_tensors_that_require_none(env, monkeypatch):
    """The seed's benchmark calls with gradients on and requires_grad_(False) weights: fast. A
    guard recorded under no_grad for a weight that requires grad must not serve such calls."""
    gen, fake, aot, src = env
    checked = _counting_dispatch(gen, monkeypatch)
    assert torch.is_grad_enabled() and not src.weight.requires_grad
    for _ in range(3):
        x = _x(15)
        _check(aot(x), src, x)
    assert checked == [(1, 15, 2880)] and gen._FAST[(1, 15, 2880)][2]
    src.weight.requires_grad_(True)
    with torch.no_grad():
        _check(aot(x), src, x)  # re-recorded: the weight now requires grad
    assert not gen._FAST[(1, 15, 2880)][2]
    with pytest.raises(RuntimeError, match="computes no gradients"):
        aot(x)


def test_the_guard_table_is_bounded(env, monkeypatch):
    gen, fake, aot, src = env
    monkeypatch.setattr(thunder_aot.runtime, "GUARD_LIMIT", 2)
    for s in (1, 2, 3, 1, 3):
        x = _x(s)
        _check(aot(x), src, x)
    assert sorted(gen._FAST) == [(1, 1, 2880), (1, 2, 2880)]


@torch.no_grad()
def test_without_torchs_tensor_guards_every_call_takes_the_checked_path(env, monkeypatch):
    """A torch without ``torch._C._dynamo.guards.TensorGuards`` (the generated module imports it
    optionally): nothing is recorded, every call is checked and still correct."""
    gen, fake, aot, src = env
    monkeypatch.setattr(thunder_aot.runtime, "TensorGuards", None)
    checked = _counting_dispatch(gen, monkeypatch)
    for s in (15, 15, 300):
        x = _x(s)
        _check(aot(x), src, x)
    assert gen._FAST == {} and len(checked) == 3
    with pytest.raises(ValueError, match="hidden_states must be a contiguous"):
        aot(torch.randn(1, 2880, 15, dtype=torch.bfloat16).transpose(1, 2))


def test_an_untested_nvfuser_release_runs_every_call_through_fd_execute(monkeypatch, request):
    fake = _fake_nvfuser_direct()
    fake.__version__ = "0.3.0"
    monkeypatch.setitem(sys.modules, "nvfuser_direct", fake)
    monkeypatch.setattr(runtime_nvfuser, "_FAST_EXECUTE", {})
    monkeypatch.setattr(thunder_aot.runtime.versions, "_WARNED", set())
    monkeypatch.delenv("THUNDER_AOT_FAST_PATHS", raising=False)
    name = f"gen_rmsnorm_nvfuser_fake_{request.node.name}"
    request.addfinalizer(lambda: sys.modules.pop(name, None))
    text = (ROOT / "generated" / "rmsnorm_nvfuser.py").read_text()
    gen = load_module_from_text(text.replace(".is_cuda", ".is_cpu"), name)
    src = rmsnorm()
    aot = gen.GptOssRMSNorm.from_module(src)
    with pytest.warns(RuntimeWarning, match="nvfuser_direct 0.3.0 is not a tested release"), torch.no_grad():
        for _ in range(3):
            aot(_x(15))
    assert fake.calls == {"fd": 3}


@pytest.mark.traces
def test_a_fusion_reading_a_permuted_fusion_output_gets_it_contiguous():
    """nvFuser returns the output of a fusion that transposes in the permuted layout; the next fusion
    is defined for contiguous inputs, so the module makes each such input contiguous first (Qwen3's
    q_norm then transpose; found on the GPU as a stride mismatch at S=16)."""
    import re

    from thunder_aot.pipeline import export
    from thunder_aot.request import ExportRequest

    text = export(
        ExportRequest(
            "tests.view_modules:norm_then_transpose_then_mix", ("1x[S=2..40]x128:fp32",), backend="nvfuser"
        ),
        verify=False,
    )
    body = text[text.index("    if program == 0") :]
    first = re.search(r"(\w+), (\w+) = \(fusion0\.", body)
    assert first, body
    second = body[first.end() :]
    fed = re.search(r"fusion1\.record\(S\)\)\.execute\(\[(.*)\]\)", second).group(1).split(", ")
    from_first = [name for name in fed if name in first.groups()]
    assert from_first, fed
    for name in from_first:
        assert f"{name} = {name}.contiguous()" in second[: second.index("fusion1.by_size")], second


@pytest.mark.traces
def test_a_permuted_fusion_output_the_module_returns_is_made_contiguous():
    """A KV-cache step returns its keys from a fusion that transposes (the new keys, then a cat with
    the past); nvFuser lays them out permuted, eager returns them contiguous, and the next decode
    step takes them back as contiguous inputs: the module returns them contiguous (found on the GPU
    with Llama's KV-cache layer: the second decode step refused past_values). The hidden states,
    from a fusion without a transpose, are returned as they are."""
    import re

    from tests.view_modules import KEYS_APPENDED_SHAPES
    from thunder_aot.pipeline import export
    from thunder_aot.request import ExportRequest

    text = export(
        ExportRequest("tests.view_modules:keys_appended", (KEYS_APPENDED_SHAPES,), backend="nvfuser"),
        verify=False,
    )
    bodies = text.split("    if program == ")[1:]
    assert bodies
    for body in bodies:
        hidden, keys = re.search(r"\n\s+return (\w+), (\w+)\n", body).groups()
        assert f"{keys} = {keys}.contiguous()" in body, body[-600:]
        assert f"{hidden} = {hidden}.contiguous()" not in body  # no transpose there


class _TorchOps:
    """The few ``fd.ops`` a strided slice renders to, computed with torch (nvFuser's meaning: slice
    bounds per dim, pad widths innermost dim first)."""

    @staticmethod
    def slice(x, starts, ends, strides=None):
        index = tuple(slice(s, e, st) for s, e, st in zip(starts, ends, strides or [1] * len(starts)))
        return x[index]

    @staticmethod
    def pad(x, widths):
        return torch.nn.functional.pad(x, widths)

    @staticmethod
    def reshape(x, shape):
        return x.reshape(shape)

    @staticmethod
    def squeeze(x, dims):
        return x.squeeze(dims[0])


@pytest.mark.parametrize("start", [0, 1, 2])
@pytest.mark.parametrize("step", [2, 3])
def test_a_slice_with_a_step_renders_as_unit_step_parts(start, step):
    """nvFuser's slice takes unit steps only (GPT-OSS's ``gate_up[..., ::2]`` / ``[..., 1::2]`` failed
    on the GPU machine at b3b7b31): the rendered text, evaluated with torch's
    meaning of each op, takes the same elements as the strided slice, at a specialized dynamic size."""
    from thunder_aot.backends.nvfuser import NV_PRIMS, NvOp
    from thunder_aot.ir import Const, PrimOp, Ref, Seq, SizeArg, SymDim, TensorSpec, Value

    width, seq = 12, 5
    count = len(range(start, width, step))
    out = Value("part", TensorSpec((SymDim("S"), count), "float32"))
    op = PrimOp(
        "slice",
        (out,),
        (
            Ref("x"),
            Seq((Const(0), Const(start))),
            Seq((SizeArg(SymDim("S")), Const(width))),
            Seq((Const(1), Const(step))),
        ),
    )
    text = NV_PRIMS["slice"](NvOp(op, specialized=True))
    assert (
        "fd.ops.slice" in text and f", {step}]" not in text.split("fd.ops.pad")[0]
    ), "no stepped slice reaches nvFuser"
    x = torch.randn(seq, width, generator=torch.Generator().manual_seed(start * 10 + step))
    got = eval(text, {"fd": type("FD", (), {"ops": _TorchOps})}, {"x": x, "S": seq})
    torch.testing.assert_close(got, x[:, start::step], rtol=0, atol=0)
