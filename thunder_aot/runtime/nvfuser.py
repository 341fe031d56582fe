"""Run-time support of generated nvFuser modules: recorded FusionDefinitions and their executes.

A generated module defines each fusion region as ``define_<region>(fd, *sizes)`` and holds it
as a :class:`Fusion` (no dynamic sizes: recorded at import) or a :class:`SizedFusions` (one
static definition per size met, recorded at that size's first call). Two nvFuser frontends take
the same definition calls: ``nvfuser_direct`` (``"direct"``) and the older ``nvfuser``
(``"legacy"``); the generated module imports its frontend's ``FusionDefinition`` and names it here.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import torch

from thunder_aot.runtime import nvfuser_kernels, versions

__all__ = ["Fusion", "SizedFusions", "contiguity", "frontend"]

#: where the install matrix lives (named by the import error of a module without nvFuser)
INSTALL_PAGE = "docs/nvfuser.md in thunder-aot's source"


def frontend(module_name: str) -> tuple[type, type]:
    """``(FusionDefinition, DataType)`` of the nvFuser frontend a generated module is written for
    (``nvfuser_direct`` or ``nvfuser``), or one ImportError line naming what to install."""
    import importlib

    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise ImportError(
            f"this thunder-aot module runs on nvFuser ({module_name}), which cannot be imported here ({e}); "
            f"install the nvFuser wheel built for your torch {torch.__version__.split('+')[0]} "
            f"({INSTALL_PAGE}), "
            "or export the module with --backend triton"
        ) from None
    return module.FusionDefinition, module.DataType


_FIRST_EXECUTE_LOCK = threading.Lock()
_DEFINE_LOCK = threading.Lock()
_NO_OPTIONS: list[str] = []


#: whether each frontend's steady call may skip ``fd.execute`` (tested releases only: runtime.versions)
_FAST_EXECUTE: dict[str, bool] = {}


def _fast_execute(frontend: str) -> bool:
    allowed = _FAST_EXECUTE.get(frontend)
    if allowed is None:
        allowed = _FAST_EXECUTE[frontend] = versions.allowed(f"nvfuser-{frontend}-execute")
    return allowed


def _steady_execute(fd, frontend: str) -> Callable[[list], list[torch.Tensor]]:
    """The call that runs ``fd`` once its first execute compiled it, without ``fd.execute``'s
    Python checks: the executor cache it created (direct), or ``fd._execute`` without the profiling,
    segmentation and multi-device options a recorded single-device definition never uses (legacy).
    On an nvFuser release these private calls were not tested with: ``fd.execute`` itself."""
    if not _fast_execute(frontend):
        return fd.execute
    if frontend == "direct":
        return fd.fec.execute

    def execute(inputs: list) -> list[torch.Tensor]:
        return fd._execute(
            inputs,
            device=None,
            override_user_schedule=False,
            capture_debug_output=False,
            profile=False,
            _enable_options=_NO_OPTIONS,
            _disable_options=_NO_OPTIONS,
        )[0]

    return execute


class Fusion:
    """A recorded FusionDefinition and the call that runs it, ``execute(inputs) -> outputs``: at
    the first call ``fd.execute`` (which compiles; first calls run one at a time, so two threads
    never compile the same definition at once; with ``THUNDER_AOT_NVFUSER_KERNELS`` set, against
    the kernels earlier processes compiled: :mod:`thunder_aot.runtime.nvfuser_kernels`), then the
    frontend's steady call."""

    __slots__ = ("fd", "execute", "ready", "frontend")

    def __init__(
        self, definition_class: type, define: Callable, *sizes: int, frontend: str = "direct"
    ) -> None:
        with definition_class() as fd:
            define(fd, *sizes)
        self.fd = fd
        self.frontend = frontend
        self.ready = False
        self.execute = self._first_execute

    def _first_execute(self, inputs: list) -> list[torch.Tensor]:
        with _FIRST_EXECUTE_LOCK:
            if not self.ready:
                store = nvfuser_kernels.active_store(self.frontend)
                if store is None:
                    outputs = self.fd.execute(inputs)
                else:  # compiled kernels looked up in (and added to) this process's copy of the store
                    with store.compiling():
                        outputs = self.fd.execute(inputs, _enable_options=[nvfuser_kernels.OPTION])
                self.execute = _steady_execute(self.fd, self.frontend)
                self.ready = True
                return outputs
        return self.execute(inputs)


class SizedFusions:
    """A region of a dynamic bucket: ``by_size`` maps its dynamic sizes (one int, or a tuple of
    several) to the :class:`Fusion` recorded for them (a plain dict, for the hot path's lookup);
    ``forward`` calls ``record`` at a size's first call. ``sizes`` are recorded at once (the exact
    buckets that share the region's program)."""

    __slots__ = ("definition_class", "define", "frontend", "by_size")

    def __init__(self, definition_class: type, define: Callable, sizes=(), frontend: str = "direct") -> None:
        self.by_size: dict = {}
        self.definition_class = definition_class
        self.define = define
        self.frontend = frontend
        for size in sizes:
            self.record(*size)

    def record(self, *sizes: int) -> Fusion:
        """The definition for these sizes, recorded once (thread-safe; nvFuser compiles it at its first
        execute)."""
        key = sizes[0] if len(sizes) == 1 else sizes
        with _DEFINE_LOCK:
            fusion = self.by_size.get(key)
            if fusion is None:
                fusion = self.by_size[key] = Fusion(
                    self.definition_class, self.define, *sizes, frontend=self.frontend
                )
        return fusion


def contiguity(shape: list[int]) -> list[bool | None]:
    """nvFuser's contiguity of a contiguous tensor: None for size-1 (broadcast) dims."""
    return [None if size == 1 else True for size in shape]
