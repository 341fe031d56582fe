"""``run_bench``: export the module per backend, check every system against eager, time them."""

from __future__ import annotations

import copy
import importlib.util
import statistics
from collections.abc import Callable

import torch

from thunder_aot.backends import get_backend, resolve_auto
from thunder_aot.bench.floors import bare_launches, io_bytes
from thunder_aot.bench.records import Call, Measurement, Report, Sizes, points_for
from thunder_aot.bench.report import floor_of
from thunder_aot.bench.timing import copy_bandwidth_gb_per_s, device_time_us, interleaved_times
from thunder_aot.codegen.header import versions
from thunder_aot.errors import ExportError
from thunder_aot.frontend.resolve import resolve_module
from thunder_aot.request import ExportRequest
from thunder_aot.shapes import parse_shapes
from thunder_aot.verify import load_module_from_text, random_inputs
from thunder_aot.verify.judge import judge, reference64, run64_perturbed


def _check(
    name: str, expected: object, actual: object, reference: object, where: str, perturbed: object
) -> None:
    actual = actual[0] if isinstance(actual, list) and not isinstance(expected, (list, tuple)) else actual
    judge(expected, actual, reference, f"{name} at {where}", perturbed=perturbed)


def _refuse_sizes_outside(buckets, points, sizes: Sizes) -> None:
    """One line naming the sizes no bucket serves, and which ranges there are."""
    if sizes is None:
        return
    ranges = (
        ", ".join(f"{r.name}={r.lo}..{r.hi}" for b in buckets for r in b.dims) or "none (exact buckets only)"
    )
    if isinstance(sizes, dict):
        names = {r.name for b in buckets for r in b.dims}
        unknown = sorted(set(sizes) - names)
        if unknown:
            raise ExportError(
                f"bench --sizes: no bucket has a dynamic dim {', '.join(unknown)} (dims: {ranges})"
            )
        served = {(n, v) for p in points for n, v in p.env}
        outside = [f"{n}={s}" for n, values in sizes.items() for s in values if (n, s) not in served]
    else:
        several = [b for b in buckets if len(b.dims) > 1]
        if several:
            names = ", ".join(r.name for r in several[0].dims)
            raise ExportError(
                f"bench --sizes: the bucket's dims {names} each need their sizes: name them, e.g. "
                f"--sizes '{';'.join(f'{r.name}={r.lo},{r.hi}' for r in several[0].dims)}'"
            )
        served = {value for p in points for _, value in p.env}
        outside = [str(s) for s in sizes if s not in served]
    if outside:
        raise ExportError(
            f"bench --sizes {','.join(outside)}: outside every bucket's dynamic range ({ranges})"
        )


def run_bench(
    source: str,
    shapes: list[str],
    backends: list[str],
    *,
    sizes: Sizes = None,
    device: str = "auto",
    rounds: int = 3,
    min_run_time: float = 0.1,
    skip: frozenset[str] = frozenset(),
    seed: int = 0,
    command: str = "",
    progress: Callable[[str], None] = lambda m: None,
    checkpoint: Callable[[Report], None] = lambda r: None,
) -> Report:
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
    _refuse_sizes_outside(buckets, points, sizes)
    unknown = skip - {"thunder.jit", "thunderfx"}
    if unknown:
        raise ExportError(f"bench --skip {','.join(sorted(unknown))}: expected thunder.jit or thunderfx")
    skipped: dict[str, str] = {name: "left out (--skip)" for name in sorted(skip)}

    generated = {}
    for spec in backends:
        name, _, mode = spec.partition(":")
        if mode not in ("", "unchecked"):
            raise ExportError(f"bench --backends: {spec!r}: expected NAME or NAME:unchecked")
        if name == "auto":
            name = resolve_auto()[0]
        system = f"thunder-aot({name}{', unchecked' if mode else ''})"
        backend = get_backend(name)
        reason = backend.unavailable_reason() if (cuda or name != "torch") else None
        if name != "torch" and not cuda:
            reason = reason or "needs CUDA"
        if reason:
            skipped[system] = reason
            continue
        progress(f"exporting with the {name} backend{' (unchecked)' if mode else ''}")
        from thunder_aot.pipeline import export  # imports Thunder: only where a backend exports

        request = ExportRequest(source, tuple(shapes), backend=name, checks=not mode)
        text = export(request, verify=False, progress=progress)
        gen = load_module_from_text(text, f"bench_{name}{'_unchecked' if mode else ''}")
        generated[system] = getattr(gen, type(module).__name__).from_module(module)

    import thunder

    jitted = None if "thunder.jit" in skip else thunder.jit(module)
    compiled = None
    thunderfx = None
    if cuda:
        from thunder.dynamo import thunderfx as make_thunderfx

        torch._dynamo.config.recompile_limit = max(64, len(points) + 8)
        compiled = torch.compile(module)
        thunderfx = None if "thunderfx" in skip else make_thunderfx(module)
    else:
        skipped["torch.compile"] = "not run on CPU: inductor compiles C++ for every new shape (minutes)"
        skipped["thunderfx"] = (
            "not run on CPU: the seed compares it on CUDA (it goes through torch.compile's dynamo)"
        )
    nvfuser_here = cuda and importlib.util.find_spec("nvfuser_direct") is not None
    if not nvfuser_here:
        skipped["FDWrapper"] = skipped["FD.execute"] = "needs CUDA and nvFuser" if cuda else "needs CUDA"
    elif jitted is None:
        skipped["FDWrapper"] = skipped["FD.execute"] = "Thunder's fusion is read from thunder.jit (left out)"

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
    gen_generator = torch.Generator().manual_seed(seed)
    for point in points:
        env = dict(point.env)
        inputs = random_inputs(point.bucket, env, dev, gen_generator)
        progress(f"{point.label}: compiling and checking every system")
        with torch.no_grad():
            expected = module(*inputs)
            reference = reference64(module, inputs)
            perturbed = None if reference is None else run64_perturbed(module, inputs)
            systems: dict[str, Call] = {"Eager": lambda: module(*inputs)}
            if jitted is not None:
                systems["thunder.jit"] = lambda: jitted(*inputs)
            if thunderfx is not None:
                systems["thunderfx"] = lambda: thunderfx(*inputs)
            if compiled is not None:
                systems["torch.compile"] = lambda: compiled(*inputs)
            if nvfuser_here and jitted is not None:
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
                    skipped["FDWrapper"] = skipped["FD.execute"] = (
                        f"Thunder formed {len(fusions)} fusions, not one"
                    )
            floors: set[str] = set()
            for name, aot in generated.items():
                systems[name] = lambda aot=aot: aot(*inputs)
                floor_name = floor_of(name)
                floor = bare_launches(aot, inputs) if floor_name not in floors else None
                if floor is not None:
                    systems[floor_name] = floor
                    floors.add(floor_name)
            graph_outputs: dict[str, object] = {}
            for name, aot in generated.items() if cuda else ():
                graph_name = f"CUDA graph replay ({name})"
                try:
                    aot(*inputs)
                    torch.cuda.synchronize()
                    graph = torch.cuda.CUDAGraph()
                    with torch.cuda.graph(graph):
                        graph_outputs[graph_name] = aot(*inputs)
                    graph.replay()
                    torch.cuda.synchronize()
                    systems[graph_name] = graph.replay
                except Exception as e:
                    skipped[graph_name] = (
                        f"capture failed: {type(e).__name__}: {str(e).splitlines()[0][:120]}"
                    )
            for name, fn in list(systems.items()):
                if name in floors:  # a floor replays the kernels of a module checked here
                    continue
                if name in generated:  # ours must run and match: an error here is a thunder-aot bug
                    _check(name, expected, fn(), reference, point.label, perturbed)
                    continue
                try:  # a baseline that fails or differs is left out, with the reason
                    _check(
                        name,
                        expected,
                        graph_outputs[name] if name in graph_outputs else fn(),
                        reference,
                        point.label,
                        perturbed,
                    )
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
            progress(
                f"{point.label}: "
                + ", ".join(f"{n} {statistics.median(v):.1f} µs" for n, v in samples.items())
            )
            report.skipped = skipped
            checkpoint(report)  # a long run that is cut short still leaves the points it finished
    report.skipped = skipped
    return report
