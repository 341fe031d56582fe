"""One trace per program in a test run: ``thunder_aot.frontend.program.traced_program`` (Thunder's
tracing, lowering and generalising: nearly all of an export's time; the passes after it are cheap)
memoised on disk for the tests.

Keyed by what the frontend's program depends on: the request's source, shapes and fallback, the
prims the backend lets Thunder's fusion pass claim (the torch and Triton backends claim the same
prims, so a module exported with both is traced once), a hash of this checkout's code
(thunder_aot/, templates/, tests/: the generator and the modules exported) and the versions of
torch, Thunder and transformers. Entries live in pytest's cache directory,
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
#: the request fields the frontend's program depends on (the backend's only through its prims; the
#: passes' options, out, checks, verification and the seed do not reach it)
KEY_FIELDS = ("source", "shapes", "fallback")
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


def _key(request, backend) -> str | None:
    if request.instance is not None:
        return None
    fields = repr((*(getattr(request, f) for f in KEY_FIELDS), sorted(backend.prims)))
    return hashlib.sha256(fields.encode()).hexdigest()[:24]


@contextlib.contextmanager
def _locked(path: Path):
    with open(path, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def cached(traced_program):
    """``traced_program`` memoised in the folder ``VARIABLE`` names (read at each call)."""

    def traced_program_once(request, module, backend, progress):
        folder = os.environ.get(VARIABLE)
        key = _key(request, backend)
        if not folder or key is None:
            return traced_program(request, module, backend, progress)
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

            program = traced_program(request, module, backend, recorded)
            partial = entry.with_suffix(f".{os.getpid()}.tmp")
            partial.write_bytes(pickle.dumps((program, messages)))
            partial.replace(entry)
            return program

    traced_program_once.__wrapped__ = traced_program
    return traced_program_once


def _install(frontend) -> None:
    if not hasattr(frontend.traced_program, "__wrapped__"):
        frontend.traced_program = cached(frontend.traced_program)


def install_on_import() -> None:
    """Memoise ``thunder_aot.frontend.program.traced_program`` in this process as soon as it is
    imported: before ``thunder_aot.pipeline`` (its importer) binds the name."""
    after_import("thunder_aot.frontend.program", _install)
