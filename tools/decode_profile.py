"""Where a decode step's time goes (lab tooling, not part of thunder-aot): the GPU kernels of graphed
StaticDecoder steps grouped by kind and by name, how busy the GPU is inside a step, and the step's
matmuls alone in one CUDA graph (what cuBLAS reaches on these weights, against the copy bandwidth).

    . .gpu/env.sh && python3 tools/decode_profile.py [--backend triton|model] [--batches 1,8]
        [--prompt 128] [--steps 20] [--out DIR]

Writes DIR/profile.json and DIR/profile.md (one section per batch size)."""

from __future__ import annotations

import argparse
import collections
import json
import re
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

from thunder_aot.api import export
from thunder_aot.bench.timing import copy_bandwidth_gb_per_s
from thunder_aot.examples.hf import static_cache_shapes
from thunder_aot.frontend.resolve import resolve_module
from thunder_aot.integrations.transformers import DecoderLayerStaticCacheCall, StaticDecoder
from thunder_aot.integrations.transformers.decode import kv_cache_dims, rope_width
from thunder_aot.verify import load_module_from_text

#: kernel kinds, by a pattern of the kernel's name (first match wins)
KINDS = [
    ("matmul", r"gemv|gemm|cutlass|xmma|nvjet|cublas|splitK|sm90|sm80"),
    ("attention", r"flash|fmha|attention|sdpa|softmax"),
    ("index", r"index|scatter|gather"),
    ("reduce", r"reduce|argmax|max_kernel"),
    ("copy", r"copy|cat|CatArray"),
    ("elementwise", r"elementwise|vectorized|unrolled|fill"),
    ("triton", r"^triton|_kernel$|^k_"),
]


def kind_of(name: str) -> str:
    for kind, pattern in KINDS:
        if re.search(pattern, name, re.IGNORECASE):
            return kind
    return "other"


def graph_ms(fn, rounds: int = 50) -> float:
    """ms per replay of ``fn`` captured in one CUDA graph."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    for _ in range(5):
        graph.replay()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    for _ in range(rounds):
        graph.replay()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / rounds


def matmuls_alone(model, batch: int, copy_gb_s: float) -> dict:
    """Every nn.Linear of the model applied to a [batch, in] input, all in one graph: the step's
    matmul time with nothing else, and the same with q/k/v and gate/up concatenated."""
    linears = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
    inputs = {m: torch.randn(batch, m.in_features, device="cuda", dtype=m.weight.dtype) for m in linears}
    weight_bytes = sum(m.weight.numel() * m.weight.element_size() for m in linears)

    def run():
        for m in linears:
            torch.nn.functional.linear(inputs[m], m.weight)

    ms = graph_ms(run)
    layers = model.model.layers
    fused = []
    for layer in layers:
        a, mlp = layer.self_attn, layer.mlp
        fused.append(torch.cat([a.q_proj.weight, a.k_proj.weight, a.v_proj.weight]))
        fused.append(a.o_proj.weight)
        fused.append(torch.cat([mlp.gate_proj.weight, mlp.up_proj.weight]))
        fused.append(mlp.down_proj.weight)
    fused.append(model.lm_head.weight)
    fused_inputs = [torch.randn(batch, w.shape[1], device="cuda", dtype=w.dtype) for w in fused]

    def run_fused():
        for x, w in zip(fused_inputs, fused):
            torch.nn.functional.linear(x, w)

    ms_fused = graph_ms(run_fused)
    floor = weight_bytes / (copy_gb_s * 1e9) * 1e3
    return {
        "linears": len(linears),
        "weight_bytes": weight_bytes,
        "ms": round(ms, 4),
        "ms_fused_qkv_gateup": round(ms_fused, 4),
        "floor_ms": round(floor, 4),
        "share_of_floor": round(floor / ms, 3),
        "share_of_floor_fused": round(floor / ms_fused, 3),
    }


def profile_steps(decoder: StaticDecoder, ids: torch.Tensor, steps: int) -> dict:
    tokens = decoder.prefill(ids)
    for _ in range(8):
        tokens = decoder.step(tokens)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    for _ in range(steps):
        tokens = decoder.step(tokens)
    end.record()
    torch.cuda.synchronize()
    ms = start.elapsed_time(end) / steps
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            tokens = decoder.step(tokens)
        torch.cuda.synchronize()
    kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    kernels = [e for e in kernels if not e.name.startswith("Memcpy") and not e.name.startswith("Memset")]
    by_name: dict[str, list[float]] = collections.defaultdict(list)
    for e in kernels:
        by_name[e.name].append(e.time_range.end - e.time_range.start)
    by_kind: dict[str, float] = collections.defaultdict(float)
    count_kind: dict[str, int] = collections.defaultdict(int)
    for name, times in by_name.items():
        by_kind[kind_of(name)] += sum(times) / steps
        count_kind[kind_of(name)] += len(times) // steps
    busy = sum(sum(t) for t in by_name.values()) / steps / 1e3
    top = sorted(by_name.items(), key=lambda kv: -sum(kv[1]))[:40]
    return {
        "ms_per_step": round(ms, 4),
        "kernels_per_step": len(kernels) / steps,
        "kernel_ms_per_step": round(busy, 4),
        "by_kind_us": {k: round(v, 1) for k, v in sorted(by_kind.items(), key=lambda kv: -kv[1])},
        "count_by_kind": dict(count_kind),
        "top": [
            {"name": n[:160], "per_step": len(t) / steps, "us_per_step": round(sum(t) / steps, 1)}
            for n, t in top
        ],
    }


def markdown(result: dict) -> str:
    lines = [
        f"# Decode step profile: {result['source']} ({result['backend']}), prompt {result['prompt']}",
        "",
    ]
    lines.append(f"copy bandwidth {result['copy_gb_s']:.0f} GB/s; device {result['device']}")
    for batch, r in result["batches"].items():
        m = r["matmuls"]
        p = r["profile"]
        lines += [
            "",
            f"## batch {batch}",
            "",
            f"- graphed step: {p['ms_per_step']:.3f} ms; kernels {p['kernels_per_step']:.0f} per step, "
            f"{p['kernel_ms_per_step']:.3f} ms of kernel time",
            f"- matmuls alone ({m['linears']} linears, one graph): {m['ms']:.3f} ms "
            f"({100 * m['share_of_floor']:.0f}% of their floor {m['floor_ms']:.3f}); q/k/v and gate/up "
            f"concatenated: {m['ms_fused_qkv_gateup']:.3f} ms ({100 * m['share_of_floor_fused']:.0f}%)",
            "",
            "| kind | us/step | kernels/step |",
            "|---|---|---|",
        ]
        lines += [f"| {k} | {v:.1f} | {p['count_by_kind'][k]} |" for k, v in p["by_kind_us"].items()]
        lines += ["", "| kernel | per step | us/step |", "|---|---|---|"]
        lines += [f"| `{t['name'][:100]}` | {t['per_step']:.0f} | {t['us_per_step']:.1f} |" for t in p["top"]]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", default="thunder_aot.examples.hf:llama_1b_causal_lm")
    parser.add_argument("--backend", default="triton", help="a backend, or 'model' for the model's layers")
    parser.add_argument("--batches", default="1,8")
    parser.add_argument("--prompt", type=int, default=128)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--out", type=Path, default=Path("decode-profile"))
    a = parser.parse_args()
    batches = [int(b) for b in a.batches.split(",")]
    model = resolve_module(a.source).eval().cuda()
    config = model.config
    kv_heads, head_dim = kv_cache_dims(config)
    dtype = {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "fp32"}[
        next(model.parameters()).dtype
    ]
    max_len = a.prompt + 2 * a.steps + 20
    cls = None
    if a.backend != "model":
        shapes = static_cache_shapes(
            config.hidden_size,
            kv_heads,
            head_dim,
            dtype,
            batch=max(batches),
            prefill=a.prompt,
            max_len=max_len,
            rope_dim=rope_width(model),
        )
        text = export(DecoderLayerStaticCacheCall(model.model.layers[0]), shapes, backend=a.backend)
        cls = getattr(load_module_from_text(text, "decode_profile"), DecoderLayerStaticCacheCall.__name__)
    copy_gb_s = copy_bandwidth_gb_per_s()
    result = {
        "source": a.source,
        "backend": a.backend,
        "prompt": a.prompt,
        "device": torch.cuda.get_device_name(),
        "copy_gb_s": copy_gb_s,
        "batches": {},
    }
    with torch.no_grad():
        for batch in batches:
            ids = torch.randint(0, config.vocab_size, (batch, a.prompt), device="cuda")
            decoder = StaticDecoder(model, cls, max_len, batch)
            result["batches"][batch] = {
                "profile": profile_steps(decoder, ids, a.steps),
                "matmuls": matmuls_alone(model, batch, copy_gb_s),
            }
            print(json.dumps(result["batches"][batch], indent=1), flush=True)
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / "profile.json").write_text(json.dumps(result, indent=1))
    (a.out / "profile.md").write_text(markdown(result))
    print(markdown(result))


if __name__ == "__main__":
    main()
