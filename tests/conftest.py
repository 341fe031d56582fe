"""Test tiers and the guard that keeps them honest.

A test that traces a module with Thunder (export, ``check``, ``build_program``) or runs a whole
module under Triton's interpreter carries the ``traces`` marker, explicitly: ``make test-fast``
leaves those out. The guard below makes the marker true rather than hoped for: a test without it
fails the moment it traces, in this process (``trace_module`` and ``size_conditions`` refuse) or in
a subprocess (``import thunder`` fails there: tests/no_thunder/ stands first on PYTHONPATH).

Tracing is memoised for the run (tests/export_cache.py): each program is traced once, whichever
tests ask for it, except in tests that change the exporter where its key cannot see
(``monkeypatch``) or that are about tracing itself (``fresh_traces``).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from tests.export_cache import VARIABLE as EXPORT_CACHE
from tests.export_cache import folder_for_run, install_on_import
from tests.import_hook import after_import

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

#: a package named ``thunder`` whose import fails: first on a subprocess's path while a test without
#: the ``traces`` marker runs
NO_THUNDER = ROOT / "tests" / "no_thunder"
#: "1" while the running test may trace (read by tests.helpers.python_env for subprocesses)
MAY_TRACE = "THUNDER_AOT_TESTS_MAY_TRACE"
#: the exporter's entries into Thunder's tracing
TRACING_ENTRIES = ("trace_module", "size_conditions")
TRACE_MODULE = "thunder_aot.frontend.trace"
#: the export cache's folder for this run (tests/export_cache.py)
EXPORTS = pytest.StashKey[str]()


def cuda_and_nvfuser() -> str | None:
    """None when GPU tests can run, else why not."""
    import importlib.util

    import torch

    if not torch.cuda.is_available():
        return "no CUDA device"
    if importlib.util.find_spec("nvfuser") is None:
        return "nvFuser is not installed"
    return None


def _refusing(entry):
    def guarded(*args, **kwargs):
        if os.environ.get(MAY_TRACE) == "0":
            pytest.fail(
                f"this test traces with Thunder ({entry.__name__}) but is not marked 'traces'", pytrace=False
            )
        return entry(*args, **kwargs)

    guarded.__wrapped__ = entry
    return guarded


def _guard(module) -> None:
    for name in TRACING_ENTRIES:
        entry = getattr(module, name)
        if not hasattr(entry, "__wrapped__"):
            setattr(module, name, _refusing(entry))


def pytest_configure(config):
    after_import(TRACE_MODULE, _guard)  # importing it is allowed anywhere (it only costs time)
    install_on_import()
    cache = getattr(config, "cache", None)  # None under -p no:cacheprovider: no export cache
    if cache is not None:
        # the controller prunes other codes' folders; xdist's workers only find this code's
        folder = folder_for_run(cache.mkdir("thunder_aot_exports"), prune=not hasattr(config, "workerinput"))
        config.stash[EXPORTS] = str(folder)
    elif os.environ.get(EXPORT_CACHE):  # a pytest run a test started (-p no:cacheprovider): its run's
        config.stash[EXPORTS] = os.environ[EXPORT_CACHE]


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item, nextitem):
    before = {k: os.environ.get(k) for k in (MAY_TRACE, EXPORT_CACHE, "PYTHONPATH")}
    may_trace = item.get_closest_marker("traces") is not None
    os.environ[MAY_TRACE] = "1" if may_trace else "0"
    if not may_trace:  # subprocesses that inherit the environment cannot import Thunder
        os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(NO_THUNDER), before["PYTHONPATH"]) if p)
    # the export cache, unless the test changes the exporter in ways its key cannot see
    fresh = "monkeypatch" in getattr(item, "fixturenames", ()) or item.get_closest_marker("fresh_traces")
    os.environ[EXPORT_CACHE] = "" if fresh else item.config.stash.get(EXPORTS, "")
    try:
        return (yield)
    finally:
        for k, v in before.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def pytest_collection_modifyitems(config, items):
    reason = None
    for item in items:
        if "gpu" in item.keywords:
            reason = reason or cuda_and_nvfuser() or ""
            if reason:
                item.add_marker(pytest.mark.skip(reason=f"GPU test: {reason}"))
