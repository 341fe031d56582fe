"""The write-back pass (passes.drop_unobserved_write_backs): in-place ops' copies into fresh intermediates are
dropped; copies something observes (a view taken before, the caller's own tensor) stay, and every
module still computes what its source does."""

from __future__ import annotations

import pytest
import torch

import thunder_aot
from tests.writeback_modules import BiasAddInPlace, InPlaceOnInput, ViewedThenInPlace
from thunder_aot.verify.judge import check_outputs


def _export(module, shapes, tmp_path):
    out = tmp_path / "gen.py"
    thunder_aot.export(module, shapes, backend="torch", out=out)  # verifies against float64
    text = out.read_text()
    return thunder_aot.load(out), text.split("\nclass ")[0]  # the code before the class: forward's steps


@pytest.mark.traces
@pytest.mark.parametrize(
    "module,copies", [(BiasAddInPlace, 0), (ViewedThenInPlace, "some")], ids=["fresh", "viewed"]
)
def test_write_backs_into_fresh_tensors_are_dropped_and_observed_ones_kept(module, copies, tmp_path):
    torch.manual_seed(0)
    source = module()
    gen, code = _export(source, "[S=2..8]x16", tmp_path)
    if copies == "some":  # the write-backs a view observes stay (Thunder writes them back per view)
        assert code.count("copy_(") >= 1, code
    else:  # the source has two in-place ops (Thunder writes each back): both dropped
        assert code.count("copy_(") == copies, code
    aot = getattr(gen, module.__name__).from_module(source)
    x = torch.randn(5, 16, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        check_outputs(source, [x.clone()], aot(x.clone()), "S=5")


@pytest.mark.traces
def test_a_write_back_into_the_callers_tensor_stays(tmp_path):
    source = InPlaceOnInput()
    gen, code = _export(source, "[S=1..8]x16", tmp_path)
    aot = gen.InPlaceOnInput.from_module(source)
    x = torch.randn(3, 16, generator=torch.Generator().manual_seed(2))
    mine, theirs = x.clone(), x.clone()
    with torch.no_grad():
        torch.testing.assert_close(aot(mine), source(theirs))
    torch.testing.assert_close(mine, theirs, rtol=0, atol=0)  # the caller's tensor was updated the same
