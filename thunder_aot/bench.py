"""``thunder-aot bench``: the seed issue's comparison for any module, with a table and a plot.

Per shape point and system: per-call host+device time (``torch.utils.benchmark``, one CPU thread,
median of interleaved rounds), and on CUDA the device time of back-to-back calls (CUDA events)
with the bandwidth it achieves against a measured device-to-device copy. Every system's output is
checked against eager before it is timed; systems that cannot run here are listed with the reason.
"""

from __future__ import annotations

import json
import statistics
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from thunder_aot.errors import ExportError
from thunder_aot.model import Bucket, dim_value

Call = Callable[[], object]


@dataclass(frozen=True)
class Point:
    """One concrete input shape set to time: its bucket and the sizes of the bucket's dims."""

    bucket: Bucket
    env: tuple[tuple[str, int], ...]

    @property
    def shapes(self) -> list[tuple[int, ...]]:
        env = dict(self.env)
        return [tuple(dim_value(d, env) for d in s.shape) for s in self.bucket.inputs]

    @property
    def rows(self) -> int:
        """The x axis: rows of the first input (its elements over its last dim), e.g. tokens."""
        shape = self.shapes[0]
        n = 1
        for s in shape[:-1]:
            n *= s
        return n

    @property
    def label(self) -> str:
        return ", ".join("x".join(map(str, s)) for s in self.shapes)


@dataclass
class Measurement:
    system: str
    point: str
    rows: int
    us_per_call: float
    device_us: float | None = None
    gb_per_s: float | None = None


@dataclass
class Report:
    title: str
    command: str
    device: str
    versions: dict[str, str]
    systems: list[str]
    points: list[str]
    measurements: list[Measurement] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)
    copy_gb_per_s: float | None = None

    def value(self, system: str, point: str) -> Measurement | None:
        return next((m for m in self.measurements if m.system == system and m.point == point), None)


def points_for(bucket: Bucket, sizes: list[int] | None) -> list[Point]:
    """Exact buckets: their shape. One dynamic dim: ``sizes`` inside its range (default: the edges
    and every power of two between). Several dims: all at their lower, then upper edge."""
    if bucket.is_exact:
        return [Point(bucket, ())]
    if len(bucket.dims) == 1:
        (r,) = bucket.dims
        if sizes is None:
            sizes = sorted({r.lo, r.hi} | {2**k for k in range(0, r.hi.bit_length()) if r.lo <= 2**k <= r.hi})
        return [Point(bucket, ((r.name, s),)) for s in sizes if r.lo <= s <= r.hi]
    return [Point(bucket, tuple((r.name, getattr(r, edge)) for r in bucket.dims)) for edge in ("lo", "hi")]


def time_call(fn: Call, min_run_time: float) -> float:
    from torch.utils.benchmark import Timer

    return Timer(stmt="fn()", globals={"fn": fn}).blocked_autorange(min_run_time=min_run_time).median * 1e6


def interleaved_times(cases: dict[str, Call], rounds: int, min_run_time: float) -> dict[str, list[float]]:
    """Per case, its µs per call in each round; every round times every case in turn, so that drift
    of a shared machine hits all alike (take ratios within a round, or medians over rounds)."""
    samples: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(rounds):
        for name, fn in cases.items():
            samples[name].append(time_call(fn, min_run_time))
    return samples


def device_time_us(fn: Call, calls: int = 50) -> float:
    """Device time per call of ``calls`` back-to-back calls, with CUDA events."""
    fn()
    torch.cuda.synchronize()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(calls):
        fn()
    stop.record()
    torch.cuda.synchronize()
    return start.elapsed_time(stop) * 1e3 / calls


def copy_bandwidth_gb_per_s(nbytes: int = 1 << 30) -> float:
    """A large device-to-device copy, counting bytes read plus bytes written."""
    src = torch.empty(nbytes // 2, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    us = device_time_us(lambda: dst.copy_(src), calls=10)
    return 2 * src.numel() / (us * 1e-6) / 1e9


def print_table(lines: list[str], out: str | None) -> None:
    """Print a markdown table (the bench scripts' results) and, with ``out``, write it there."""
    text = "\n".join(lines) + "\n"
    print(text)
    if out:
        Path(out).write_text(text)


def _runtime_objects(generated, kind: type) -> list:
    """The generated module's runtime objects of one kind (a SizedFusions' entries count too)."""
    from thunder_aot.runtime.nvfuser import SizedFusions

    found = []
    for value in vars(generated).values():
        for candidate in value.by_size.values() if isinstance(value, SizedFusions) else (value,):
            if isinstance(candidate, kind):
                found.append(candidate)
    return found


def nvfuser_executions(aot: torch.nn.Module, inputs: list[torch.Tensor]) -> list[tuple[object, list]]:
    """The FusionDefinitions one forward of a generated nvFuser module executes, in order, with their
    inputs: each ``Fusion`` of the module (recorded at import, or per size) gets a recording
    ``execute`` for one call (after a first call that records and compiles the sizes met)."""
    from thunder_aot.runtime.nvfuser import Fusion

    generated = sys.modules[type(aot).__module__]
    with torch.no_grad():
        aot(*inputs)
    fusions = _runtime_objects(generated, Fusion)
    recorded: list[tuple[object, list]] = []

    def recording(fusion, real):
        return lambda args: recorded.append((fusion.fd, args)) or real(args)

    originals = [(f, f.execute) for f in fusions]
    try:
        for fusion, real in originals:
            fusion.execute = recording(fusion, real)
        with torch.no_grad():
            aot(*inputs)
    finally:
        for fusion, real in originals:
            fusion.execute = real
    return recorded


def bare_launches(aot: torch.nn.Module, inputs: list[torch.Tensor], pointers: bool = False) -> Call | None:
    """The generated module's kernels alone: records the backend calls one forward makes and
    returns a function that replays them with nothing around them (nvFuser: ``fd.execute`` of each
    FusionDefinition; Triton: ``CompiledKernel.run`` into the same output buffers) — the floor the
    module's per-call overhead is measured against. None when the module launches no kernel.
    ``pointers``: Triton's launch gets the tensors' addresses as ints, as the module passes them to
    the C launch function under ``CompiledKernel.run`` (the launcher then calls no ``data_ptr()``)."""
    from thunder_aot.runtime.nvfuser import Fusion, SizedFusions
    from thunder_aot.runtime.triton import Kernel

    generated = sys.modules[type(aot).__module__]
    if any(isinstance(v, (Fusion, SizedFusions)) for v in vars(generated).values()):  # nvfuser
        calls = [(fd.execute, args) for fd, args in nvfuser_executions(aot, inputs)]
        if not calls:
            return None
        if len(calls) == 1:
            ((execute, args),) = calls
            return lambda: execute(args)
        return lambda: [execute(args) for execute, args in calls]
    if not _runtime_objects(generated, Kernel):
        return None
    recorded: list[tuple] = []
    real = Kernel.launch

    def record(kernel: Kernel, programs, args, raw, misaligned, n):
        real(kernel, programs, args, raw, misaligned, n)
        index = args[0].get_device()  # Kernel's own key for the binary it launched
        recorded.append((kernel.binaries[index + index + misaligned][0], programs, args, n, kernel.block))

    # forward launches a compiled kernel directly only on the current device: with none current,
    # every launch of the recorded call goes through Kernel.launch
    devices = generated.current_device, generated.eager_device
    generated.current_device, generated.eager_device = (lambda: -2), (lambda t: -1)
    Kernel.launch = record
    try:
        with torch.no_grad():
            aot(*inputs)
    finally:
        generated.current_device, generated.eager_device = devices
        Kernel.launch = real
    if not recorded:
        return None
    launches = []
    for compiled, programs, args, n, block in recorded:
        stream = torch.cuda.current_stream(args[0].device).cuda_stream
        if pointers:
            args = tuple(a.data_ptr() if isinstance(a, torch.Tensor) else a for a in args)
        launches.append(
            (compiled.run, (programs, 1, 1, stream, compiled.function, compiled.packed_metadata, None, None, None, *args, n, block))
        )
    if len(launches) == 1:
        ((run, run_args),) = launches
        return lambda: run(*run_args)
    return lambda: [run(*run_args) for run, run_args in launches]


def io_bytes(inputs: list[torch.Tensor], outputs: object, state: list[torch.Tensor]) -> int:
    outs = outputs if isinstance(outputs, (tuple, list)) else (outputs,)
    return sum(t.numel() * t.element_size() for t in [*inputs, *state, *outs])


def write_json(report: Report, path: Path) -> None:
    path.write_text(json.dumps(asdict(report), indent=1, sort_keys=True) + "\n")


def write_markdown(report: Report, path: Path) -> None:
    lines = [f"# {report.title}", "", f"    {report.command}", "", f"Device: {report.device}. "
             + ", ".join(f"{k} {v}" for k, v in report.versions.items()) + ".", "",
             "Per call, host + device, µs (median of interleaved rounds):", "",
             "| shape | " + " | ".join(report.systems) + " |", "|---" * (len(report.systems) + 1) + "|"]
    for point in report.points:
        cells = []
        for system in report.systems:
            m = report.value(system, point)
            cells.append("" if m is None else f"{m.us_per_call:.1f}")
        lines.append(f"| {point} | " + " | ".join(cells) + " |")
    ratio_columns = ratio_pairs(report)
    if ratio_columns:
        lines += ["", "Ratios of per-call times (lower is better for the first system named):", "",
                  "| shape | " + " | ".join(f"{a} / {b}" for a, b in ratio_columns) + " |",
                  "|---" * (len(ratio_columns) + 1) + "|"]
        for point in report.points:
            cells = []
            for a, b in ratio_columns:
                ma, mb = report.value(a, point), report.value(b, point)
                cells.append(f"{ma.us_per_call / mb.us_per_call:.2f}" if ma and mb else "")
            lines.append(f"| {point} | " + " | ".join(cells) + " |")
    device_rows = [m for m in report.measurements if m.device_us is not None]
    if device_rows:
        lines += ["", f"Device time per call (CUDA events, back-to-back calls) and achieved bandwidth; "
                  f"a device-to-device copy moves {report.copy_gb_per_s:.0f} GB/s:", "",
                  "| shape | system | device µs | GB/s | % of copy |", "|---|---|---|---|---|"]
        for m in device_rows:
            share = f"{100 * m.gb_per_s / report.copy_gb_per_s:.0f}%" if m.gb_per_s and report.copy_gb_per_s else ""
            lines.append(f"| {m.point} | {m.system} | {m.device_us:.2f} | {m.gb_per_s or 0:.0f} | {share} |")
    if report.skipped:
        lines += ["", "Skipped:", ""] + [f"- {s}: {why}" for s, why in sorted(report.skipped.items())]
    path.write_text("\n".join(lines) + "\n")


def floor_of(system: str) -> str:
    """``thunder-aot(nvfuser)`` and ``thunder-aot(nvfuser, unchecked)`` -> ``bare launch(nvfuser)``:
    both modules launch the same kernels."""
    return "bare launch(" + system.removeprefix("thunder-aot(").split(",")[0].rstrip(")") + ")"


def ratio_pairs(report: Report) -> list[tuple[str, str]]:
    """Each thunder-aot system against its own kernels' bare launch, Thunder's FD.execute,
    torch.compile and eager (those present)."""
    pairs = []
    for system in report.systems:
        if not system.startswith("thunder-aot("):
            continue
        floor = floor_of(system)
        for other in (floor, "FD.execute", "torch.compile", "Eager"):
            if other in report.systems and (other != "FD.execute" or "nvfuser" in system):
                pairs.append((system, other))
    return pairs


def write_plot(report: Report, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5), dpi=110)
    for system in report.systems:
        rows = sorted((m.rows, m.us_per_call) for m in report.measurements if m.system == system)
        if rows:
            ax.plot([r for r, _ in rows], [t for _, t in rows], marker="o", label=system)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("rows of the first input (tokens)")
    ax.set_ylabel("µs per call (host + device)")
    ax.set_title(report.title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, metadata={"Software": None})
    plt.close(fig)


def write_reports(report: Report, out: Path) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / "bench.json", out / "bench.md"]
    write_json(report, paths[0])
    write_markdown(report, paths[1])
    try:
        write_plot(report, out / "bench.png")
        paths.append(out / "bench.png")
    except ImportError:
        report.skipped["plot"] = "matplotlib is not installed (pip install thunder-aot[bench])"
        write_markdown(report, paths[1])
    return paths


def _check(name: str, expected: object, actual: object, where: str) -> None:
    from thunder_aot.verify import compare

    actual = actual[0] if isinstance(actual, list) and not isinstance(expected, (list, tuple)) else actual
    compare(expected, actual, f"{name} at {where}")


def run_bench(
    source: str,
    shapes: list[str],
    backends: list[str],
    *,
    sizes: list[int] | None = None,
    device: str = "auto",
    rounds: int = 3,
    min_run_time: float = 0.1,
    command: str = "",
    progress: Callable[[str], None] = lambda m: None,
    checkpoint: Callable[[Report], None] = lambda r: None,
) -> Report:
    import copy
    import importlib.util

    from thunder_aot.backends import get_backend
    from thunder_aot.export import ExportRequest, export, versions
    from thunder_aot.export.resolve import resolve_module
    from thunder_aot.shapes import parse_shapes
    from thunder_aot.verify import load_module_from_text, random_tensor

    cuda = torch.cuda.is_available() if device == "auto" else device == "cuda"
    if cuda and not torch.cuda.is_available():
        raise ExportError("--device cuda asked for, but no CUDA device is available")
    dev = "cuda" if cuda else "cpu"
    torch.set_num_threads(1)
    buckets = parse_shapes(shapes)
    source_module = resolve_module(source).eval()
    module = copy.deepcopy(source_module).to(dev)
    state = list(module.state_dict().values())
    points = [p for b in buckets for p in points_for(b, sizes)]
    skipped: dict[str, str] = {}

    generated = {}
    for spec in backends:
        name, _, mode = spec.partition(":")
        if mode not in ("", "unchecked"):
            raise ExportError(f"bench --backends: {spec!r}: expected NAME or NAME:unchecked")
        system = f"thunder-aot({name}{', unchecked' if mode else ''})"
        backend = get_backend(name)
        reason = backend.unavailable_reason() if (cuda or name != "torch") else None
        if name != "torch" and not cuda:
            reason = reason or "needs CUDA"
        if reason:
            skipped[system] = reason
            continue
        progress(f"exporting with the {name} backend{' (unchecked)' if mode else ''}")
        request = ExportRequest(source, tuple(shapes), backend=name, checks=not mode)
        text = export(request, verify=False, progress=progress)
        gen = load_module_from_text(text, f"bench_{name}{'_unchecked' if mode else ''}")
        generated[system] = getattr(gen, type(module).__name__).from_module(module)

    import thunder

    jitted = thunder.jit(module)
    compiled = None
    thunderfx = None
    if cuda:
        from thunder.dynamo import thunderfx as make_thunderfx

        torch._dynamo.config.recompile_limit = max(64, len(points) + 8)
        compiled = torch.compile(module)
        thunderfx = make_thunderfx(module)
    else:
        skipped["torch.compile"] = "not run on CPU: inductor compiles C++ for every new shape (minutes)"
        skipped["thunderfx"] = "not run on CPU: the seed compares it on CUDA (it goes through torch.compile's dynamo)"
    nvfuser_here = cuda and importlib.util.find_spec("nvfuser_direct") is not None
    if not nvfuser_here:
        skipped["FDWrapper"] = skipped["FD.execute"] = "needs CUDA and nvFuser" if cuda else "needs CUDA"

    report = Report(
        title=f"{type(module).__name__} ({source})",
        command=command,
        device=torch.cuda.get_device_name() if cuda else "CPU",
        versions=versions(),
        systems=[],
        points=[p.label for p in points],
    )
    if cuda:
        report.copy_gb_per_s = copy_bandwidth_gb_per_s()
    gen_generator = torch.Generator().manual_seed(0)
    for point in points:
        env = dict(point.env)
        inputs = [random_tensor(s, env, dev, gen_generator) for s in point.bucket.inputs]
        progress(f"{point.label}: compiling and checking every system")
        with torch.no_grad():
            expected = module(*inputs)
            systems: dict[str, Call] = {"Eager": lambda: module(*inputs)}
            systems["thunder.jit"] = lambda: jitted(*inputs)
            if thunderfx is not None:
                systems["thunderfx"] = lambda: thunderfx(*inputs)
            if compiled is not None:
                systems["torch.compile"] = lambda: compiled(*inputs)
            if nvfuser_here:
                jitted(*inputs)
                import thunder.examine

                fusions = thunder.examine.get_fusions(thunder.last_traces(jitted)[-1])
                if len(fusions) == 1:
                    wrapper = fusions[0][1]
                    args = [*inputs, *state]
                    fd = wrapper.last_used
                    systems["FDWrapper"] = lambda: wrapper(*args)
                    systems["FD.execute"] = lambda: fd.execute(args)
                else:
                    skipped["FDWrapper"] = skipped["FD.execute"] = f"Thunder formed {len(fusions)} fusions, not one"
            floors: set[str] = set()
            for name, aot in generated.items():
                systems[name] = lambda aot=aot: aot(*inputs)
                floor_name = floor_of(name)
                floor = bare_launches(aot, inputs) if floor_name not in floors else None
                if floor is not None:
                    systems[floor_name] = floor
                    floors.add(floor_name)
            if cuda and generated:
                name, aot = next(iter(generated.items()))
                graph_name = f"CUDA graph replay ({name})"
                try:
                    aot(*inputs)
                    torch.cuda.synchronize()
                    graph = torch.cuda.CUDAGraph()
                    with torch.cuda.graph(graph):
                        graph_out = aot(*inputs)
                    graph.replay()
                    torch.cuda.synchronize()
                    _check(graph_name, expected, graph_out, point.label)
                    systems[graph_name] = graph.replay
                except Exception as e:
                    skipped[graph_name] = f"capture failed: {type(e).__name__}: {str(e).splitlines()[0][:120]}"
            for name, fn in list(systems.items()):
                if name in floors:  # a floor replays the kernels of a module checked here
                    continue
                if name in generated:  # ours must run and match: an error here is a thunder-aot bug
                    _check(name, expected, fn(), point.label)
                    continue
                try:  # a baseline that fails or differs is left out, with the reason
                    _check(name, expected, fn() if not name.startswith("CUDA graph") else graph_out, point.label)
                except Exception as e:
                    skipped[name] = f"at {point.label}: {type(e).__name__}: {' '.join(str(e).split())[:160]}"
                    del systems[name]
            for name in systems:
                if name not in report.systems:
                    report.systems.append(name)
            samples = interleaved_times(systems, rounds, min_run_time)
            nbytes = io_bytes(inputs, expected, state)
            for name, fn in systems.items():
                m = Measurement(name, point.label, point.rows, statistics.median(samples[name]))
                if cuda:
                    m.device_us = device_time_us(fn)
                    m.gb_per_s = nbytes / (m.device_us * 1e-6) / 1e9
                report.measurements.append(m)
            progress(f"{point.label}: " + ", ".join(f"{n} {statistics.median(v):.1f} µs" for n, v in samples.items()))
            report.skipped = skipped
            checkpoint(report)  # a long run that is cut short still leaves the points it finished
    report.skipped = skipped
    return report


def print_compare(report: Report) -> None:
    """The report as torch.utils.benchmark's Compare table (per call, µs), then what was skipped."""
    from torch.utils.benchmark import Compare
    from torch.utils.benchmark.utils.common import Measurement as TorchMeasurement
    from torch.utils.benchmark.utils.common import TaskSpec

    rows = [
        TorchMeasurement(
            number_per_run=1,
            raw_times=[m.us_per_call * 1e-6],
            task_spec=TaskSpec(stmt=m.system, setup="", label=report.title, sub_label=m.point,
                               description=m.system, num_threads=1),
        )
        for m in report.measurements
    ]
    if rows:
        compare = Compare(rows)
        compare.trim_significant_figures()
        print(compare)
    for system, why in sorted(report.skipped.items()):
        print(f"skipped {system}: {why}", file=sys.stderr)
