"""thunder_aot.runtime, the library every generated module imports: cheap to import, versioned,
and its pieces on their own."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

import thunder_aot.runtime as rt
from tests.helpers import ROOT, check_autocast_calls


def test_importing_the_runtime_loads_neither_thunder_nor_the_exporter():
    code = (
        "import sys, thunder_aot.runtime, thunder_aot.runtime.triton, thunder_aot.runtime.nvfuser;"
        "bad = sorted(k for k in sys.modules if k.split('.')[0] in ('thunder', 'jinja2', 'black')"
        " or k.startswith(('thunder_aot.pipeline', 'thunder_aot.codegen', 'thunder_aot.backends')));"
        "print(bad)"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "[]"


def test_a_module_written_for_a_newer_runtime_is_refused():
    rt.require(rt.RUNTIME_VERSION)
    with pytest.raises(ImportError, match=f"runtime version {rt.RUNTIME_VERSION + 1}.*upgrade thunder-aot"):
        rt.require(rt.RUNTIME_VERSION + 1)


def test_errors_are_one_line_and_name_what_was_expected():
    error = rt.no_bucket(
        "Norm", ("x", "w"), (torch.zeros(2, 3, dtype=torch.bfloat16), 7), ("[1..4]x3:bfloat16",)
    )
    assert isinstance(error, rt.NoBucketError) and isinstance(error, ValueError)
    assert (
        str(error)
        == "Norm (thunder-aot): no bucket for x 2x3:bfloat16, w int; expected one of: [1..4]x3:bfloat16"
    )
    assert "\n" not in str(rt.bad_input("Norm", "x", [1], "a contiguous CUDA tensor"))
    assert "x must be a contiguous CUDA tensor; got a list" in str(
        rt.bad_input("Norm", "x", [1], "a contiguous CUDA tensor")
    )


def test_the_guard_table_records_what_passed_and_is_bounded(monkeypatch):
    table: dict = {}
    x, w = torch.randn(2, 3), torch.randn(3)
    rt.record_guard(table, x.shape, 0, (x, w))
    guard, program, grad_free, device = table[x.shape]
    assert (program, grad_free, device) == (0, True, -1)
    assert guard(torch.randn(2, 3), torch.randn(3)) and not guard(torch.randn(2, 3).double(), torch.randn(3))
    assert not guard(torch.randn(3, 2).t(), torch.randn(3))  # other strides
    monkeypatch.setattr(rt, "GUARD_LIMIT", 1)
    rt.record_guard(table, torch.Size([5, 3]), 0, (torch.randn(5, 3), w))
    assert list(table) == [x.shape]


def test_the_guard_table_tries_the_entry_that_passed_last(monkeypatch):
    table = rt.GuardTable()
    x, w = torch.randn(2, 3), torch.randn(3)
    assert table.last is None and table.find(x, w) is None
    table.record(x.shape, 1, (2,), (x, w))
    guard, program, grad_free, device, sizes = entry = table[x.shape]
    assert table.last is entry and (program, grad_free, device, sizes) == (1, True, -1, (2,))
    y = torch.randn(4, 3)
    table.record(y.shape, 0, (4,), (y, w.requires_grad_()))
    assert table.last is table[y.shape] and table.last[2] is False  # a tensor requires grad
    assert table.find(torch.randn(2, 3), torch.randn(3)) is entry and table.last is entry
    assert (
        table.find(torch.randn(2, 3).double(), torch.randn(3)) is None and table.last is entry
    )  # the guard fails
    assert table.find([1, 2], w) is None and table.find(None, w) is None  # not tensors
    assert table.find(torch.randn(7, 3), w) is None  # no entry for the shape
    monkeypatch.setattr(rt, "GUARD_LIMIT", 2)
    table.record(torch.Size([7, 3]), 0, (7,), (torch.randn(7, 3), w))
    assert sorted(table) == [(2, 3), (4, 3)] and table.last is entry  # full: nothing recorded
    table.record(x.shape, 2, (2,), (x, w))  # the last call of a shape wins
    assert table[x.shape][1] == 2 and table.last is table[x.shape]


class _Norm(rt.GeneratedModule):
    STATE = (
        ("inner.weight", "parameter", (3,), torch.float32, True),
        ("scale", "buffer", (), torch.float32, False),
    )
    EXPORTED_SETTINGS = {"inner.eps": 1e-6}
    WARMUP = (({"s0": (1, 4)}, lambda s0: [((s0, 3), torch.float32)]),)
    FALLBACK = True

    def __call__(self, x):
        return self.forward(x)

    def forward(self, x):
        if x.shape[0] > 4:
            return self._outside_buckets(rt.NoBucketError("outside"), x)
        return x * self.inner.weight * self.scale


def _source():
    src = torch.nn.Module()
    src.inner = torch.nn.Module()
    src.inner.weight = torch.nn.Parameter(torch.randn(3))
    src.inner.eps = 1e-6
    src.register_buffer("scale", torch.tensor(2.0), persistent=False)
    src.forward = lambda x: x + 100
    return src


def test_generated_module_base_shares_tensors_checks_settings_and_falls_back():
    src = _source()
    m = _Norm.from_module(src)
    assert m.inner.weight is src.inner.weight and m.scale is src.scale
    assert list(m.state_dict()) == ["inner.weight"]  # the non-persistent buffer and the source stay out
    assert _Norm().inner.weight.shape == (3,)
    assert torch.equal(
        m(torch.ones(6, 3)), torch.ones(6, 3) + 100
    )  # outside every bucket: the source's forward
    assert m.warmup() == 2 and m.warmup(s0=[2, 9]) == 1
    src.inner.eps = 1e-5
    with pytest.raises(ValueError, match=r"exported for inner.eps=1e-06; the source has 1e-05"):
        _Norm.from_module(src)


def test_without_the_exporters_dependencies_the_cli_says_which_extra_to_install():
    """A deployment holds torch and the runtime only: export says, in one line, what it lacks."""
    code = (
        "import sys; sys.modules['black'] = None; sys.modules['jinja2'] = None;"
        "from thunder_aot.cli import main;"
        "sys.exit(main(['export', 'thunder_aot.examples.gpt_oss:rmsnorm', '--shapes', '1x4x2880']))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 2, out.stderr[-2000:]
    assert out.stderr.strip().splitlines() == [
        "thunder-aot: error: export needs the exporter's dependencies (jinja2, black missing): "
        "pip install 'thunder-aot[export]'"
    ]


def test_from_module_refuses_a_tensor_of_another_shape_or_dtype():
    src = _source()
    src.inner.weight = torch.nn.Parameter(torch.randn(4))
    with pytest.raises(
        ValueError, match=r"exported for inner.weight of shape 3 and dtype float32; the source has 4:float32"
    ):
        _Norm.from_module(src)
    src = _source()
    src.scale = src.scale.half()
    with pytest.raises(
        ValueError,
        match=r"exported for scale of shape scalar and dtype float32; the source has scalar:float16",
    ):
        _Norm.from_module(src)


def test_an_nvfuser_module_without_nvfuser_names_what_to_install():
    """Importing a generated nvFuser module where nvFuser is missing: one ImportError line naming the
    frontend, the torch version and the install page (not a bare ModuleNotFoundError)."""
    import importlib.util

    import pytest

    if importlib.util.find_spec("nvfuser_direct") is not None:
        pytest.skip("nvFuser is installed here")
    from tests.helpers import ROOT
    from thunder_aot.verify import load_module_from_text

    with pytest.raises(ImportError) as info:
        load_module_from_text((ROOT / "generated" / "rmsnorm_nvfuser.py").read_text(), "gen_without_nvfuser")
    message = str(info.value)
    assert "\n" not in message and message.startswith(
        "this thunder-aot module runs on nvFuser (nvfuser_direct)"
    )
    assert "docs/nvfuser.md" in message and "--backend triton" in message


def test_cuda_graphs_wrapper_shares_the_modules_tensors_and_calls_it_directly_off_the_gpu():
    """On CPU tensors (and inside a caller's capture) the wrapper is the module itself: same outputs,
    same state_dict keys and tensors, no graph; a bad outputs mode is one clear error. (Replays:
    tests/test_gpu_graphs.py.)"""
    from thunder_aot.examples.gpt_oss import rmsnorm
    from thunder_aot.runtime.graphs import CudaGraphs
    from thunder_aot.verify import load_module_from_text

    gen = load_module_from_text((ROOT / "generated" / "rmsnorm_torch.py").read_text(), "graphs_cpu_rmsnorm")
    module = gen.GptOssRMSNorm.from_module(rmsnorm())
    graphed = module.cuda_graphs(outputs="static")
    assert isinstance(graphed, CudaGraphs) and graphed.outputs == "static"
    assert list(graphed.state_dict()) == list(module.state_dict()) == ["weight"]
    assert graphed.weight is module.weight
    x = torch.randn(1, 15, 2880, generator=torch.Generator().manual_seed(5)).to(torch.bfloat16)
    assert torch.equal(graphed(x), module(x)) and graphed.graphs == 0
    with pytest.raises(ValueError, match="outputs must be one of 'fresh', 'static'; got 'reused'"):
        module.cuda_graphs(outputs="reused")


def test_replace_refuses_cuda_graphs_for_kv_cache_layers():
    pytest.importorskip("transformers")
    from transformers.models.llama.modeling_llama import LlamaDecoderLayer

    from thunder_aot import replace
    from thunder_aot.examples.hf import tiny_llama

    class DecoderLayerCacheCall(rt.GeneratedModule):  # the name replace() recognises; never called
        pass

    model = tiny_llama()
    with pytest.raises(ValueError, match="a graph per cache length"):
        replace(model, LlamaDecoderLayer, DecoderLayerCacheCall, cuda_graphs="fresh")
    assert type(model.model.layers[0]) is LlamaDecoderLayer  # nothing replaced


def test_setting_paths_step_through_module_containers_and_items():
    """A recorded setting path may pass through a ModuleList (``layers.0.self_attn.layer_idx``, as in
    a module holding a model's layers) and through dict and list items; a missing step is named."""
    layers = torch.nn.ModuleList([torch.nn.Module(), torch.nn.Module()])
    layers[1].eps = 1e-6
    layers[1].opts = {"bias": [False, True]}
    owner = torch.nn.Module()
    owner.layers = layers
    assert rt.setting(owner, "layers.1.eps") == 1e-6
    assert rt.setting(owner, "layers.1.opts['bias'][1]") is True
    with pytest.raises(ValueError, match="no setting 'layers.2.eps'"):
        rt.setting(owner, "layers.2.eps")
    with pytest.raises(ValueError, match="cannot read the setting path"):
        rt.setting(owner, "layers..eps")
    # an nn.Sequential's own children are numbered from the first step on
    assert rt.setting(torch.nn.Sequential(torch.nn.SiLU(inplace=True)), "0.inplace") is True
    with pytest.raises(ValueError, match="cannot read the setting path"):
        rt.setting(layers, "1.")


def test_train_mode_says_once_that_the_module_runs_in_eval_mode(monkeypatch):
    """A generated module runs its source's forward as exported (eval mode): train() says so, once per
    class; eval() says nothing."""
    import warnings

    from thunder_aot.verify import load_module_from_text

    monkeypatch.setattr(rt, "_TRAIN_WARNED", set())
    gen = load_module_from_text((ROOT / "generated" / "gated_mlp_torch.py").read_text(), "train_mode_mlp")
    module = next(
        v for v in vars(gen).values() if isinstance(v, type) and issubclass(v, rt.GeneratedModule)
    )()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        module.eval()
        module.train()
        module.train()
    assert [str(w.message).split(" runs ")[1][:45] for w in caught] == [
        "its source's forward as exported, in eval mod"
    ]
    assert module.training and type(module).__name__ in str(caught[0].message)


def test_a_call_under_autocast_runs_the_source_or_says_why_in_one_line():
    """The export traced without autocast: under it, the module's torch calls would hand its kernels
    other dtypes (a Triton compile error, an nvFuser internal assert). A module with a fallback runs its
    source's forward there (autocast's dtypes, as eager); one without says why."""
    from thunder_aot.frontend.resolve import resolve_module
    from thunder_aot.verify import load_module_from_text

    gen = load_module_from_text((ROOT / "generated" / "gated_mlp_torch.py").read_text(), "autocast_mlp")
    source = resolve_module("thunder_aot.examples.blocks:gated_mlp").eval()
    x = torch.randn(3, 256, generator=torch.Generator().manual_seed(4))

    def outside(out: torch.Tensor) -> None:  # the generated program: eager's own calls
        assert torch.equal(out, source(x))

    check_autocast_calls(getattr(gen, type(source).__name__), source, x, outside)
