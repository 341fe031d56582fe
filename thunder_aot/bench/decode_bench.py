"""``thunder-aot bench --decode``: greedy decoding of a causal LM, in ms per step, side by side.

Each system prefills the same random prompt and then runs timed greedy steps (CUDA events around
the whole loop, after warm-up steps); ms per step is the loop's time over its steps, tokens/s the
batch over that. The systems:

- ``eager generate``: ``model.generate`` with transformers' dynamic cache (a run of ``n`` new tokens
  less the run of one: the prefill removed);
- ``gpt-fast loop``: transformers' StaticCache and ``torch.compile(step, mode="reduce-overhead",
  fullgraph=True)``, called in a bare loop (CUDA only);
- ``StaticDecoder(model layers)``: :class:`~thunder_aot.integrations.transformers.StaticDecoder`
  with the model's own layers, each step one CUDA graph;
- ``StaticDecoder(<backend>)``: the same with the layers generated from
  ``DecoderLayerStaticCacheCall`` by each backend, with and without the graph;
- ``generate(StaticCache, <backend> layers)``: ``model.generate`` over transformers' StaticCache with
  the decoder layers replaced by the generated ones (``thunder_aot.replace``), batch 1.

The floor is the bytes a step must read (every weight once, but only one row of an untied
embedding; the valid part of the KV cache) over the measured device-to-device copy bandwidth.
Before timing, every system's tokens are compared with the first system's (greedy tokens of the
first steps; a difference is reported, not hidden). Each backend's graphed decoder is also judged
against a float64 run of the model (:func:`~thunder_aot.integrations.transformers.judge_steps`: its
prefill and first 16 steps' logits, at batch 1 and the shortest prompt)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from thunder_aot.api import export
from thunder_aot.bench.timing import copy_bandwidth_gb_per_s
from thunder_aot.errors import ExportError
from thunder_aot.examples.hf import static_cache_shapes
from thunder_aot.frontend.resolve import resolve_module
from thunder_aot.integrations.transformers import DecoderLayerStaticCacheCall, StaticDecoder, judge_steps
from thunder_aot.integrations.transformers.decode import kv_cache_dims, rope_width
from thunder_aot.verify import load_module_from_text


@dataclass
class DecodeRow:
    system: str
    batch: int
    prompt: int
    ms_per_step: float
    tokens_per_s: float
    floor_fraction: float
    first_tokens_match: bool


@dataclass
class DecodeReport:
    model: str
    command: str
    device: str
    dtype: str
    steps: int
    copy_gb_per_s: float
    floor_ms: dict[str, float] = field(default_factory=dict)
    rows: list[DecodeRow] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)
    exports_s: dict[str, float] = field(default_factory=dict)
    #: per backend: its graphed decoder's logits judged against float64 (judge_steps), or why not
    judged: dict[str, str] = field(default_factory=dict)


def step_bytes(model: torch.nn.Module, batch: int, length: int) -> int:
    """Bytes one greedy step reads at least: every weight once (one row of an untied input
    embedding), and the keys and values of ``length`` positions of every layer."""
    seen, total = set(), 0
    embedding = model.get_input_embeddings().weight
    tied = embedding is model.get_output_embeddings().weight
    for p in model.parameters():
        if p.data_ptr() in seen:
            continue
        seen.add(p.data_ptr())
        total += (
            p.numel() * p.element_size() if (p is not embedding or tied) else p.shape[1] * p.element_size()
        )
    config = model.config
    kv_heads, head_dim = kv_cache_dims(config)
    total += 2 * config.num_hidden_layers * batch * kv_heads * length * head_dim * embedding.element_size()
    return total


def _timed_steps(run_step: Callable[[], None], steps: int) -> float:
    """ms per step of ``steps`` calls of ``run_step`` (CUDA events around the loop)."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    for _ in range(steps):
        run_step()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / steps


def _decoder_system(decoder: StaticDecoder, ids: torch.Tensor, steps: int, warmup: int):
    """(ms per step, the first tokens) of ``decoder``: prefill, warm-up steps, then timed steps."""
    tokens = [decoder.prefill(ids)]
    for _ in range(warmup):
        tokens.append(decoder.step(tokens[-1]))
    state = {"t": tokens[-1]}

    def run() -> None:
        state["t"] = decoder.step(state["t"])

    return _timed_steps(run, steps), torch.stack(tokens[: warmup + 1], 1)


def _gpt_fast_system(model, ids: torch.Tensor, max_len: int, steps: int, warmup: int):
    from transformers import StaticCache

    batch, prompt = ids.shape
    cache = StaticCache(config=model.config, max_cache_len=max_len)

    def forward(tokens, positions):
        out = model(
            tokens,
            past_key_values=cache,
            cache_position=positions,
            position_ids=positions[None].expand(batch, -1),
            use_cache=True,
        )
        return out.logits[:, -1].argmax(-1)

    compiled = torch.compile(forward, mode="reduce-overhead", fullgraph=True)
    with torch.no_grad():
        first = forward(ids, torch.arange(prompt, device=ids.device))
        tokens = [first]
        position = torch.tensor([prompt], device=ids.device)
        state = {"t": first, "p": position}

        def run() -> None:
            state["t"] = compiled(state["t"][:, None].clone(), state["p"]).clone()
            state["p"] += 1

        for _ in range(warmup):
            run()
            tokens.append(state["t"])
        return _timed_steps(run, steps), torch.stack(tokens, 1)


def _generate_ms_per_step(generate: Callable[[int], torch.Tensor], prompt: int, steps: int):
    """(ms per new token, the new tokens) of ``generate(n)`` (ids with ``n`` new tokens): a run of
    ``steps + 1`` tokens less a run of one (the prefill removed), after a warm-up run."""

    def timed(n: int) -> tuple[float, torch.Tensor]:
        torch.cuda.synchronize()
        t = time.perf_counter()
        out = generate(n)
        torch.cuda.synchronize()
        return (time.perf_counter() - t) * 1e3, out

    timed(2)
    full, out = timed(steps + 1)
    one, _ = timed(1)
    return (full - one) / steps, out[:, prompt:]


def _eager_generate(model, ids: torch.Tensor, steps: int):
    return _generate_ms_per_step(
        lambda n: model.generate(ids, max_new_tokens=n, min_new_tokens=n, do_sample=False),
        ids.shape[1],
        steps,
    )


def _generate_static(model, layer_class: type, ids: torch.Tensor, max_len: int, steps: int):
    """``model.generate`` over transformers' StaticCache with every decoder layer replaced by
    ``layer_class`` (per-layer adapters; the calls the generated module did not serve are counted
    and make the system fail)."""
    import copy

    from transformers import StaticCache

    from thunder_aot.swap import replace

    swapped = copy.deepcopy(model)
    replace(swapped, type(model.model.layers[0]), layer_class)

    # (disable_compile: given a static cache, generate compiles the forward, and the adapters' call
    # counters made torch.compile recompile every step)
    result = _generate_ms_per_step(
        lambda n: swapped.generate(
            ids,
            max_new_tokens=n,
            min_new_tokens=n,
            do_sample=False,
            past_key_values=StaticCache(config=model.config, max_cache_len=max_len),
            disable_compile=True,
        ),
        ids.shape[1],
        steps,
    )
    unserved = {k: v for layer in swapped.model.layers for k, v in layer.calls.items() if k != "generated"}
    if unserved:
        raise RuntimeError(f"calls the generated layers did not serve: {unserved}")
    return result


#: the decode steps whose logits are judged against float64 (after the prefill's)
JUDGED_STEPS = 16


def _judged(model, layer_class: type, prompt: int, max_len: int, steps: int) -> str:
    """:func:`judge_steps` of a graphed decoder over ``layer_class`` at batch 1, as a line."""
    ids = torch.randint(0, model.config.vocab_size, (1, prompt), device="cuda")
    try:
        calls = judge_steps(StaticDecoder(model, layer_class, max_len, 1), ids, steps)  # (no grad)
    except ExportError as e:
        return f"refused: {str(e).splitlines()[0][:300]}"
    except torch.OutOfMemoryError:
        return "not judged: the model's float64 copy does not fit on the device"
    finally:
        torch.cuda.empty_cache()
    return f"the prefill and {calls - 1} steps within the bounds"


def run_decode_bench(
    source: str,
    backends: list[str],
    batches: list[int],
    prompts: list[int],
    steps: int = 128,
    warmup: int = 8,
    out: Path | None = None,
    progress: Callable[[str], None] = print,
    command: str = "",
) -> DecodeReport:
    """Decode ``source`` (an import path to a causal LM on CUDA) with every system at each batch
    size and prompt length; returns (and writes under ``out``) the report."""
    if not torch.cuda.is_available():
        raise ExportError("bench --decode needs CUDA (its systems capture CUDA graphs); no CUDA device here")
    model = resolve_module(source).eval().cuda()
    config = model.config
    kv_heads, head_dim = kv_cache_dims(config)
    dtype = str(next(model.parameters()).dtype).removeprefix("torch.")
    max_len = max(prompts) + steps + warmup + 2
    report = DecodeReport(
        model=source,
        command=command,
        device=torch.cuda.get_device_name(),
        dtype=dtype,
        steps=steps,
        copy_gb_per_s=copy_bandwidth_gb_per_s(),
    )
    generated: dict[str, type] = {}
    shapes = static_cache_shapes(
        config.hidden_size,
        kv_heads,
        head_dim,
        {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}[dtype],
        batch=max(batches),
        prefill=max(prompts),
        max_len=max_len,
        rope_dim=rope_width(model),
    )
    for backend in backends:
        t = time.perf_counter()
        progress(f"exporting {type(model.model.layers[0]).__name__} with the {backend} backend at {shapes}")
        try:  # (export traces a CPU copy of the layer and verifies on CUDA)
            text = export(DecoderLayerStaticCacheCall(model.model.layers[0]), shapes, backend=backend)
        except Exception as e:  # noqa: BLE001 - reported as a skipped system
            report.skipped[f"StaticDecoder({backend})"] = f"export failed: {str(e).splitlines()[0][:300]}"
            progress(f"{backend}: export failed: {str(e)[:2000]}")
            continue
        report.exports_s[backend] = round(time.perf_counter() - t, 1)
        generated[backend] = getattr(
            load_module_from_text(text, f"decode_bench_{backend}"), DecoderLayerStaticCacheCall.__name__
        )
    for backend, cls in generated.items():
        report.judged[backend] = _judged(model, cls, min(prompts), max_len, JUDGED_STEPS)
        progress(f"{backend}: logits against float64: {report.judged[backend]}")
    for prompt in prompts:
        for batch in batches:
            floor_ms = step_bytes(model, batch, prompt + steps // 2) / (report.copy_gb_per_s * 1e9) * 1e3
            report.floor_ms[f"B={batch},P={prompt}"] = round(floor_ms, 4)
            ids = torch.randint(0, config.vocab_size, (batch, prompt), device="cuda", generator=None)
            systems: list[tuple[str, Callable[[], tuple[float, torch.Tensor]]]] = []
            if batch == 1:
                systems.append(("eager generate", lambda: _eager_generate(model, ids, min(steps, 32))))
            systems.append(("gpt-fast loop", lambda: _gpt_fast_system(model, ids, max_len, steps, warmup)))
            systems.append(
                (
                    "StaticDecoder(model layers)",
                    lambda: _decoder_system(StaticDecoder(model, None, max_len, batch), ids, steps, warmup),
                )
            )
            for backend, cls in generated.items():
                for graph in (True, False):
                    name = f"StaticDecoder({backend}{'' if graph else ', no graph'})"
                    systems.append(
                        (
                            name,
                            lambda cls=cls, graph=graph: _decoder_system(
                                StaticDecoder(model, cls, max_len, batch, cuda_graph=graph),
                                ids,
                                steps,
                                warmup,
                            ),
                        )
                    )
            if batch == 1:
                for backend, cls in generated.items():
                    systems.append(
                        (
                            f"generate(StaticCache, {backend} layers)",
                            lambda cls=cls: _generate_static(model, cls, ids, max_len, min(steps, 32)),
                        )
                    )
            first = None
            for name, run in systems:
                try:
                    with torch.no_grad():
                        ms, tokens = run()
                except Exception as e:  # noqa: BLE001 - reported as a skipped system
                    report.skipped[f"{name} B={batch} P={prompt}"] = f"{type(e).__name__}: {str(e)[:300]}"
                    progress(f"{name} B={batch} P={prompt}: {type(e).__name__}: {str(e)[:300]}")
                    continue
                n = min(8, tokens.shape[1])
                first = tokens[:, :n] if first is None else first
                match = bool(torch.equal(first[:, :n].cpu(), tokens[:, :n].cpu()))
                row = DecodeRow(
                    name,
                    batch,
                    prompt,
                    round(ms, 4),
                    round(batch * 1e3 / ms, 1),
                    round(floor_ms / ms, 3),
                    match,
                )
                report.rows.append(row)
                progress(
                    f"{name:38s} B={batch:<3d} P={prompt:<5d} {ms:8.3f} ms/step "
                    f"{row.tokens_per_s:9.1f} tok/s {100 * row.floor_fraction:5.1f}% of floor "
                    f"{floor_ms:.3f} ms; first tokens match: {match}"
                )
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        (out / "decode.json").write_text(json.dumps(asdict(report), indent=1))
        (out / "decode.md").write_text(markdown(report))
    return report


def markdown(report: DecodeReport) -> str:
    """The report as a page: the command and device, then ms per step per system (the lab runner's
    page header names the commit: tools/gpu_suites.py decode)."""
    lines = [
        f"# Greedy decode: {report.model}",
        "",
        f"`{report.command}` on {report.device}, {report.dtype}, "
        f"{report.steps} timed steps; floor: bytes a step reads over a measured copy at "
        f"{report.copy_gb_per_s:.0f} GB/s.",
        "",
        "| system | batch | prompt | ms/step | tokens/s | share of floor | first tokens as the first's |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in report.rows:
        lines.append(
            f"| {r.system} | {r.batch} | {r.prompt} | {r.ms_per_step:.3f} | {r.tokens_per_s:.0f} | "
            f"{100 * r.floor_fraction:.0f}% | {'yes' if r.first_tokens_match else 'no'} |"
        )
    lines += ["", "Floors (ms/step): " + ", ".join(f"{k}: {v:.3f}" for k, v in report.floor_ms.items())]
    lines += [""] + [
        f"- StaticDecoder({backend}), logits of the prefill and first {JUDGED_STEPS} steps against float64 "
        f"(batch 1): {verdict}"
        for backend, verdict in report.judged.items()
    ]
    lines += [f"- skipped {name}: {why}" for name, why in report.skipped.items()]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":  # (the CLI's `thunder-aot bench --decode` is the same)
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("source")
    parser.add_argument("--backends", default="triton,nvfuser")
    parser.add_argument("--batches", default="1")
    parser.add_argument("--prompts", default="128")
    parser.add_argument("--steps", type=int, default=128)
    parser.add_argument("--out", type=Path)
    a = parser.parse_args()
    run_decode_bench(
        a.source,
        [b for b in a.backends.split(",") if b],
        [int(b) for b in a.batches.split(",")],
        [int(p) for p in a.prompts.split(",")],
        a.steps,
        out=a.out,
    )
