"""The identity-call pass (passes.drop_identity_calls): torch calls that return their input at the recorded
arguments (eval-mode dropout) are dropped, their readers take the input; other calls stay."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from thunder_aot.ir import Const, Ref, TensorSpec, TorchCall, Value
from thunder_aot.passes.drop_identity_calls import returns_its_input
from thunder_aot.verify import load_module_from_text
from thunder_aot.verify.judge import check_outputs

_OUT = (Value("t1", TensorSpec((4, 16), "float32")),)


@pytest.mark.parametrize(
    "target,args,kwargs,expected",
    [
        ("torch.nn.functional.dropout", (Ref("x"), Const(0.1), Const(False), Const(False)), (), "x"),
        ("torch.nn.functional.dropout", (Ref("x"),), (("p", Const(0.0)),), "x"),  # training defaults to True
        ("torch.nn.functional.dropout", (Ref("x"),), (("training", Const(False)),), "x"),
        ("torch.nn.functional.dropout2d", (Ref("x"), Const(0.2), Const(False)), (), "x"),
        ("torch.dropout", (Ref("x"), Const(0.3), Const(False)), (), "x"),
        ("torch.nn.functional.dropout", (Ref("x"), Const(0.1), Const(True)), (), None),  # drops elements
        ("torch.nn.functional.dropout", (Ref("x"),), (), None),  # p=0.5, training=True by default
        (
            "torch.nn.functional.dropout",
            (Ref("x"), Ref("p"), Const(True)),
            (),
            None,
        ),  # p known at run time only
        (
            "torch.nn.functional.dropout",
            (Ref("x"), Const(False)),
            (("p", Const(0.1)),),
            None,
        ),  # p twice: not bound
        ("torch.nn.functional.relu", (Ref("x"),), (), None),
    ],
)
def test_which_calls_return_their_input(target, args, kwargs, expected):
    assert returns_its_input(TorchCall(target, _OUT, args, kwargs)) == expected


class LinearThenDropout(nn.Module):
    """Starcoder2's MLP tail: a projection, then dropout as transformers spells it, then more work."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(16, 16)
        self.drop = nn.Dropout(0.1)
        self.p = 0.0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.drop(self.proj(x))
        out = F.dropout(self.proj(h), p=self.p, training=True)  # p == 0: torch returns its input
        return torch.tanh(out) + h


def linear_then_dropout() -> nn.Module:
    torch.manual_seed(0)
    return LinearThenDropout()


@pytest.mark.traces
def test_eval_mode_dropouts_leave_no_call_and_the_module_still_matches():
    from thunder_aot.pipeline import export
    from thunder_aot.request import ExportRequest

    text = export(
        ExportRequest("tests.test_identity_calls:linear_then_dropout", ("[S=1..8]x16",), backend="torch"),
        progress=lambda m: None,
    )  # verifies against float64
    code = text.split("\nclass ")[0]
    calls = [line for line in code.splitlines() if "dropout(" in line and not line.lstrip().startswith("#")]
    assert not calls and "# " in code and "dropout" in code, calls  # the source lines stay as comments
    gen = load_module_from_text(text, "gen_linear_then_dropout")
    source = linear_then_dropout().eval()
    module = gen.LinearThenDropout.from_module(source)
    x = torch.randn(5, 16, generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        check_outputs(source, [x], module(x), "S=5")
