"""What the exporter changes in Thunder's interpreter while tracing gives Thunder's own traces."""

from __future__ import annotations

import math

import pytest
import torch

from thunder_aot.frontend.tracing_as_torch_runs import globals_read_directly

#: module-level values the forward reads as globals: a tensor (Thunder guards it in the prologue), a
#: number and a function
TABLE = torch.linspace(-1.0, 1.0, 8)
SCALE = 0.5


def _shift(x: torch.Tensor) -> torch.Tensor:
    return x + SCALE


class ReadsGlobals(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n = min(len(x.shape), 2)  # builtins
        y = _shift(x) * TABLE[: x.shape[-1]] * math.sqrt(float(n))
        return torch.nn.functional.silu(y) if isinstance(y, torch.Tensor) else y


def _without_timings(trace) -> str:
    return "\n".join(line for line in str(trace).splitlines() if "millisec" not in line)


def _traces(direct: bool, monkeypatch) -> tuple[str, str, int]:
    import thunder
    from thunder.core import interpreter

    calls = []
    thunders = interpreter.globals_lookup

    def counted(globals_dict, name):
        calls.append(name)
        return thunders(globals_dict, name)

    monkeypatch.setattr(interpreter, "globals_lookup", counted)
    jitted = thunder.jit(ReadsGlobals())
    x = torch.randn(3, 8)
    if direct:
        with globals_read_directly():
            out = jitted(x)
    else:
        out = jitted(x)
    torch.testing.assert_close(out, ReadsGlobals()(x))
    prologue = _without_timings(thunder.last_prologue_traces(jitted)[-1])
    computation = _without_timings(thunder.last_traces(jitted)[0])
    return prologue, computation, len(calls)


@pytest.mark.traces
def test_globals_read_directly_gives_thunders_traces(monkeypatch):
    """Globals (a tensor, a number, a function, modules) and builtins read directly: the same
    prologue (its guards on the tensor global) and computation as Thunder's interpreted reading,
    which is then not called at all."""
    pytest.importorskip("thunder")
    prologue, computation, thunders_reads = _traces(False, monkeypatch)
    direct_prologue, direct_computation, reads_left = _traces(True, monkeypatch)
    assert thunders_reads > 5 and reads_left == 0
    assert "TABLE" in prologue or "globals" in prologue, prologue  # the tensor global is guarded
    assert direct_prologue == prologue
    assert direct_computation == computation
