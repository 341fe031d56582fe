"""Which private fast paths generated modules may take in this process.

Generated Triton and nvFuser modules save microseconds per call through entry points that torch,
Triton and nvFuser do not promise to keep: Triton's C launch function called with positional
arguments, torch.compile's ``_empty_strided_cuda`` and raw-stream query, nvFuser's executor cache.
A changed signature there could read or write wrong memory instead of failing, so each fast path
is taken only where every library it touches runs a release series it was tested with (the table
below); otherwise the runtime takes the public path (``kernel[grid](...)``, ``torch.empty_strided``,
``fd.execute``) and warns once.

``THUNDER_AOT_FAST_PATHS=0`` takes the public paths everywhere; ``=1`` takes the fast paths on any
version (at your own risk: for trying a new release before this table names it).
"""

from __future__ import annotations

import importlib
import os
import sys
import warnings
from dataclasses import dataclass

__all__ = ["FAST_PATHS", "FastPath", "allowed", "running_version", "untested"]


@dataclass(frozen=True)
class FastPath:
    """A private entry point generated modules call, the public call used instead, and the release
    series (``major.minor``; a full version pins a patch release) of each library it touches that
    it was tested with."""

    name: str
    what: str
    public: str
    tested: dict[str, tuple[str, ...]]


#: the fast paths and the versions each was tested with (GPU tests: bench/results/)
FAST_PATHS: dict[str, FastPath] = {
    path.name: path
    for path in (
        FastPath(
            "triton-launch",
            "Triton's C launch function with positional arguments, "
            "torch's _empty_strided_cuda and raw stream",
            "kernel[grid](...) and torch.empty_strided",
            {"torch": ("2.11",), "triton": ("3.6",)},
        ),
        FastPath(
            "nvfuser-direct-execute",
            "nvfuser_direct's FusionExecutorCache.execute (fd.fec.execute)",
            "fd.execute",
            {"nvfuser_direct": ("0.2.35",)},
        ),
        FastPath(
            "nvfuser-legacy-execute",
            "nvfuser's FusionDefinition._execute",
            "fd.execute",
            {"nvfuser": ("0.2.35",)},
        ),
    )
}

_WARNED: set[str] = set()


def running_version(package: str) -> str | None:
    """The version of an imported (or importable) package: its ``__version__``, else None."""
    module = sys.modules.get(package)
    if module is None:
        try:
            module = importlib.import_module(package)
        except ImportError:
            return None
    version = getattr(module, "__version__", None)
    return str(version) if version is not None else None


def _in_series(version: str, series: str) -> bool:
    """``2.11.0+cu130`` is in series ``2.11``; ``0.2.35.dev20260215`` in ``0.2.35``."""
    parts = version.split("+")[0].split(".")
    wanted = series.split(".")
    return parts[: len(wanted)] == wanted


def untested(path: FastPath, versions: dict[str, str | None]) -> str | None:
    """Why ``path`` is not taken with these running versions (``package -> version``), or None."""
    for package, series in path.tested.items():
        version = versions.get(package)
        if version is None:
            return f"{package}'s version is unknown"
        if not any(_in_series(version, s) for s in series):
            return f"{package} {version} is not a tested release ({', '.join(series)})"
    return None


def allowed(name: str) -> bool:
    """Whether generated modules may take fast path ``name`` in this process (warns once if not)."""
    path = FAST_PATHS[name]
    setting = os.environ.get("THUNDER_AOT_FAST_PATHS")
    if setting in ("0", "1"):
        return setting == "1"
    reason = untested(path, {package: running_version(package) for package in path.tested})
    if reason is None:
        return True
    if name not in _WARNED:
        _WARNED.add(name)
        warnings.warn(
            f"thunder-aot: {reason}, so generated modules call {path.public} instead of {path.what} "
            "(slower per call; THUNDER_AOT_FAST_PATHS=1 forces the fast path)",
            RuntimeWarning,
            stacklevel=3,
        )
    return False
