"""Private fast paths only on tested releases (thunder_aot.runtime.versions): the decision, the
warning, and a generated Triton module under Triton's interpreter on either branch (the GPU
branches: tests/test_gpu.py)."""

from __future__ import annotations

import json
import subprocess
import sys
import types
import warnings

import pytest

from tests.helpers import ROOT
from thunder_aot.runtime import versions
from thunder_aot.runtime.versions import FAST_PATHS, untested

LAUNCH = FAST_PATHS["triton-launch"]


@pytest.mark.parametrize(
    "running,reason",
    [
        ({"torch": "2.11.0+cu130", "triton": "3.6.0"}, None),
        ({"torch": "2.11.1", "triton": "3.6.1"}, None),
        ({"torch": "2.12.0", "triton": "3.6.0"}, "torch 2.12.0 is not a tested release (2.11)"),
        ({"torch": "2.11.0", "triton": "3.7.0"}, "triton 3.7.0 is not a tested release (3.6)"),
        ({"torch": "2.11.0", "triton": "3.60.0"}, "triton 3.60.0 is not a tested release (3.6)"),
        ({"torch": "2.11.0", "triton": None}, "triton's version is unknown"),
    ],
)
def test_untested_names_the_first_library_off_the_table(running, reason):
    assert untested(LAUNCH, running) == reason


def test_nvfuser_dev_builds_match_their_release():
    path = FAST_PATHS["nvfuser-direct-execute"]
    assert untested(path, {"nvfuser_direct": "0.2.35.dev20260215"}) is None
    assert (
        untested(path, {"nvfuser_direct": "0.2.36"})
        == "nvfuser_direct 0.2.36 is not a tested release (0.2.35)"
    )


@pytest.fixture
def fake_library(monkeypatch):
    """A library ``fakelib`` at a version the test sets, and a fast path tested with 1.2 of it."""
    module = types.ModuleType("fakelib")
    monkeypatch.setitem(sys.modules, "fakelib", module)
    monkeypatch.setitem(
        FAST_PATHS,
        "fake",
        versions.FastPath("fake", "fakelib._private", "fakelib.public", {"fakelib": ("1.2",)}),
    )
    monkeypatch.setattr(versions, "_WARNED", set())
    monkeypatch.delenv("THUNDER_AOT_FAST_PATHS", raising=False)
    return module


def test_allowed_warns_once_on_an_untested_release(fake_library):
    fake_library.__version__ = "1.3.0"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert versions.allowed("fake") is False
        assert versions.allowed("fake") is False
    assert [str(w.message) for w in caught] == [
        "thunder-aot: fakelib 1.3.0 is not a tested release (1.2), so generated modules call fakelib.public "
        "instead of fakelib._private (slower per call; THUNDER_AOT_FAST_PATHS=1 forces the fast path)"
    ]
    assert caught[0].category is RuntimeWarning


def test_allowed_on_a_tested_release_and_the_environment_overrides(fake_library, monkeypatch):
    fake_library.__version__ = "1.2.7"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert versions.allowed("fake") is True
        monkeypatch.setenv("THUNDER_AOT_FAST_PATHS", "0")
        assert versions.allowed("fake") is False
        fake_library.__version__ = "9.0"
        monkeypatch.setenv("THUNDER_AOT_FAST_PATHS", "1")
        assert versions.allowed("fake") is True


def _fast_path_check(*simulated: str) -> dict:
    """tests/fast_path_check.py on the gated MLP's Triton module (its kernel's launch is what is
    decided; under the interpreter the seed's RMSNorm at 2,048 x 2,880 took three minutes a test)."""
    env = {"TRITON_INTERPRET": "1", "PATH": "/usr/bin:/bin"}
    out = subprocess.run(
        [sys.executable, "tests/fast_path_check.py", "gated_mlp", "triton", *simulated],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.traces
def test_triton_module_on_an_untested_triton_takes_the_public_launch_and_matches():
    result = _fast_path_check("torch=2.11.0", "triton=3.7.0")
    assert result["fast"] is False
    assert result["compiled"] == 0
    assert result["checked"] >= 8
    assert len(result["warnings"]) == 1 and "triton 3.7.0 is not a tested release" in result["warnings"][0]


@pytest.mark.traces
def test_triton_module_on_a_tested_release_decides_for_the_fast_launch():
    # under the interpreter every launch runs through it: what the runtime decided is what is checked
    result = _fast_path_check("torch=2.11.0+cpu", "triton=3.6.0")
    assert result["fast"] is True
    assert result["warnings"] == []
    assert result["checked"] >= 8
