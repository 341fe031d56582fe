"""Merged projections (passes.merge_projections, GeneratedModule.merge_projections): linear layers on one
input
become one matmul over their concatenated weights; the module's parameters, and its source's,
become views of that tensor, and every way of changing them stays right or fails clearly."""

from __future__ import annotations

import copy
import re

import pytest
import torch

import thunder_aot
from tests.merge_modules import BiasedQkv, MixedProjections
from thunder_aot.verify.judge import check_outputs

GATED = "thunder_aot.examples.blocks:gated_mlp"


def _export(module, shapes, tmp_path, name="gen.py", **kwargs):
    out = tmp_path / name
    thunder_aot.export(module, shapes, backend="torch", out=out, **kwargs)
    return thunder_aot.load(out), out.read_text()


def _inputs(*shapes, seed=0):
    generator = torch.Generator().manual_seed(seed)
    return [torch.randn(*s, generator=generator) for s in shapes]


def _eager_linears(text: str) -> int:
    """Linear calls the module runs eagerly (not the member calls it runs while torch.compile traces)."""
    eager = re.sub(r"torch\.cat\(\s*\((?:.|\n)*?\)\s*if dynamo_compiling\(\)", "", text)
    return eager.count("torch.nn.functional.linear(")


def _class(gen):
    return getattr(gen, gen._OWNER)


@pytest.mark.traces
def test_projections_on_one_input_become_one_matmul_sharing_the_source_weights(tmp_path):
    torch.manual_seed(0)
    source = BiasedQkv()
    before = {k: v.clone() for k, v in source.state_dict().items()}
    gen, text = _export(source, "[S=1..8]x64", tmp_path)
    assert _eager_linears(text) == 1, "q/k/v: one matmul"
    cls = _class(gen)
    assert cls.MERGED == (
        ("merged_q_proj_k_proj_v_proj_weight", ("q_proj.weight", "k_proj.weight", "v_proj.weight")),
        ("merged_q_proj_k_proj_v_proj_bias", ("q_proj.bias", "k_proj.bias", "v_proj.bias")),
    )
    aot = cls.from_module(source)
    # the source's parameters are the same objects with the same values, now views of the merged tensors
    for key, value in source.state_dict().items():
        torch.testing.assert_close(value, before[key], rtol=0, atol=0)
        assert aot.get_parameter(key) is source.get_parameter(key)
    merged = aot.get_buffer("merged_q_proj_k_proj_v_proj_weight")
    assert source.q_proj.weight.data_ptr() == merged.data_ptr()
    assert source.v_proj.weight.data_ptr() == merged.data_ptr() + (64 + 16) * 64 * 4
    assert set(aot.state_dict()) == set(source.state_dict()), "the merged buffers are not state"
    with torch.no_grad():
        for n in (1, 5, 8):
            (x,) = _inputs((n, 64), seed=n)
            check_outputs(source, [x], aot(x), f"S={n}")
        # an in-place update of a member reaches the merged matmul
        source.k_proj.weight.mul_(-2.0)
        source.v_proj.bias.add_(1.0)
        (x,) = _inputs((7, 64), seed=7)
        check_outputs(source, [x], aot(x), "after in-place updates")


@pytest.mark.traces
def test_what_cannot_be_merged_stays_apart(tmp_path):
    torch.manual_seed(1)
    source = MixedProjections()
    gen, text = _export(source, "[S=1..8]x32, [S]x32", tmp_path)
    assert _class(gen).MERGED == (("merged_a_b_weight", ("a.weight", "b.weight")),)
    assert _eager_linears(text) == 3  # a+b, c (its bias), d (another input)
    aot = _class(gen).from_module(source)
    x, y = _inputs((6, 32), (6, 32))
    with torch.no_grad():
        check_outputs(source, [x, y], aot(x, y), "S=6")


@pytest.mark.traces
def test_replaced_weights_are_merged_again(tmp_path):
    """load_state_dict (copying or assigning), .to() of the module or of its source (as a model's
    .to() after replace converts the layers it holds), a parameter replaced by hand: the module's
    next call computes with the current weights; the module-level forward() names the parameter."""
    from thunder_aot.examples.blocks import gated_mlp

    torch.manual_seed(2)
    source = gated_mlp()
    gen, _ = _export(GATED, "[1..16]x256:fp32", tmp_path)
    cls = _class(gen)
    aot = cls.from_module(source)
    other = gated_mlp()
    with torch.no_grad():
        for p in other.parameters():
            p.normal_()
    (x,) = _inputs((9, 256), seed=3)
    with torch.no_grad():
        aot.load_state_dict(other.state_dict())  # copies into the views
        check_outputs(other, [x], aot(x), "after load_state_dict")
        fresh = cls()  # uninitialised, then assigned
        fresh.load_state_dict(copy.deepcopy(other.state_dict()), assign=True)
        check_outputs(other, [x], fresh(x), "after load_state_dict(assign=True)")
        moved = fresh.to(torch.float64).to(torch.float32)  # converts the members, merges again
        check_outputs(other, [x], moved(x), "after .to()")
        aot.up_proj.weight = torch.nn.Parameter(torch.randn(512, 256))
        state = [aot.get_parameter(k) for k, *_ in cls.STATE] + [
            aot.get_buffer("merged_gate_proj_up_proj_weight")
        ]
        with pytest.raises(
            ValueError,
            match=r"up_proj.weight is no longer a view of merged_gate_proj_up_proj_weight"
            r".*merge_projections\(\)",
        ):
            gen.forward(x, *state)
        want = copy.deepcopy(other)
        want.up_proj.weight.copy_(aot.up_proj.weight)
        check_outputs(want, [x], aot(x), "after a replaced parameter")
        # the source converted on its own (the generated module outside its module tree)
        built = cls.from_module(other)
        other.to(torch.float64).to(torch.float32)
        assert not built._merged_intact()
        check_outputs(other, [x], built(x), "after the source's .to()")
        assert built._merged_intact()


@pytest.mark.traces
def test_a_merged_module_pickles_and_its_copy_is_merged(tmp_path):
    import pickle
    import sys

    from thunder_aot.examples.blocks import gated_mlp

    torch.manual_seed(6)
    source = gated_mlp()
    gen, _ = _export(GATED, "[1..16]x256:fp32", tmp_path)
    sys.modules[gen.__name__] = gen  # pickle finds the class by its module's name
    aot = _class(gen).from_module(source)
    again = pickle.loads(pickle.dumps(aot))  # pickle copies views apart: the first call merges again
    (x,) = _inputs((4, 256), seed=7)
    with torch.no_grad():
        check_outputs(source, [x], again(x), "unpickled")
    assert again._merged_intact(), "the copy's parameters are views of its own merged tensor"


@pytest.mark.traces
def test_two_modules_built_from_one_source_share_its_merged_weights(tmp_path):
    from thunder_aot.examples.blocks import gated_mlp

    torch.manual_seed(3)
    source = gated_mlp()
    gen, _ = _export(GATED, "[1..16]x256:fp32", tmp_path)
    first, second = _class(gen).from_module(source), _class(gen).from_module(source)
    key = "merged_gate_proj_up_proj_weight"
    assert (
        first.get_buffer(key).data_ptr()
        == second.get_buffer(key).data_ptr()
        == source.gate_proj.weight.data_ptr()
    )
    (x,) = _inputs((4, 256), seed=4)
    with torch.no_grad():
        check_outputs(source, [x], first(x), "first")
        check_outputs(source, [x], second(x), "second")


@pytest.mark.traces
def test_no_merge_projections_keeps_one_matmul_per_layer(tmp_path):
    torch.manual_seed(4)
    gen, text = _export(GATED, "[1..16]x256:fp32", tmp_path, merge_projections=False)
    assert _class(gen).MERGED == () and _eager_linears(text) == 3
    assert "--no-merge-projections" in text.splitlines()[1], "the header's command regenerates it so"


class _SharedWeight(torch.nn.Module):
    """``a``'s weight also projects another input: only the calls on ``x`` are merged; the call on
    ``y`` reads ``a.weight``'s view."""

    def __init__(self) -> None:
        super().__init__()
        self.a = torch.nn.Linear(32, 32, bias=False)
        self.b = torch.nn.Linear(32, 16, bias=False)

    def forward(self, x, y):
        return torch.cat([torch.relu(self.a(x)), self.b(x)], -1).sum(-1) + self.a(y).sum(-1)


@pytest.mark.traces
def test_a_member_weight_read_elsewhere_keeps_its_other_calls(tmp_path):
    torch.manual_seed(5)
    source = _SharedWeight()
    gen, text = _export(source, "[S=1..8]x32, [S]x32", tmp_path)
    assert _class(gen).MERGED == (("merged_a_b_weight", ("a.weight", "b.weight")),)
    assert _eager_linears(text) == 2
    aot = _class(gen).from_module(source)
    x, y = _inputs((3, 32), (3, 32), seed=6)
    with torch.no_grad():
        check_outputs(source, [x, y], aot(x, y), "S=3")


@pytest.mark.traces
def test_merged_projections_trace_as_one_graph_and_read_the_members(tmp_path):
    """Under torch.compile(fullgraph=True) a merged module is one graph (dynamo cannot trace the
    data_ptr() tests of the members, so the traced program reads the members themselves): its
    output matches the source, also after a member was replaced without merging again."""
    torch._dynamo.reset()
    torch.manual_seed(4)
    source = BiasedQkv()
    gen, _ = _export(source, "[S=1..8]x64", tmp_path)
    aot = _class(gen).from_module(source)
    compiled = torch.compile(aot, fullgraph=True, backend="eager")
    with torch.no_grad():
        (x,) = _inputs((5, 64), seed=5)
        check_outputs(source, [x], compiled(x), "compiled, merged")
        # a member replaced by hand: the merged buffer is stale, the traced program is not
        source.k_proj.weight = torch.nn.Parameter(torch.randn(16, 64))
        aot.k_proj.weight = source.k_proj.weight
        assert not aot._merged_intact()
        check_outputs(source, [x], compiled(x), "compiled, a member replaced")
    torch._dynamo.reset()
