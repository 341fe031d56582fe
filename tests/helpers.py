from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent


@contextlib.contextmanager
def poisoned_outputs(*generated):
    """torch.empty and torch.empty_like (and each ``generated`` Triton module's own allocation,
    ``empty_strided_cuda``) fill what they allocate with NaN (floats) or -7, so that an output
    element a kernel never writes cannot pass a comparison."""
    real = {name: getattr(torch, name) for name in ("empty", "empty_like")}
    own = [(g, g.empty_strided_cuda) for g in generated if getattr(g, "empty_strided_cuda", None) is not None]

    def poisoning(allocate):
        def allocate_poisoned(*args, **kwargs):
            t = allocate(*args, **kwargs)
            return t.fill_(float("nan")) if t.is_floating_point() else t.fill_(-7)

        return allocate_poisoned

    for name, allocate in real.items():
        setattr(torch, name, poisoning(allocate))
    for g, allocate in own:
        g.empty_strided_cuda = poisoning(allocate)
    try:
        yield
    finally:
        for name, allocate in real.items():
            setattr(torch, name, allocate)
        for g, allocate in own:
            g.empty_strided_cuda = allocate


def compare_at_every_bucket(
    module, aot, gen, shapes: str, device: str, label: str, smallest_only: bool = False
) -> tuple[int, list[list[torch.Tensor]]]:
    """Call ``aot`` (a module of generated module ``gen``) and its source ``module`` on fresh random
    inputs at every bucket's edges and inside (``shapes``: the export's spec), ``aot``'s outputs
    poisoned, and compare (``smallest_only``: each bucket's call at its smallest sampled sizes
    only, without non-finite values). Returns the number of calls and each bucket's last inputs."""
    from thunder_aot.shapes import parse_shapes
    from thunder_aot.verify import bucket_inputs, nonfinite_calls
    from thunder_aot.verify.judge import check_chosen, run_recording_choices

    generator = torch.Generator().manual_seed(torch.seed() >> 1)
    calls, last = 0, []
    with torch.no_grad():
        for bucket in parse_shapes(shapes):
            sampled = list(bucket_inputs(bucket, device, generator))
            # the non-finite calls at the bucket's smallest sizes: each puts its values in every row
            # and column whatever the size, and they are 7 of a bucket's 10 calls
            small_env, small = min(sampled, key=lambda s: sum(x.numel() for x in s[1]))
            nonfinite = [({**small_env, "non-finite": k}, xs) for k, xs in nonfinite_calls(small, generator)]
            for env, inputs in [(small_env, small)] if smallest_only else [*sampled, *nonfinite]:
                with poisoned_outputs(gen):
                    got, picks = run_recording_choices(aot, inputs)
                check_chosen(module, inputs, got, picks, f"{label} at {env}")
                calls += 1
            last.append(sampled[-1][1])
    return calls, last


class Logits(torch.nn.Module):
    """A causal LM's logits as a module of its token ids, positions made on the ids' device (a CUDA
    graph cannot capture transformers' CPU-made ones): what the judgement's float64 twin runs."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(ids.shape[1], device=ids.device)
        return self.model(ids, use_cache=False, position_ids=positions[None], cache_position=positions).logits


def greedy_tokens(model: torch.nn.Module, prompt: torch.Tensor, new_tokens: int) -> torch.Tensor:
    """``model.generate``'s greedy continuation of ``prompt`` by exactly ``new_tokens`` tokens: the
    end-of-sequence token is held back until then (both models of a comparison see the same rule), so
    that a random prompt cannot end generation early and change how often each layer runs."""
    with torch.no_grad():
        return model.generate(prompt, max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False)


def python_env(**extra: str) -> dict[str, str]:
    """The environment of a test's Python subprocess, plus ``extra``: this checkout first on the
    import path, behind tests/no_thunder/ while a test without the ``traces`` marker runs
    (tests/conftest.py) and tests/export_cache_site/ (the tests' export cache there too)."""
    from tests.conftest import MAY_TRACE, NO_THUNDER

    path = [str(NO_THUNDER)] if os.environ.get(MAY_TRACE) == "0" else []
    path += [str(ROOT / "tests" / "export_cache_site"), str(ROOT)]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(path), **extra}


def interpreted_check(*args: str) -> subprocess.CompletedProcess:
    """tests/triton_interpreted_check.py with ``args`` (a stem of generated/, or an import path and
    shapes), in a fresh process under Triton's interpreter: a whole module interpreted, so only a
    test marked ``traces`` may ask for it."""
    from tests.conftest import MAY_TRACE

    if os.environ.get(MAY_TRACE) == "0":
        pytest.fail("this test runs a whole module under Triton's interpreter but is not marked 'traces'")
    return subprocess.run(
        [sys.executable, str(ROOT / "tests" / "triton_interpreted_check.py"), *args],
        env=python_env(TRITON_INTERPRET="1"),
        capture_output=True,
        text=True,
    )


def run_cli(
    *args: str, cwd: Path = ROOT, env: dict | None = None, umask: int | None = None
) -> subprocess.CompletedProcess:
    full_env = python_env(**(env or {}))
    preexec = None if umask is None else (lambda: os.umask(umask))
    return subprocess.run(
        [sys.executable, "-m", "thunder_aot", *args],
        cwd=cwd,
        env=full_env,
        capture_output=True,
        text=True,
        preexec_fn=preexec,
    )


def check_autocast_calls(cls, source: torch.nn.Module, x: torch.Tensor, outside) -> None:
    """A generated class under ``torch.autocast(x.device.type)``: with a fallback (a subclass with
    ``FALLBACK = True``) it runs ``source``'s forward (autocast's dtype, eager's values); without one
    it raises one line naming autocast. ``outside(plain_output)`` checks a call outside autocast."""
    import thunder_aot.runtime as rt

    class WithFallback(cls):
        FALLBACK = True

    plain, fallback = cls.from_module(source), WithFallback.from_module(source)
    with torch.no_grad():
        outside(plain(x))
        with torch.autocast(x.device.type, dtype=torch.bfloat16):
            expected = source(x)
            got = fallback(x)
            with pytest.raises(rt.NoBucketError, match="called under torch.autocast") as info:
                plain(x)
    assert expected.dtype == torch.bfloat16 and got.dtype == expected.dtype and torch.equal(got, expected)
    assert "\n" not in str(info.value)
