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
    """torch.empty fills what it allocates with NaN (floats) or -7, so that an output element a
    kernel never writes cannot pass a comparison."""
    real_empty = torch.empty

    def poisoned_empty(*args, **kwargs):
        t = real_empty(*args, **kwargs)
        return t.fill_(float("nan")) if t.is_floating_point() else t.fill_(-7)

    torch.empty = poisoned_empty
    try:
        yield
    finally:
        torch.empty = real_empty


def run_cli(*args: str, cwd: Path = ROOT, env: dict | None = None) -> subprocess.CompletedProcess:
    full_env = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    return subprocess.run([sys.executable, "-m", "thunder_aot", *args], cwd=cwd, env=full_env, capture_output=True, text=True)
