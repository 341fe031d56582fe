"""Modules export has not been built around (tests/op_zoo.py: norms, activations, softcaps,
quantizers, rotary, statistics over a dynamic dim, lookups, attention) export and verify with the
torch and Triton backends (Triton through its interpreter), and the Triton export makes every region
of the ones marked fused a kernel."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.helpers import ROOT, python_env
from tests.op_zoo import ZOO

#: every zoo module (or those named) exported with one backend in one process, and verified again
#: under the seeds 0..19 (issue 44: whether a mistake is caught must not depend on the seed): a
#: JSON line each
EXPORT_ALL = """
import json, sys, torch
from tests.op_zoo import ZOO
from thunder_aot import export
from thunder_aot.shapes import parse_shapes
from thunder_aot.verify import verify
SEEDS = range(20)
backend = sys.argv[1]
if backend == "triton":
    from thunder_aot.backends.triton import interpreter_rounds_like_the_gpu
    interpreter_rounds_like_the_gpu()
for name in sys.argv[2:] or ZOO:
    factory, shapes, _ = ZOO[name]
    torch.manual_seed(0)
    module = factory().eval()
    with torch.no_grad():
        for p in module.parameters():
            p.normal_()
    messages = []
    try:  # a fresh verification seed (a refusal names it), then every seed of SEEDS on the module
        text = export(module, shapes, backend=backend, progress=messages.append)
        for seed in SEEDS:
            verify(text, module, parse_shapes(shapes), type(module).__name__, seed=seed)
        error = None
    except Exception as e:
        error = f"{type(e).__name__}: {e}"
    print(json.dumps({"name": name, "error": error, "messages": messages}), flush=True)
"""


@pytest.mark.traces
@pytest.mark.parametrize("backend", ["torch", "triton"])
def test_every_zoo_module_exports_verified(backend):
    env = python_env(TRITON_INTERPRET="1" if backend == "triton" else "0")
    done = subprocess.run(
        [sys.executable, "-c", EXPORT_ALL, backend], cwd=ROOT, env=env, capture_output=True, text=True
    )
    results = {
        r["name"]: r
        for r in map(json.loads, (line for line in done.stdout.splitlines() if line.startswith("{")))
    }
    assert set(results) == set(ZOO), done.stderr[-3000:]
    failed = {name: r["error"] for name, r in results.items() if r["error"]}
    assert not failed, failed
    if backend != "triton":
        return
    given_up = {
        name: [m for m in r["messages"] if m.startswith("no triton kernel")] for name, r in results.items()
    }
    assert not {name: lines for name, lines in given_up.items() if ZOO[name][2] and lines}
    (log_softmax,) = given_up["log_softmax"]
    assert "verification refused them as Thunder decomposed them" in log_softmax, log_softmax
    assert any("runs as its source's torch calls" in line for line in given_up["fp8_quant"]), given_up[
        "fp8_quant"
    ]
