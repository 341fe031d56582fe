from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent


@contextlib.contextmanager
def poisoned_outputs():
    """torch.empty and torch.empty_like fill what they allocate with NaN (floats) or -7, so that an
    output element a kernel never writes cannot pass a comparison."""
    real = {name: getattr(torch, name) for name in ("empty", "empty_like")}

    def poisoning(allocate):
        def allocate_poisoned(*args, **kwargs):
            t = allocate(*args, **kwargs)
            return t.fill_(float("nan")) if t.is_floating_point() else t.fill_(-7)

        return allocate_poisoned

    for name, allocate in real.items():
        setattr(torch, name, poisoning(allocate))
    try:
        yield
    finally:
        for name, allocate in real.items():
            setattr(torch, name, allocate)


def run_cli(*args: str, cwd: Path = ROOT, env: dict | None = None) -> subprocess.CompletedProcess:
    full_env = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    return subprocess.run([sys.executable, "-m", "thunder_aot", *args], cwd=cwd, env=full_env, capture_output=True, text=True)
