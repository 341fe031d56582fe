from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def cuda_and_nvfuser() -> str | None:
    """None when GPU tests can run, else why not."""
    import importlib.util

    import torch

    if not torch.cuda.is_available():
        return "no CUDA device"
    if importlib.util.find_spec("nvfuser") is None:
        return "nvFuser is not installed"
    return None


#: test modules whose every test exports (traces a module with Thunder) or builds a wheel
TRACING_MODULES = {
    "test_cli",
    "test_coverage",
    "test_hardening",
    "test_real_models",
    "test_sound_export",
    "test_wheel",
}
#: what a test's source says when it exports, regenerates or runs the interpreter over whole modules
TRACING_CALLS = (
    'run_cli(\n        "export"',
    'run_cli("export"',
    'run_cli("check"',
    '"export", ',
    "export(ExportRequest(",
    "triton_interpreted_check",
    "bench_on_cpu",
)


def _traces(item) -> bool:
    """Whether a test takes Thunder tracing (or a whole-module interpreter run): the full tier's
    (``make test``), not the fast tier's (``make test-fast``: ``-m "not traces"``)."""
    import inspect

    if item.module.__name__.rpartition(".")[2] in TRACING_MODULES:
        return True
    try:
        source = inspect.getsource(item.function)
    except (OSError, TypeError):
        return False
    return any(call in source for call in TRACING_CALLS)


def pytest_collection_modifyitems(config, items):
    reason = None
    for item in items:
        if _traces(item):
            item.add_marker(pytest.mark.traces)
        if "gpu" in item.keywords:
            reason = reason or cuda_and_nvfuser() or ""
            if reason:
                item.add_marker(pytest.mark.skip(reason=f"GPU test: {reason}"))
