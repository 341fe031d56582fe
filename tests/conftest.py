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


def pytest_collection_modifyitems(config, items):
    reason = None
    for item in items:
        if "gpu" in item.keywords:
            reason = reason or cuda_and_nvfuser() or ""
            if reason:
                item.add_marker(pytest.mark.skip(reason=f"GPU test: {reason}"))
