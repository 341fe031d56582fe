"""One trace per program in a test run: ``thunder_aot.pipeline.trace_program`` (Thunder's tracing,
lowering and the passes: nearly all of an export's time) memoised on disk for the tests.

Keyed by what the program depends on: the request's source, shapes, backend and options, and a hash
of this checkout's code (thunder_aot/, templates/, tests/: the generator and the modules exported)
and of the versions of torch, Thunder and transformers. Entries live in pytest's cache directory,
one folder per code hash; a run whose code hash differs deletes the other folders (the cache is
cleared when the generator changes). Two test workers that ask for one program at once build it
once: the second waits on the first's lock.

Tests that change the exporter's behaviour in ways the key cannot see (``monkeypatch``, an
interrupted export) run without it (tests/conftest.py), and so does an export of a module given as
an object. Subprocesses of the tests (``python -m thunder_aot export`` ...) use it too:
tests/export_cache_site/sitecustomize.py installs it there when ``VARIABLE`` names the folder.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import pickle
import shutil
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from tests.import_hook import after_import

ROOT = Path(__file__).resolve().parent.parent
#: the cache folder of this run's code hash; unset or empty: no cache
VARIABLE = "THUNDER_AOT_TESTS_EXPORT_CACHE"
#: the request fields a program depends on (out, checks, verification and the seed do not reach it)
KEY_FIELDS = (
    "source",
    "shapes",
    "backend",
    "fallback",
    "nvfuser_dynamic",
    "nvfuser_frontend",
    "merge_projections",
)
CODE = ("thunder_aot", "templates", "tests")
PACKAGES = ("torch", "lightning-thunder", "transformers")


def code_hash() -> str:
    digest = hashlib.sha256()
    for top in CODE:
        for path in sorted((ROOT / top).rglob("*")):
            if path.is_file() and path.suffix in (".py", ".jinja", ".j2") and "__pycache__" not in path.parts:
                digest.update(path.relative_to(ROOT).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    for name in PACKAGES:
        try:
            digest.update(f"{name}={version(name)}\0".encode())
        except PackageNotFoundError:
            digest.update(f"{name}=none\0".encode())
    return digest.hexdigest()[:16]


def folder_for_run(cache_root: Path, *, prune: bool) -> Path:
    """This code's folder under ``cache_root``; with ``prune``, the other codes' folders deleted."""
    here = cache_root / code_hash()
    if prune and cache_root.is_dir():
        for other in cache_root.iterdir():
            if other != here:
                shutil.rmtree(other, ignore_errors=True)
    here.mkdir(parents=True, exist_ok=True)
    return here


def _key(request) -> str | None:
    if request.instance is not None:
        return None
    fields = repr(tuple(getattr(request, f) for f in KEY_FIELDS))
    return hashlib.sha256(fields.encode()).hexdigest()[:24]


@contextlib.contextmanager
def _locked(path: Path):
    with open(path, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def cached(trace_program):
    """``trace_program`` memoised in the folder ``VARIABLE`` names (read at each call)."""

    def trace_program_once(request, module, backend, progress):
        folder = os.environ.get(VARIABLE)
        key = _key(request)
        if not folder or key is None:
            return trace_program(request, module, backend, progress)
        entry = Path(folder) / f"{key}.pkl"
        with _locked(entry.with_suffix(".lock")):
            if entry.exists():
                program, messages = pickle.loads(entry.read_bytes())
                for message in messages:
                    progress(message)
                return program
            messages: list[str] = []

            def recorded(message: str) -> None:
                messages.append(message)
                progress(message)

            program = trace_program(request, module, backend, recorded)
            partial = entry.with_suffix(f".{os.getpid()}.tmp")
            partial.write_bytes(pickle.dumps((program, messages)))
            partial.replace(entry)
            return program

    trace_program_once.__wrapped__ = trace_program
    return trace_program_once


def _install(exporter) -> None:
    if not hasattr(exporter.trace_program, "__wrapped__"):
        exporter.trace_program = cached(exporter.trace_program)


def install_on_import() -> None:
    """Memoise ``thunder_aot.pipeline.trace_program`` in this process once it is imported
    (``build_program`` and ``export`` look it up at each call)."""
    after_import("thunder_aot.pipeline", _install)
