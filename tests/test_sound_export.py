"""Sound export: a correct module exports whatever verification's seed (its numerics judged
against float64, not one fixed tolerance), and every refusal names the seed that repeats it."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

from tests.examples import EXPORTS
from tests.helpers import ROOT, run_cli
from tests.sound_modules import CORRECT
from thunder_aot.errors import ExportError
from thunder_aot.export import ExportRequest, export
from thunder_aot.export.resolve import resolve_module
from thunder_aot.shapes import parse_shapes
from thunder_aot.verify import verify
from thunder_aot.verify.judge import judge_output, reference64

SEEDS = range(20)

#: export once, then verify under 20 seeds (in a fresh process: Triton's interpreter is chosen at import)
SEEDED_VERIFY = """
import sys
from thunder_aot.export import ExportRequest, export
from thunder_aot.export.resolve import resolve_module
from thunder_aot.shapes import parse_shapes
from thunder_aot.verify import verify
source, shapes, backend = sys.argv[1:4]
if backend == "triton":
    from thunder_aot.backends.triton import interpreter_rounds_like_the_gpu
    interpreter_rounds_like_the_gpu()
text = export(ExportRequest(source, (shapes,), backend=backend), verify=False)
module = resolve_module(source).eval()
calls = [verify(text, module, parse_shapes(shapes), type(module).__name__, seed=seed) for seed in range(20)]
print("verified", len(calls), "seeds", min(calls), "calls each")
"""

@pytest.mark.parametrize("backend", ["torch", "triton"])
@pytest.mark.parametrize("source,shapes", CORRECT, ids=[c[0].split(":")[1] for c in CORRECT])
def test_correct_modules_export_under_20_of_20_seeds(source, shapes, backend):
    """Each once refused on rounding: an fp32 output computed through bf16, an fp32 MLP reducing over
    512, an fp16 RMSNorm without upcast (eager rounds every step in fp16; the kernel is the more
    accurate). Triton through its interpreter."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TRITON_INTERPRET": "1" if backend == "triton" else "0"}
    result = subprocess.run([sys.executable, "-c", SEEDED_VERIFY, source, shapes, backend], cwd=ROOT, env=env,
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.startswith("verified 20 seeds")

def test_the_stored_examples_verify_under_20_seeds():
    """The bundled examples' torch-backend modules in generated/: no false refusal over 20 seeds."""

    refused = []
    for stem, source, shapes in EXPORTS:
        text = (ROOT / "generated" / f"{stem}_torch.py").read_text()
        module = resolve_module(source).eval()
        for seed in range(20):
            try:
                verify(text, module, parse_shapes(shapes), type(module).__name__, seed=seed)
            except ExportError as e:
                refused.append(str(e))
    assert not refused, refused[:3]

def test_judgement_accepts_rounding_refuses_errors_and_wants_eager_non_finite_values():
    torch.manual_seed(0)
    module = resolve_module("tests.sound_modules:fp32_output_through_bf16")
    x = torch.randn(1, 7, 256, dtype=torch.bfloat16)
    expected, ref = module(x), reference64(module, [x])
    judge_output(expected, expected.bfloat16().float(), ref, "rounded once more")  # one rounding step: accepted
    with pytest.raises(ExportError, match="error against float64"):
        judge_output(expected, expected * 1.01, ref, "1% off")
    wrong = expected.clone()
    wrong[0, 3, 5] += 0.5
    with pytest.raises(ExportError, match="largest"):
        judge_output(expected, wrong, ref, "one element off")
    nan = expected.clone()
    nan[0, 0, 0] = float("nan")
    with pytest.raises(ExportError, match=r"non-finite values differ.*at \[0, 0, 0\], the generated module nan"):
        judge_output(expected, nan, ref, "a NaN eager has not")
    relu_nan = torch.tensor([float("nan"), 1.0, float("inf")])
    with pytest.raises(ExportError, match=r"eager has NaN at \[0\], the generated module 0.0"):
        judge_output(relu_nan, torch.tensor([0.0, 1.0, float("inf")]), None, "relu of NaN as where(x > 0, x, 0)")
    judge_output(relu_nan, torch.tensor([float("nan"), 1.0, float("nan")]), None, "inf times a zero one side rounded to")
    ints = torch.arange(6)
    with pytest.raises(ExportError, match="an exact dtype"):
        judge_output(ints, ints + (ints == 3), None, "integers")

def test_a_refusal_names_the_seed_that_repeats_it(tmp_path):
    """A module whose generated code is wrong (edited by hand here) is refused with its seed, and the
    same seed gives the same verdict."""
    source, shapes = "thunder_aot.examples.gpt_oss:rmsnorm", "1x[1..8]x2880:bf16"
    text = export(ExportRequest(source, (shapes,), backend="torch"), verify=False)
    broken = text.replace("t8 = variance + 1e-05", "t8 = variance + 1e-01")
    assert broken != text
    module = resolve_module(source)
    messages = []
    for _ in range(2):
        with pytest.raises(ExportError) as info:
            verify(broken, module, parse_shapes(shapes), "GptOssRMSNorm", seed=7)
        messages.append(str(info.value))
    assert messages[0] == messages[1] and messages[0].endswith("(verification seed 7: --verify-seed 7 repeats these inputs)")

def test_export_prints_its_verification_seed_and_takes_one():
    result = run_cli("export", "thunder_aot.examples.gpt_oss:rmsnorm", "--shapes", "1x[1..8]x2880:bf16",
                     "--backend", "torch", "--verify-seed", "11")
    assert result.returncode == 0, result.stderr[-2000:]
    assert "against float64; seed 11)" in result.stderr
    assert "--verify-seed" not in result.stdout  # the header's regenerate command does not depend on it
    assert os.environ.get("TRITON_INTERPRET") != "1"
