"""Import a generated module and compare it with its source module on fresh random inputs."""

from __future__ import annotations

import copy
import importlib.util
import linecache
import os
import sys
import tempfile
import types
from collections.abc import Iterator
from pathlib import Path

import torch

from thunder_aot.errors import ExportError
from thunder_aot.ir import Bucket, TensorSpec, dim_value
from thunder_aot.shapes import format_bucket
from thunder_aot.verify.judge import (
    judge as judge_outputs,
)  # the package's attribute `judge` stays the module
from thunder_aot.verify.judge import (
    paired_references,
    reference64,
    run64_perturbed,
    run_choosing,
    run_recording_choices,
    same_choices,
    upcast64,
)


def load_module_from_text(text: str, name: str = "thunder_aot_generated_check") -> types.ModuleType:
    """Import generated source text as a module, through a temporary file whose lines stay in
    ``linecache`` (so tracebacks show them, and ``inspect.getsource`` works for torch.compile,
    which reads the source of user-defined Triton kernels)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"{name}.py"
        path.write_text(text)
        # mtime None: linecache.checkcache never drops the entry although the file goes away
        linecache.cache[str(path)] = (len(text), None, text.splitlines(keepends=True), str(path))
        spec = importlib.util.spec_from_file_location(name, path)
        assert spec and spec.loader
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # stays registered, as an imported file would (torch.compile looks it up)
        try:
            spec.loader.exec_module(module)
        except BaseException:
            sys.modules.pop(name, None)
            raise
    return module


def sample_envs(bucket: Bucket, generator: torch.Generator) -> list[dict[str, int]]:
    """Every dynamic dim at its lower edge, at its upper edge, and at a random size strictly
    inside (where the range has an inside: a range of one or two sizes has only edges)."""
    if bucket.is_exact:
        return [{}]
    lo = {r.name: r.lo for r in bucket.dims}
    hi = {r.name: r.hi for r in bucket.dims}
    inside = {
        r.name: int(torch.randint(r.lo + 1, r.hi, (1,), generator=generator)) if r.hi - r.lo >= 2 else r.lo
        for r in bucket.dims
    }
    envs = [lo, hi, inside]
    return [e for i, e in enumerate(envs) if e not in envs[:i]]


def random_tensor(
    spec: TensorSpec,
    env: dict[str, int],
    device: str,
    generator: torch.Generator,
    value_range: tuple[int, int] | None = None,
) -> torch.Tensor:
    """Floats from a normal distribution; integers from ``value_range`` (inclusive), else -100..99."""
    shape = tuple(dim_value(d, env) for d in spec.shape)
    dtype = getattr(torch, spec.dtype)
    if dtype.is_floating_point:
        t = torch.randn(shape, generator=generator, dtype=torch.float32)
        return t.to(dtype=dtype, device=device)
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=generator).bool().to(device)
    lo, hi = value_range if value_range is not None else (-100, 99)
    return torch.randint(lo, min(hi + 1, 2**63 - 1), shape, generator=generator).to(
        dtype=dtype, device=device
    )


def random_inputs(
    bucket: Bucket, env: dict[str, int], device: str, generator: torch.Generator
) -> list[torch.Tensor]:
    """One random tensor per input of ``bucket`` at sizes ``env`` (integers within its value ranges)."""
    return [
        random_tensor(s, env, device, generator, bucket.value_range(i)) for i, s in enumerate(bucket.inputs)
    ]


def bucket_inputs(
    bucket: Bucket, device: str, generator: torch.Generator
) -> Iterator[tuple[dict[str, int], list[torch.Tensor]]]:
    for env in sample_envs(bucket, generator):
        yield env, random_inputs(bucket, env, device, generator)


def nonfinite_inputs(inputs: list[torch.Tensor], generator: torch.Generator) -> list[torch.Tensor]:
    """The same inputs with NaN, +inf and -inf mixed at a few seeded positions of every floating
    input (and, for float32/float64 inputs, large magnitudes): values of several kinds meeting in a
    row, where the seed puts them."""
    specials = [float("nan"), float("inf"), float("-inf")]
    out = []
    for t in inputs:
        if not t.is_floating_point() or not t.numel():
            out.append(t)
            continue
        values = specials + ([1e20, -1e20] if t.dtype in (torch.float32, torch.float64) else [])
        flat = t.detach().clone().reshape(-1)
        count = max(len(values), flat.numel() // 64)
        where = torch.randint(0, flat.numel(), (count,), generator=generator).to(flat.device)
        flat[where] = (
            torch.tensor(values, dtype=flat.dtype).repeat(count // len(values) + 1)[:count].to(flat.device)
        )
        out.append(flat.reshape(t.shape))
    return out


def _in_every_row_and_column(t: torch.Tensor, values: tuple[float, ...]) -> torch.Tensor:
    """``t`` with ``values`` (taken in turn) at one position of each of its rows (last dim) and each
    of its columns at least: positions ``(i mod rows, i mod columns)``."""
    if not t.is_floating_point() or not t.numel():
        return t
    rows = t.detach().clone().reshape(-1, t.shape[-1]) if t.ndim else t.detach().clone().reshape(1, 1)
    count = max(rows.shape)
    index = torch.arange(count, device=rows.device)
    fill = torch.tensor(values, dtype=rows.dtype).repeat(count // len(values) + 1)[:count].to(rows.device)
    rows[index % rows.shape[0], index % rows.shape[1]] = fill
    return rows.reshape(t.shape)


#: the non-finite (and, for float32/float64 inputs, huge) values verification places in every row
#: and column of every floating input, one kind per call: whatever the seed, a kernel that drops a
#: NaN at a row's tail lane or an infinity in a column is caught
EVERYWHERE = {
    "NaN": (float("nan"),),
    "+inf": (float("inf"),),
    "-inf": (float("-inf"),),
    "±1e20": (1e20, -1e20),
}


def nonfinite_calls(
    inputs: list[torch.Tensor], generator: torch.Generator
) -> list[tuple[str, list[torch.Tensor]]]:
    """The calls verification adds to a bucket's last inputs: each kind of :data:`EVERYWHERE` in
    every row and column (the huge values only where an input is float32 or float64), then the
    kinds mixed at seeded positions (:func:`nonfinite_inputs`)."""
    wide = any(t.dtype in (torch.float32, torch.float64) for t in inputs)
    calls = [
        (kind, [_in_every_row_and_column(t, values) for t in inputs])
        for kind, values in EVERYWHERE.items()
        if wide or kind != "±1e20"
    ]
    return [*calls, ("mixed", nonfinite_inputs(inputs, generator))]


def new_seed() -> int:
    """A fresh verification seed (printed with any refusal; ``--verify-seed`` repeats it)."""
    return int.from_bytes(os.urandom(4), "little") >> 1


def verify(
    text: str | types.ModuleType,
    source: torch.nn.Module,
    buckets: list[Bucket],
    class_name: str,
    device: str = "cpu",
    seed: int | None = None,
    without_float64: list[str] | None = None,
) -> int:
    """Run the generated module (its text, or the module already imported from it) against
    ``source`` in every bucket, at each dynamic dim's edges and inside, on seeded random inputs and
    once more with non-finite values among them; judge every output against float64 (:mod:`.judge`).
    Returns how many calls were checked; a refusal names the seed that repeats its inputs.
    ``without_float64``: gets the calls judged against eager alone (the source cannot run in float64)."""
    seed = new_seed() if seed is None else seed
    generated = load_module_from_text(text) if isinstance(text, str) else text
    if device != "cpu":
        source = copy.deepcopy(source).to(device)
    module = getattr(generated, class_name).from_module(source)
    generator = torch.Generator().manual_seed(seed)
    source64 = upcast64(source)
    checked = 0
    try:
        with torch.no_grad():
            for bucket in buckets:
                calls = list(bucket_inputs(bucket, device, generator))
                env, inputs = calls[-1]
                calls += [
                    ({**env, "non-finite": kind}, xs) for kind, xs in nonfinite_calls(inputs, generator)
                ]
                for env, inputs in calls:
                    where = f"bucket {bucket_label(bucket)} at {env or 'its shape'}"
                    # each module runs on its own copy of the inputs: an input either writes in place
                    # (a static KV cache) is judged as one more output
                    copies = [x.clone() for x in inputs]
                    expected, eager_choices = run_recording_choices(source, copies)
                    copies_ours = [x.clone() for x in inputs]
                    try:
                        actual, choices = run_recording_choices(module, copies_ours)
                    except Exception as e:
                        raise ExportError(
                            f"{where}: the generated module raised {type(e).__name__}: {e}"
                        ) from e
                    written = tuple(
                        k
                        for k, x in enumerate(inputs)
                        if not (_same_values(x, copies[k]) and _same_values(x, copies_ours[k]))
                    )
                    src, src64 = source, source64
                    if written:
                        expected = with_written(expected, copies, written)
                        actual = with_written(actual, copies_ours, written)
                        src = ReturningWrites(source, written)
                        src64 = None if source64 is None else ReturningWrites(source64, written)
                    # each judged against the float64 run that routes as it did (judge's docstring)
                    seen: list[torch.Tensor] = []  # eager's inputs to each top-k making those picks
                    expected_ours = (
                        None
                        if same_choices(eager_choices, choices)
                        else run_choosing(src, inputs, choices, seen)
                    )
                    reference, reference_ours = (
                        (None, None)
                        if source64 is None
                        else paired_references(
                            lambda picks, fallback=True, near=None, src=src, src64=src64: reference64(
                                src, inputs, src64, picks, fallback, near
                            ),
                            eager_choices,
                            choices,
                            seen,
                        )
                    )
                    if reference is None and without_float64 is not None:
                        without_float64.append(where)
                    perturbed = (
                        None if reference is None else run64_perturbed(src, inputs, src64, eager_choices)
                    )
                    judge_outputs(
                        expected, actual, reference, where, reference_ours, expected_ours, perturbed
                    )
                    checked += 1
    except ExportError as e:
        raise ExportError(
            f"{e} (verification seed {seed}: --verify-seed {seed} repeats these inputs)"
        ) from e.__cause__
    return checked


def _same_values(a: torch.Tensor, b: torch.Tensor) -> bool:
    return bool((a.eq(b) | (a.isnan() & b.isnan()) if a.is_floating_point() else a.eq(b)).all())


def with_written(out, copies: list[torch.Tensor], written: tuple[int, ...]) -> tuple:
    """A module's outputs followed by its inputs at ``written`` as it left them (``copies``)."""
    return (*(out if isinstance(out, (tuple, list)) else (out,)), *(copies[k] for k in written))


class ReturningWrites(torch.nn.Module):
    """``module`` called on copies of its inputs, returning its outputs and then the inputs at
    ``written`` as it left them: an in-place write judged as an output."""

    def __init__(self, module: torch.nn.Module, written: tuple[int, ...]) -> None:
        super().__init__()
        self.module, self.written = module, written

    def forward(self, *inputs: torch.Tensor):
        copies = [x.clone() for x in inputs]
        return with_written(self.module(*copies), copies, self.written)


def bucket_label(bucket: Bucket) -> str:
    return format_bucket(bucket)
