"""The store of nvFuser kernels kept between processes (thunder_aot.runtime.nvfuser_kernels), on CPU:
a stand-in FusionDefinition plays nvFuser's kernel database (it looks kernels up in, and adds them
to, ``$TMPDIR/nvfuser_kernel_db/db.csv`` when the kernel_db option is given, as nvFuser does).
The real database is exercised on the GPU machine (tests/test_gpu.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import types
from pathlib import Path

import torch

from thunder_aot.runtime import nvfuser_kernels
from thunder_aot.runtime.nvfuser_kernels import KernelStore

ROOT = Path(__file__).resolve().parent.parent


class StandInDefinition:
    """A FusionDefinition whose execute 'compiles' its kernel, or finds it in nvFuser's database."""

    log: list[tuple[str, str]] = []

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def execute(self, inputs, _enable_options=()):
        if getattr(self, "compiled", False):  # its executor cache holds the kernel
            return [inputs[0] + 1]
        self.compiled = True
        if "kernel_db" not in _enable_options:
            StandInDefinition.log.append(("compiled", self.kernel))
            return [inputs[0] + 1]
        db = Path(os.environ["TMPDIR"]) / "nvfuser_kernel_db"
        db.mkdir(exist_ok=True)
        index = db / "db.csv"
        rows = [line.split(",") for line in index.read_text().splitlines()] if index.exists() else []
        found = [r for r in rows if r[0] == self.kernel]
        if found:
            assert (db / found[0][3]).read_text() == f"binary of {self.kernel}"  # a kernel's own binary
            StandInDefinition.log.append(("found", self.kernel))
        else:
            n = len(rows)
            (db / f"kernel_{n}.cubin").write_text(f"binary of {self.kernel}")
            with open(index, "a") as handle:
                handle.write(f"{self.kernel},--gpu-architecture=sm_90,kernel_{n}.cu,kernel_{n}.cubin\n")
            StandInDefinition.log.append(("compiled", self.kernel))
        return [inputs[0] + 1]


def _define(fd, kernel):
    fd.kernel = kernel


def run_kernels(kernels: list[str]) -> list[tuple[str, str]]:
    """In this process: a Fusion per kernel, each executed twice (the second: the steady call)."""
    from thunder_aot.runtime import nvfuser as rt

    rt._FAST_EXECUTE["direct"] = False  # the steady call is fd.execute: no executor cache here
    StandInDefinition.log.clear()
    for kernel in kernels:
        fusion = rt.Fusion(StandInDefinition, _define, kernel)
        for _ in range(2):
            assert torch.equal(fusion.execute([torch.ones(2)])[0], torch.full((2,), 2.0))
    return list(StandInDefinition.log)


_CHILD = """
import json, sys, types
sys.modules["nvfuser_direct"] = types.SimpleNamespace(__version__="0.2.35")
from tests.test_nvfuser_kernels import run_kernels
print(json.dumps(run_kernels(sys.argv[1].split(","))))
"""


def _fresh_process(kernels: str, store: Path | None) -> list[list[str]]:
    env = {k: v for k, v in os.environ.items() if k != nvfuser_kernels.VARIABLE}
    if store is not None:
        env[nvfuser_kernels.VARIABLE] = str(store)
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, kernels], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_fresh_processes_find_the_kernels_earlier_ones_compiled(tmp_path):
    store = tmp_path / "kernels"
    assert _fresh_process("k1,k2", store) == [["compiled", "k1"], ["compiled", "k2"]]
    assert _fresh_process("k1,k3", store) == [["found", "k1"], ["compiled", "k3"]]
    assert _fresh_process("k3,k2,k1", store) == [["found", "k3"], ["found", "k2"], ["found", "k1"]]
    (key,) = [p for p in store.iterdir()]
    assert key.name == f"direct-nvfuser0.2.35-cuda{torch.version.cuda}"
    generations = [p.name for p in key.iterdir() if p.name.startswith("g")]
    assert generations == [(key / "CURRENT").read_text().strip()]  # older generations are removed
    # without the variable nothing is looked up: every process compiles
    assert _fresh_process("k1", None) == [["compiled", "k1"]]


def test_two_processes_that_copied_one_generation_keep_the_first_publication(tmp_path, monkeypatch):
    tmpdir = os.environ.get("TMPDIR")
    first, second = KernelStore(tmp_path, "key"), KernelStore(tmp_path, "key")
    for store, kernel in ((first, "a"), (second, "b")):
        monkeypatch.setattr(StandInDefinition, "kernel", kernel, raising=False)
        with store.compiling():
            StandInDefinition().execute([torch.ones(1)], _enable_options=["kernel_db"])
    published = first.publish()
    assert published is not None and second.publish() is None  # the second copied an older generation
    assert (tmp_path / "key" / "CURRENT").read_text().strip() == published
    assert (tmp_path / "key" / published / "nvfuser_kernel_db" / "db.csv").read_text().startswith("a,")
    assert first.publish() is None  # nothing new since
    private = first.private
    first.close(), second.close()
    assert first.private is None and second.private is None and not private.exists()
    assert os.environ.get("TMPDIR") == tmpdir  # nvFuser's database was pointed there only while compiling


def test_no_store_without_known_versions(monkeypatch):
    monkeypatch.setenv(nvfuser_kernels.VARIABLE, "/nonexistent")
    monkeypatch.setitem(sys.modules, "nvfuser_direct", types.SimpleNamespace())  # no __version__
    monkeypatch.setattr(nvfuser_kernels, "_ACTIVE", {})
    assert nvfuser_kernels.active_store("direct") is None
