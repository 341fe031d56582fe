"""Backends: each turns the regions of a program into code; all share the rest of the module."""

from __future__ import annotations

from typing import TYPE_CHECKING

from thunder_aot.errors import ExportError

if TYPE_CHECKING:
    from thunder_aot.backends.base import Backend


#: what ``--backend`` takes; ``auto`` resolves to one of the others (:func:`resolve_auto`)
BACKEND_CHOICES = ("auto", "nvfuser", "triton", "torch")


def resolve_auto() -> tuple[str, str]:
    """The backend ``auto`` stands for here, and why: nvFuser where it is installed and a CUDA device
    is present, else Triton on a CUDA device, else torch."""
    import importlib.util

    import torch  # here, not at the top: the CLI imports this package (for BACKEND_CHOICES) before torch

    if not torch.cuda.is_available():
        return (
            "torch",
            "no CUDA device: the module runs the source's own torch calls, so it can only match eager here",
        )
    if importlib.util.find_spec("nvfuser_direct") is not None:
        return "nvfuser", "nvFuser (nvfuser_direct) is installed"
    return "triton", "a CUDA device without nvFuser (docs/nvfuser.md says how to install it)"


def get_backend(
    name: str, *, nvfuser_dynamic: str = "specialize", nvfuser_frontend: str = "direct"
) -> Backend:
    # here, not at the top: the backends import torch (and Triton), which the CLI's --help does not load
    from thunder_aot.backends.nvfuser import NvFuserBackend
    from thunder_aot.backends.torch import TorchBackend
    from thunder_aot.backends.triton import TritonBackend

    backends: dict[str, type[Backend]] = {b.name: b for b in (NvFuserBackend, TorchBackend, TritonBackend)}
    if name not in backends:
        raise ExportError(f"unknown backend {name!r}; expected one of: {', '.join(sorted(backends))}")
    if name == "nvfuser":
        return NvFuserBackend(dynamic=nvfuser_dynamic, frontend=nvfuser_frontend)
    return backends[name]()


def __getattr__(name: str):
    if name == "Backend":  # loaded on use: the CLI imports this package for BACKEND_CHOICES alone
        from thunder_aot.backends.base import Backend

        return Backend
    raise AttributeError(f"module 'thunder_aot.backends' has no attribute {name!r}")


__all__ = ["BACKEND_CHOICES", "Backend", "get_backend", "resolve_auto"]
