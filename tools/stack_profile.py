"""Contributor tooling (not part of thunder-aot): where the host time of a causal LM's forward goes
when its decoder layers run as generated modules
(``thunder_aot.integrations.transformers.LayerStack``).

Usage on the GPU machine: ``python3 tools/stack_profile.py --sizes 1,16 --out DIR``. Exports the
first layer of ``thunder_aot.examples.hf:llama_1b_causal_lm`` as ``DecoderLayerCall`` (Triton, not
verified: the model bench verifies the same export), then times, per token count, in one process:
the whole stack forward, its parts (rotary lookup, the loop over the layers, final norm + LM head),
one generated layer alone, and the same layer called 16 times on one input; then writes a
cProfile of stack forwards (``DIR/cprofile_S*.txt``) and torch.profiler's CPU-side op table
(``DIR/ops_S*.txt``). Prints a table of µs per call (median of blocked_autorange).
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
from pathlib import Path

import torch
from torch.utils.benchmark import Timer


def _us(fn, min_run_time: float) -> float:
    fn()
    torch.cuda.synchronize()
    return (
        Timer(stmt="fn(); sync()", globals={"fn": fn, "sync": torch.cuda.synchronize})
        .blocked_autorange(min_run_time=min_run_time)
        .median
        * 1e6
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="1,16")
    parser.add_argument("--min-run-time", type=float, default=0.3)
    parser.add_argument("--out", default="build/stack_profile")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(1)

    from thunder_aot.api import export
    from thunder_aot.bench.model_bench import layer_shapes
    from thunder_aot.examples.hf import llama_1b_causal_lm
    from thunder_aot.integrations.transformers import DecoderLayerCall, LayerStack
    from thunder_aot.verify import load_module_from_text

    sizes = [int(s) for s in args.sizes.split(",")]
    model = llama_1b_causal_lm().eval().requires_grad_(False)
    layer = model.model.layers[0]
    text = export(DecoderLayerCall(layer), layer_shapes(model, max(sizes)), backend="triton", verify=False)
    generated = load_module_from_text(text, "stack_profile_layer").DecoderLayerCall
    stack = LayerStack(model, generated)
    layers = stack.__dict__["layers"]
    rows = []
    with torch.no_grad():
        for s in sizes:
            embeds = model.model.embed_tokens(
                torch.randint(0, model.config.vocab_size, (1, s), device="cuda")
            )
            cos, sin = stack.rotary(embeds)

            def loop():
                h = embeds
                for g in layers:
                    h = g(h, cos, sin)
                return h

            hidden = loop()
            one = layers[0]
            parts = {
                "stack forward": lambda: stack(embeds),
                "rotary lookup": lambda: stack.rotary(embeds),
                "loop over 16 layers": loop,
                "norm + lm_head (last token)": lambda: stack.__dict__["lm_head"](
                    stack.__dict__["norm"](hidden[:, -1:, :])
                ),
                "one layer": lambda: one(embeds, cos, sin),
                "one layer x16, one input": lambda: [one(embeds, cos, sin) for _ in range(16)],
                "one layer's forward() x16 (no nn.Module call)": lambda: [
                    one.forward(embeds, cos, sin) for _ in range(16)
                ],
            }
            for name, fn in parts.items():
                rows.append((s, name, _us(fn, args.min_run_time)))
                print(f"S={s} {name}: {rows[-1][2]:.1f} us", flush=True)
            profile = cProfile.Profile()
            profile.enable()
            for _ in range(20):
                stack(embeds)
            torch.cuda.synchronize()
            profile.disable()
            text_io = io.StringIO()
            pstats.Stats(profile, stream=text_io).sort_stats("tottime").print_stats(40)
            (out / f"cprofile_S{s}.txt").write_text(text_io.getvalue())
            with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
                for _ in range(5):
                    stack(embeds)
                torch.cuda.synchronize()
            (out / f"ops_S{s}.txt").write_text(
                prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=40)
            )
    table = ["| S | part | µs per call |", "|---|---|---|"] + [f"| {s} | {n} | {t:.1f} |" for s, n, t in rows]
    (out / "parts.md").write_text("\n".join(table) + "\n")
    print("\n".join(table))


if __name__ == "__main__":
    main()
