"""Backends: each turns the regions of a program into code; all share the rest of the module."""

from __future__ import annotations

from thunder_aot.backends.base import Backend
from thunder_aot.errors import ExportError


def get_backend(name: str, *, nvfuser_dynamic: str = "specialize", nvfuser_frontend: str = "direct") -> Backend:
    from thunder_aot.backends.nvfuser import NvFuserBackend
    from thunder_aot.backends.torch import TorchBackend
    from thunder_aot.backends.triton import TritonBackend

    backends: dict[str, type[Backend]] = {b.name: b for b in (NvFuserBackend, TorchBackend, TritonBackend)}
    if name not in backends:
        raise ExportError(f"unknown backend {name!r}; expected one of: {', '.join(sorted(backends))}")
    if name == "nvfuser":
        return NvFuserBackend(dynamic=nvfuser_dynamic, frontend=nvfuser_frontend)
    return backends[name]()


__all__ = ["Backend", "get_backend"]
