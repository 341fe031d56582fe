"""``thunder-aot bench --model``: a transformers causal LM per forward, eager against torch.compile
and thunder-aot's whole decoder layers, with and without CUDA graphs.

A forward is what a prefill (or a batch of decode tokens without a cache) costs a server:
``model(input_ids, use_cache=False, logits_to_keep=1)`` on a batch of one, at each token count.
The systems (each a copy of the model sharing nothing with the others but its weights' values):

- ``Eager``; ``torch.compile`` of the whole model (default mode) and ``torch.compile(reduce-overhead)``
  (its CUDA graphs); ``torch.compile(layers)``, each decoder layer compiled alone (the seed's way of
  applying a compiler to submodules);
- ``thunder-aot(B) layers``: every decoder layer replaced by the module exported from the model's
  first layer (``DecoderLayerCall``; ``DecoderLayerMaskCall`` for models whose layers need their mask:
  ``thunder_aot.integrations.transformers.needs_mask``) with backend B; ``... layers, graphed``: the
  same with each layer's calls replayed from its own CUDA graphs (``replace(..., cuda_graphs="static")``);
- ``thunder-aot(B) layer stack``: the model's forward replaced by ``StackAdapter`` over that
  generated layer (embedding, a loop over the generated layers, norm and LM head: no per-layer model
  code), with and without per-layer graphs;
- ``Eager, model graph`` and ``thunder-aot(B) layers, model graph`` / ``layer stack, model graph``:
  the whole forward captured in one CUDA graph by the caller per token count and replayed (as SGLang
  runs its decode batches).

Every system's last-token logits are judged against eager's (float64 reference making the system's
own top-k picks: :func:`judge_with_picks`) before timing; a
baseline that fails is listed as skipped with the reason, a thunder-aot system that fails too
(marked ``MISMATCH``), so a report never times a wrong answer silently.
"""

from __future__ import annotations

import collections
import copy
import statistics
from collections.abc import Callable

import torch

from thunder_aot.api import export
from thunder_aot.bench.records import Call, Measurement, Report
from thunder_aot.bench.timing import copy_bandwidth_gb_per_s, device_time_us, interleaved_times
from thunder_aot.codegen.header import versions
from thunder_aot.errors import ExportError
from thunder_aot.frontend.resolve import resolve_module
from thunder_aot.integrations.transformers import (
    DecoderLayerMaskCall,
    DecoderStackCall,
    LastTokenLogits,
    StackAdapter,
    mask_dtype,
    prefill_call,
)
from thunder_aot.swap import replace
from thunder_aot.verify import load_module_from_text
from thunder_aot.verify.judge import (
    ChoicesDiffer,
    judge,
    run64_choosing,
    run64_perturbed,
    run_choosing,
    run_recording_choices,
    same_choices,
)

#: baselines --skip may leave out
SKIPPABLE = ("torch.compile", "torch.compile(reduce-overhead)", "torch.compile(layers)")

#: token counts of the issue: powers of two up to 2048 and the seed's prefill sizes
DEFAULT_SIZES = (1, 2, 4, 8, 15, 16, 32, 64, 128, 256, 512, 568, 1024, 1369, 2048)


def layer_shapes(model: torch.nn.Module, max_tokens: int, mask: bool = False) -> str:
    """The bucket of a decoder layer of ``model`` called as ``DecoderLayerCall``: hidden states and
    the rotary cos and sin (as wide as the model's rotary embedding makes them), 1 to ``max_tokens``
    tokens, in the model's dtype (``mask``: and the attention mask of the dtype the model gives its
    layers, as ``DecoderLayerMaskCall``)."""
    config = model.config
    dtype = _dtype(model)
    width = _rotary_width(model)
    shapes = (
        f"1x[S=1..{max(2, max_tokens)}]x{config.hidden_size}:{dtype}, 1x[S]x{width}:{dtype}, "
        f"1x[S]x{width}:{dtype}"
    )
    if mask:
        shapes += f", 1x1x[S]x[S]:{str(mask_dtype(model)).removeprefix('torch.')}"
    return shapes


def _rotary_width(model: torch.nn.Module) -> int:
    """The last dim of the cos and sin ``model``'s rotary embedding makes (head_dim for Llama's,
    half of it for GPT-OSS's)."""
    base = getattr(model, "model", model)
    parameter = next(model.parameters())
    probe = torch.zeros(1, 1, model.config.hidden_size, dtype=parameter.dtype, device=parameter.device)
    with torch.no_grad():
        cos, _ = base.rotary_emb(probe, torch.zeros(1, 1, dtype=torch.long, device=parameter.device))
    return cos.shape[-1]


def _dtype(model: torch.nn.Module) -> str:
    return str(next(model.parameters()).dtype).removeprefix("torch.")


def _layers(model: torch.nn.Module) -> torch.nn.ModuleList:
    base = getattr(model, "model", model)
    layers = getattr(base, "layers", None)
    if not isinstance(layers, torch.nn.ModuleList) or not len(layers):
        raise ExportError(f"bench --model: {type(model).__name__} has no decoder layers at .model.layers")
    return layers


def _model_graph(
    forward: Callable[[torch.Tensor], torch.Tensor], ids: torch.Tensor
) -> tuple[Call, torch.Tensor, list[torch.Tensor]]:
    """``forward`` at ``ids``' shape captured in one CUDA graph: (replay, its static output, the top-k
    picks of a plain call before the capture: a replay calls no top-k to watch)."""
    static = ids.clone()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        _, picks = run_recording_choices(forward, [static])
        forward(static)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = forward(static)
    graph.replay()

    def replay(static: torch.Tensor = static) -> None:  # the graph reads its ids there: keep them alive
        graph.replay()

    return replay, out, picks


def judge_with_picks(
    expected: torch.Tensor,
    eager_picks: list[torch.Tensor],
    got: torch.Tensor,
    picks: list[torch.Tensor] | None,
    reference: torch.Tensor | None,
    eager: torch.nn.Module,
    reference_model: torch.nn.Module,
    inputs: list[torch.Tensor],
    where: str,
    perturbed: torch.Tensor | None = None,
) -> int:
    """Judge one system's output ``got`` (``picks``: the top-k picks it made; None: not watched)
    against eager's ``expected`` and ``reference`` (float64 making eager's picks). Where its picks
    differ from eager's, against the float64 run making its own, which must be a top-k of float64's
    input within ``verify.judge.PICK_TOLERANCE`` (else it is judged against eager's picks, and a
    different expert's output fails). ``perturbed``: float64's outputs with the inputs nudged
    (``verify.judge.run64_perturbed``). Returns how many routed rows it picked otherwise than eager."""
    if picks is None or same_choices(eager_picks, picks):
        judge(expected, got, reference, where, perturbed=perturbed)
        return 0
    rows = sum(int((a != b).any(-1).sum()) for a, b in zip(eager_picks, picks) if a.shape == b.shape)
    seen: list[torch.Tensor] = []  # eager's inputs to each top-k, making this system's picks
    expected_ours = run_choosing(eager, inputs, picks, seen)
    try:
        reference_ours = run64_choosing(
            reference_model, inputs, picks, reference_model, fallback=False, near=seen
        )
    except ChoicesDiffer:
        reference_ours = None
    judge(expected, got, reference, where, reference_ours, expected_ours, perturbed)
    return max(rows, 1)


def _picks_of(name: str, picks: dict[str, list[torch.Tensor]]) -> list[torch.Tensor] | None:
    """The top-k picks a system made (watched on its plain calls): a system replaying per-layer CUDA
    graphs (``..., graphed``) runs the kernels of its plain twin on the same inputs, so its twin's."""
    return picks.get(name, picks.get(name.removesuffix(", graphed")))


def run_model_bench(
    source: str,
    backends: list[str],
    *,
    sizes: list[int] | None = None,
    rounds: int = 3,
    min_run_time: float = 0.1,
    skip: frozenset[str] = frozenset(),
    stack: bool = False,
    stack_modules: list = (),
    seed: int = 0,
    command: str = "",
    progress: Callable[[str], None] = lambda m: None,
    checkpoint: Callable[[Report], None] = lambda r: None,
) -> Report:
    cuda = torch.cuda.is_available()
    torch.set_num_threads(1)
    sizes = list(sizes or DEFAULT_SIZES)
    base = resolve_module(source).eval().requires_grad_(False).to("cuda" if cuda else "cpu")
    layer_class = type(_layers(base)[0])
    skipped: dict[str, str] = {
        "thunder.jit / thunderfx": "left out: minutes of compile per token count for a whole model",
    }
    forwards: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {}
    graphed_forwards: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {}  # captured whole per size
    swapped: dict[str, list] = {}  # the thunder-aot systems' adapters, to count the calls they passed on

    def forward_of(model: torch.nn.Module) -> Callable[[torch.Tensor], torch.Tensor]:
        return lambda ids: model(ids, use_cache=False, logits_to_keep=1).logits

    unknown = skip - set(SKIPPABLE)
    if unknown:
        raise ExportError(
            f"bench --skip {','.join(sorted(unknown))}: expected some of {', '.join(SKIPPABLE)}"
        )
    skipped.update({name: "left out (--skip)" for name in sorted(skip)})
    forwards["Eager"] = forward_of(base)
    if cuda:
        graphed_forwards["Eager, model graph"] = forwards["Eager"]
        torch._dynamo.config.recompile_limit = max(64, 4 * len(sizes))
        if "torch.compile" not in skip:
            forwards["torch.compile"] = forward_of(torch.compile(copy.deepcopy(base)))
        if "torch.compile(reduce-overhead)" not in skip:
            forwards["torch.compile(reduce-overhead)"] = forward_of(
                torch.compile(copy.deepcopy(base), mode="reduce-overhead")
            )
        if "torch.compile(layers)" not in skip:
            layers_compiled = copy.deepcopy(base)
            layers = _layers(layers_compiled)
            for i in range(len(layers)):
                layers[i] = torch.compile(layers[i])
            forwards["torch.compile(layers)"] = forward_of(layers_compiled)
    else:
        skipped["torch.compile"] = "not run on CPU: inductor compiles C++ for every new shape (minutes)"
        skipped["CUDA graphs"] = "need CUDA"
    # the layers as a prefill calls them: without a mask where sdpa is causal on its own, else with
    # the mask the model builds (eager attention, sliding windows)
    plain = prefill_call(base.config)
    for backend in backends:
        layer = _layers(base)[0]
        gen = {}
        for call in dict.fromkeys((plain, DecoderLayerMaskCall) if cuda else (plain,)):
            call_shapes = layer_shapes(base, max(sizes), mask=call is DecoderLayerMaskCall)
            progress(
                f"exporting {layer_class.__name__} as {call.__name__} with the {backend} backend "
                f"at {call_shapes}"
            )
            text = export(call(layer), call_shapes, backend=backend, progress=progress)
            gen[call] = getattr(
                load_module_from_text(text, f"bench_model_{backend}_{call.__name__}"), call.__name__
            )
        # per call: no mask (transformers leaves causality to sdpa); inside a capture transformers
        # materializes the causal mask, which the mask layers take
        for suffix, call, graphs in (
            ("", plain, None),
            (", graphed", plain, "static"),
            (", model graph", DecoderLayerMaskCall, None),
        ):
            if not cuda and suffix:
                continue
            model = copy.deepcopy(base)
            replace(model, layer_class, gen[call], cuda_graphs=graphs)
            name = f"thunder-aot({backend}) layers{suffix}"
            (graphed_forwards if suffix == ", model graph" else forwards)[name] = forward_of(model)
            swapped[name] = list(_layers(model))
        # the model's forward replaced by a loop over the generated layers (no per-layer model code)
        for suffix, graphs in (("", None), (", graphed", "static"), (", model graph", None)):
            if not cuda and suffix:
                continue
            adapter = StackAdapter(copy.deepcopy(base), gen[plain], cuda_graphs=graphs)
            name = f"thunder-aot({backend}) layer stack{suffix}"
            (graphed_forwards if suffix == ", model graph" else forwards)[name] = forward_of(adapter)
            swapped[name] = [adapter]
        if stack:  # the whole decoder stack as one module (Thunder traces it layer by layer: minutes)
            stack_shapes = f"1x[S=1..{max(2, max(sizes))}]x{base.config.hidden_size}:{_dtype(base)}"
            progress(f"exporting the decoder stack with the {backend} backend at {stack_shapes}")
            text = export(DecoderStackCall(base), stack_shapes, backend=backend, progress=progress)
            stack_class = load_module_from_text(text, f"bench_model_{backend}_stack").DecoderStackCall
            adapter = StackAdapter(copy.deepcopy(base), stack_class)
            forwards[f"thunder-aot({backend}) stack"] = forward_of(adapter)
            swapped[f"thunder-aot({backend}) stack"] = [adapter]

    for path in stack_modules:  # exported earlier (a 16-layer stack traces for minutes)
        text = path.read_text()
        backend = next(
            (
                line.split(":", 1)[1].strip()
                for line in text.splitlines()[:8]
                if line.startswith("# Backend:")
            ),
            None,
        )
        module = load_module_from_text(text, f"bench_model_stack_{path.stem}")
        if backend is None or not hasattr(module, "DecoderStackCall"):
            raise ExportError(
                f"bench --stack-module {path}: "
                "expected a module thunder-aot generated from a DecoderStackCall"
            )
        name = f"thunder-aot({backend}) stack ({path.name})"
        adapter = StackAdapter(copy.deepcopy(base), module.DecoderStackCall)
        forwards[name] = forward_of(adapter)
        swapped[name] = [adapter]
        if cuda:
            graphed = StackAdapter(copy.deepcopy(base), module.DecoderStackCall)
            graphed_forwards[f"{name}, model graph"] = forward_of(graphed)
            swapped[f"{name}, model graph"] = [graphed]

    report = Report(
        title=f"{type(base).__name__} ({source}), {len(_layers(base))} layers, per forward",
        command=command,
        device=torch.cuda.get_device_name() if cuda else "CPU",
        versions=versions(),
        systems=[],
        points=[f"S={s}" for s in sizes],
    )
    if cuda:
        report.copy_gb_per_s = copy_bandwidth_gb_per_s()
    reference_model = LastTokenLogits(copy.deepcopy(base).to(torch.float64))
    reference_eager = LastTokenLogits(base)  # eager making another system's picks (verify.judge.run_choosing)
    generator = torch.Generator().manual_seed(seed)  # the token ids
    vocab = base.config.vocab_size
    for s in sizes:
        point = f"S={s}"
        ids = torch.randint(0, vocab, (1, s), generator=generator).to(base.device)
        progress(f"{point}: compiling, capturing and checking every system")
        with torch.no_grad():
            # each system judged against the float64 run that makes its top-k picks (MoE routing:
            # a near tie a bf16 router breaks otherwise than eager's is no error; verify.judge)
            expected, picks = run_recording_choices(forwards["Eager"], [ids])
            chosen = {"Eager": picks, "Eager, model graph": picks}
            reference = run64_choosing(reference_model, [ids], picks, reference_model)  # grouped matmuls too
            perturbed = run64_perturbed(reference_model, [ids], reference_model, picks)
            systems: dict[str, Call] = {}
            outputs: dict[str, torch.Tensor] = {}
            for name, forward in forwards.items():
                systems[name] = lambda forward=forward: forward(ids)
                if name.startswith("thunder-aot") and ", graphed" not in name:
                    outputs[name], chosen[name] = run_recording_choices(forward, [ids])
            for name, forward in graphed_forwards.items():
                try:
                    replay, out, graph_picks = _model_graph(forward, ids)
                except Exception as e:  # noqa: BLE001 - reported with the reason
                    skipped[name] = f"at {point}: capture failed: {type(e).__name__}: {str(e)[:160]}"
                    continue
                systems[name] = replay
                outputs[name] = out
                chosen.setdefault(name, graph_picks)
            for name, fn in list(systems.items()):
                try:
                    got = outputs[name] if name in outputs else fn()
                    rows = judge_with_picks(
                        expected,
                        picks,
                        got.clone(),
                        _picks_of(name, chosen),
                        reference,
                        reference_eager,
                        reference_model,
                        [ids],
                        f"{name} at {point}",
                        perturbed,
                    )
                    if rows:
                        progress(
                            f"{point}: {name} picks other experts than eager in {rows} routed row(s) "
                            "(tokens x layers): judged against float64 making its picks"
                        )
                except Exception as e:  # noqa: BLE001 - reported with the reason
                    mark = "MISMATCH: " if name.startswith("thunder-aot") else ""
                    skipped[f"{name} at {point}"] = (
                        f"{mark}{type(e).__name__}: {' '.join(str(e).split())[:200]}"
                    )
                    del systems[name]
            for name in systems:
                if name not in report.systems:
                    report.systems.append(name)
            samples = interleaved_times(systems, rounds, min_run_time)
            for name, fn in systems.items():
                m = Measurement(name, point, s, statistics.median(samples[name]))
                if cuda:
                    m.device_us = device_time_us(fn, calls=20)
                report.measurements.append(m)
        progress(f"{point}: " + ", ".join(f"{n} {statistics.median(v):.0f} µs" for n, v in samples.items()))
        for name, adapters in swapped.items():  # an adapter that ran the original would time eager, not ours
            fallbacks = collections.Counter()
            for adapter in adapters:
                fallbacks.update({why: n for why, n in adapter.calls.items() if why != "generated"})
            if fallbacks:
                skipped[f"{name}: original layers ran"] = ", ".join(
                    f"{n} calls with {why}" for why, n in fallbacks.items()
                )
        report.skipped = skipped
        checkpoint(report)
    report.skipped = skipped
    return report
