"""Sound export: a correct module exports whatever verification's seed (its numerics judged
against float64, not one fixed tolerance), and every refusal names the seed that repeats it."""

from __future__ import annotations

import os
import re
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


def test_settings_read_at_any_depth_are_recorded_and_checked(tmp_path):
    """``self.config.shift``, ``self.config.rope["theta"]``, ``self.opts["bias"]``: baked into the
    trace, so listed in EXPORTED_SETTINGS, and from_module refuses a source whose values differ."""
    from thunder_aot.verify import load_module_from_text

    text = export(ExportRequest("tests.sound_modules:configured_scale", ("[1..8]x16",), backend="torch"))
    gen = load_module_from_text(text, "gen_configured")
    assert gen.ConfiguredScale.EXPORTED_SETTINGS == {"config.shift": 0.5, "config.rope['theta']": 10000.0, "opts['bias']": 1.5}
    source = resolve_module("tests.sound_modules:configured_scale")
    x = torch.randn(3, 16)
    torch.testing.assert_close(gen.ConfiguredScale.from_module(source)(x), source(x))
    for change, path in ((lambda s: setattr(s.config, "shift", 0.25), "config.shift=0.5"),
                         (lambda s: s.config.rope.update(theta=500000.0), "config.rope['theta']=10000.0"),
                         (lambda s: s.opts.update(bias=2), "opts['bias']=1.5")):
        other = resolve_module("tests.sound_modules:configured_scale")
        change(other)
        with pytest.raises(ValueError, match=re.escape(f"was exported for {path}; the source has")):
            gen.ConfiguredScale.from_module(other)
