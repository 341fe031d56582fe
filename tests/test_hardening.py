"""Issue 7 on CPU: any input either computes what the source computes or raises one clear error;
an interrupted export leaves nothing behind."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.helpers import ROOT, python_env
from thunder_aot.frontend.resolve import resolve_module
from thunder_aot.verify import load_module_from_text
from thunder_aot.verify.judge import check_call

#: every test here exports (traces with Thunder) or builds a wheel
pytestmark = pytest.mark.traces

GEN = load_module_from_text((ROOT / "generated" / "rmsnorm_torch.py").read_text(), "hardening_rmsnorm")
SOURCE = resolve_module("thunder_aot.examples.gpt_oss:rmsnorm")
AOT = GEN.GptOssRMSNorm.from_module(SOURCE)
EXACT = {15, 568, 1369}


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    lead=st.lists(st.integers(0, 3), min_size=0, max_size=2),
    rows=st.sampled_from([0, 1, 2, 15, 16, 568, 1369, 2047, 2048, 2049]),
    hidden=st.sampled_from([2880, 2879, 64]),
    dtype=st.sampled_from([torch.bfloat16, torch.float16, torch.float32]),
    strided=st.booleans(),
)
def test_any_input_is_right_or_refused_with_one_line(lead, rows, hidden, dtype, strided):
    shape = (*lead, rows, hidden)
    base = torch.randn(*shape[:-1], hidden * (2 if strided else 1)).to(dtype)
    x = base[..., ::2] if strided else base  # non-contiguous views too: the torch backend handles strides
    in_bucket = tuple(lead) == (1,) and hidden == 2880 and dtype == torch.bfloat16 and (1 <= rows <= 2048)
    with torch.no_grad():
        if in_bucket:
            check_call(SOURCE, AOT, [x], f"{tuple(x.shape)} {dtype} strided={strided}")
            return
        with pytest.raises(GEN.NoBucketError) as info:
            AOT(x)
    message = str(info.value)
    assert "\n" not in message and "expected one of: 1x15x2880:bfloat16" in message
    assert "x".join(map(str, x.shape)) in message and str(dtype).removeprefix("torch.") in message


def test_exact_buckets_serve_their_shapes_first():
    for rows in EXACT:
        x = torch.randn(1, rows, 2880, dtype=torch.bfloat16)
        with torch.no_grad():
            check_call(SOURCE, AOT, [x], f"exact {rows}")


@pytest.mark.fresh_traces  # Ctrl-C lands while Thunder traces
@pytest.mark.parametrize("delay", [0.0, 0.1, 0.2])
def test_interrupted_export_leaves_no_file(tmp_path, delay):
    """Ctrl-C in the middle of tracing, at a few points: Thunder's interpreter wraps the interrupt in
    its own error, or swallows it; either way the export stops, says so, and writes nothing."""
    out = tmp_path / "never.py"
    env = python_env()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "thunder_aot",
            "export",
            "thunder_aot.examples.gpt_oss:rmsnorm",
            "--shapes",
            "1x[1..2048]x2880:bf16; 1x[2049..4096]x2880:bf16",
            "--backend",
            "torch",
            "--out",
            str(out),
        ],
        cwd=ROOT,
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.time() + 120
    line = ""
    while time.time() < deadline and "tracing bucket 1" not in line:  # interrupt in the middle of tracing
        line = proc.stderr.readline()
        if not line and proc.poll() is not None:
            break
    time.sleep(delay)
    proc.send_signal(signal.SIGINT)
    rest = proc.communicate(timeout=120)[1]
    assert proc.returncode == 130, rest
    assert "interrupted; nothing was written" in rest and "error" not in rest
    assert list(tmp_path.iterdir()) == []


def test_an_interrupt_that_was_swallowed_still_stops_the_command(capsys):
    from thunder_aot import cli
    from thunder_aot.frontend.trace import _caused_by_interrupt

    cli._INTERRUPTED.clear()
    try:
        cli._on_sigint(signal.SIGINT, None)
    except KeyboardInterrupt:
        pass  # code the interrupt hit swallowed it
    with pytest.raises(KeyboardInterrupt):
        cli._progress("tracing the next bucket")
    assert "tracing the next bucket" not in capsys.readouterr().err
    cli._INTERRUPTED.clear()
    cli._progress("goes on")
    assert "goes on" in capsys.readouterr().err
    # every command says what an interrupt left behind
    commands = set(next(a for a in cli.parser()._actions if a.dest == "command").choices)
    assert set(cli._WRITTEN_WHEN_INTERRUPTED) == commands == {"export", "check", "bench"}
    try:
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt as e:
            raise RuntimeError("Encountered exception KeyboardInterrupt") from e
    except RuntimeError as wrapped:
        assert _caused_by_interrupt(wrapped) and not _caused_by_interrupt(RuntimeError("other"))
