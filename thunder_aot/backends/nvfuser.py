"""nvFuser backend (next step: see issue 3)."""

from __future__ import annotations

from thunder_aot.backends.base import Backend


class NvFuserBackend(Backend):
    name = "nvfuser"
    verify_device = "cuda"
