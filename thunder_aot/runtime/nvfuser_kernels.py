"""nvFuser's compiled kernels kept between processes (opt-in: ``THUNDER_AOT_NVFUSER_KERNELS=<dir>``).

A generated nvFuser module records its FusionDefinitions at import and nvFuser compiles each at its
first execute (NVRTC: hundreds of milliseconds per kernel), in every new process: the direct
bindings keep nothing on disk. nvFuser's own kernel database (``NVFUSER_ENABLE=kernel_db``) does:
before NVRTC it looks the generated CUDA source and the NVRTC options up in
``$TMPDIR/nvfuser_kernel_db/db.csv`` and loads the CUBIN stored next to it, and it stores what it
compiles. It is keyed by the exact kernel source and options (the GPU architecture among them), not
by nvFuser's version, and it numbers its files from what it read at its first use, so two processes
that write one database at once can pair a kernel's source with another's binary.

So this store never lets nvFuser write the shared directory:

- ``<dir>/<key>/`` per nvFuser frontend, nvFuser version and CUDA version (an upgrade starts empty);
  inside it, generations (``g<time>-<pid>/nvfuser_kernel_db``) and ``CURRENT`` naming the newest;
- a process copies the current generation into a private directory at its first compile and points
  nvFuser's database there (``TMPDIR`` during its first executes, the database option on each);
- at exit (or :func:`publish`) a process that compiled new kernels writes its database as a new
  generation and makes it current (an atomic rename, under a lock), unless another process
  published since it copied: then the newer one stays (its kernels are compiled again next time).

Fill the store once, in one process (``module.warmup(...)`` over the sizes served), before starting
many: processes started together all copy the same generation.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import tempfile
import threading
import time
from pathlib import Path

import torch

from thunder_aot.runtime.versions import running_version

__all__ = ["VARIABLE", "KernelStore", "active_store", "publish"]

#: names the directory where compiled kernels are kept; unset: nvFuser compiles in every process
VARIABLE = "THUNDER_AOT_NVFUSER_KERNELS"
#: nvFuser's option that makes it look kernels up and store them (``NVFUSER_ENABLE=kernel_db``)
OPTION = "kernel_db"
_DB = "nvfuser_kernel_db"
_INDEX = "db.csv"


class KernelStore:
    """A directory of nvFuser kernel databases shared by processes (see the module docstring)."""

    def __init__(self, root: Path, key: str) -> None:
        self.root = Path(root) / key
        self.private: Path | None = None
        self._copied: str | None = None  # the generation copied (None: the store was empty)
        self._entries_copied = 0
        self._lock = threading.Lock()

    # --- the shared side ---------------------------------------------------------------------

    def current(self) -> str | None:
        try:
            name = (self.root / "CURRENT").read_text().strip()
        except FileNotFoundError:
            return None
        return name if name and (self.root / name / _DB).is_dir() else None

    @contextlib.contextmanager
    def _locked(self):
        import fcntl

        self.root.mkdir(parents=True, exist_ok=True)
        with open(self.root / ".lock", "a") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    # --- this process's side -----------------------------------------------------------------

    def open(self) -> Path:
        """This process's private copy of the current generation (made once): the directory to
        give nvFuser as ``TMPDIR``."""
        with self._lock:
            if self.private is None:
                private = Path(tempfile.mkdtemp(prefix="thunder-aot-nvfuser-"))
                with self._locked():
                    self._copied = self.current()
                    if self._copied is not None:
                        shutil.copytree(self.root / self._copied / _DB, private / _DB)
                self._entries_copied = _entries(private)
                self.private = private
            return self.private

    def publish(self) -> str | None:
        """Make this process's database the current generation where it holds kernels the copied
        one lacked and no other process published since: the new generation's name, else None."""
        with self._lock:
            if self.private is None or _entries(self.private) <= self._entries_copied:
                return None
            with self._locked():
                if self.current() != self._copied:
                    return None  # another process published first: keep its generation
                name = f"g{time.time_ns()}-{os.getpid()}"
                staging = self.root / f".{name}"
                shutil.copytree(self.private / _DB, staging / _DB)
                staging.rename(self.root / name)
                index = self.root / f".CURRENT-{os.getpid()}"
                index.write_text(name + "\n")
                index.replace(self.root / "CURRENT")
                if self._copied is not None:
                    shutil.rmtree(self.root / self._copied, ignore_errors=True)
                self._copied, self._entries_copied = name, _entries(self.private)
                return name

    def close(self) -> None:
        """Publish (see :meth:`publish`), then remove the private copy."""
        try:
            self.publish()
        finally:
            if self.private is not None:
                shutil.rmtree(self.private, ignore_errors=True)
                self.private = None

    @contextlib.contextmanager
    def compiling(self):
        """Around a first execute: nvFuser's database in this process's private copy (``TMPDIR``
        names it while nvFuser may create its database)."""
        private = str(self.open())
        before = os.environ.get("TMPDIR")
        os.environ["TMPDIR"] = private
        try:
            yield
        finally:
            if before is None:
                os.environ.pop("TMPDIR", None)
            else:
                os.environ["TMPDIR"] = before


def _entries(private: Path) -> int:
    try:
        with open(private / _DB / _INDEX) as handle:
            return sum(1 for line in handle if line.strip())
    except FileNotFoundError:
        return 0


_ACTIVE: dict[str, KernelStore | None] = {}
_ACTIVE_LOCK = threading.Lock()


def store_key(frontend: str) -> str | None:
    """``<frontend>-nvfuser<version>-cuda<version>``, or None where a version is unknown (a store
    that could serve another release's binaries is not used)."""
    nvfuser = running_version("nvfuser_direct" if frontend == "direct" else "nvfuser")
    if nvfuser is None or torch.version.cuda is None:
        return None
    return f"{frontend}-nvfuser{nvfuser}-cuda{torch.version.cuda}"


def active_store(frontend: str) -> KernelStore | None:
    """The store this process uses for ``frontend``'s kernels: None unless :data:`VARIABLE` names a
    directory (and the versions are known). Published at exit."""
    with _ACTIVE_LOCK:
        if frontend not in _ACTIVE:
            root = os.environ.get(VARIABLE)
            key = store_key(frontend) if root else None
            store = _ACTIVE[frontend] = KernelStore(Path(root), key) if key else None
            if store is not None:
                atexit.register(store.close)
        return _ACTIVE[frontend]


def publish() -> list[str]:
    """Publish every active store now (e.g. after a server's warmup): the generations made."""
    return [
        name for store in list(_ACTIVE.values()) if store is not None for name in [store.publish()] if name
    ]
