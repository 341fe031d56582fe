"""``thunder-aot bench --model --cold-start``: a fresh process to its first correct output.

What a server restart costs: per system, a new Python process imports torch and transformers,
builds the causal LM from its factory, prepares the system (``torch.compile``, or the generated
decoder layers swapped in) and runs one forward of ``S`` tokens, synchronized; its logits are then
judged against eager's in the same process. Each system is measured twice: with empty disk caches
(Triton's and inductor's cache folders fresh) and with warm ones (the same folders, filled by the
cold run; the operating system's file cache is not dropped). Reported per run: seconds from the
process's start (taken by the parent, before it spawns the child) to the first output, and the part
after the model was built (the system's own cost: importing the generated module, compiles, the
first call). The copy of the model the judgement runs is made before the system is prepared and
its time left out of both. The generated module is exported once, before, by the parent process.

The child is this module run as a script: ``python -m thunder_aot.bench.cold SOURCE SYSTEM S
[GENERATED]``; it prints one JSON line. Its imports (torch, the package's modules) are made inside
the functions on purpose: the child's own clock starts before them, so they are part of what a
cold start costs and are timed where they happen.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

#: the systems a cold start is measured for (thunder-aot ones take a generated layer file:
#: DecoderLayerCall, or DecoderLayerMaskCall for models whose layers need their mask)
SYSTEMS = ("Eager", "torch.compile", "thunder-aot layers", "thunder-aot layer stack")

#: the disk caches a warm start reuses, by environment variable (nvFuser modules: the kernel store,
#: thunder_aot.runtime.nvfuser_kernels)
CACHE_VARIABLES = ("TRITON_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR", "THUNDER_AOT_NVFUSER_KERNELS")


@dataclass(frozen=True)
class ColdStart:
    """One run: seconds from the process's start to its first output, and after the model was built."""

    system: str
    caches: str  # "cold" | "warm"
    to_first_output_s: float
    after_build_s: float


def _child(source: str, system: str, tokens: int, generated: str | None) -> dict:
    import copy

    import torch

    from thunder_aot.bench.model_bench import _layers
    from thunder_aot.frontend.resolve import resolve_module

    cuda = torch.cuda.is_available()
    model = resolve_module(source).eval().requires_grad_(False).to("cuda" if cuda else "cpu")
    built = time.time()
    reference = copy.deepcopy(model)  # for the judgement only: its time is not the system's
    copy_s = time.time() - built
    ids = torch.randint(
        0, model.config.vocab_size, (1, tokens), generator=torch.Generator().manual_seed(0)
    ).to(model.device)
    built = time.time()
    if system == "torch.compile":
        model = torch.compile(model)
    elif system.startswith("thunder-aot"):
        from thunder_aot.api import load
        from thunder_aot.integrations.transformers import StackAdapter, prefill_call
        from thunder_aot.swap import replace

        layer_class = getattr(load(generated), prefill_call(model.config).__name__)
        if system == "thunder-aot layers":
            replace(model, type(_layers(model)[0]), layer_class)
        else:
            model = StackAdapter(model, layer_class)
    with torch.no_grad():
        logits = model(ids, use_cache=False, logits_to_keep=1).logits
        if cuda:
            torch.cuda.synchronize()
        first = time.time()
        from thunder_aot.integrations.transformers import LastTokenLogits
        from thunder_aot.verify.judge import judge, run64, run64_perturbed

        expected = reference(ids, use_cache=False, logits_to_keep=1).logits
        upcast = LastTokenLogits(reference.to(torch.float64))
        exact = run64(upcast, [ids], upcast=upcast)  # grouped matmuls (MoE experts) too
        nudged = run64_perturbed(upcast, [ids], upcast=upcast)
        judge(expected, logits, exact, f"{system}'s first output", perturbed=nudged)
    return {"first_output_at": first, "after_build_s": first - built, "copy_s": copy_s}


def _run_child(source: str, system: str, tokens: int, generated: Path | None, caches: Path) -> dict:
    env = {**os.environ, **{v: str(caches / v.lower()) for v in CACHE_VARIABLES}}
    argv = [
        sys.executable,
        "-m",
        "thunder_aot.bench.cold",
        source,
        system,
        str(tokens),
        *([str(generated)] if generated else []),
    ]
    started = time.time()
    done = subprocess.run(argv, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise RuntimeError(f"the fresh process failed: {last[:300]}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    return {
        "to_first_output_s": result["first_output_at"] - started - result["copy_s"],
        "after_build_s": result["after_build_s"],
    }


def run_cold_start(
    source: str, backend: str, tokens: int, *, systems: tuple[str, ...] = SYSTEMS, progress=lambda m: None
) -> tuple[list[ColdStart], dict[str, str]]:
    """Every system of ``systems`` started cold and warm: (runs, systems skipped with the reason)."""
    import torch

    from thunder_aot.api import export
    from thunder_aot.bench.model_bench import _layers, layer_shapes
    from thunder_aot.frontend.resolve import resolve_module
    from thunder_aot.integrations.transformers import DecoderLayerMaskCall, prefill_call

    runs, skipped = [], {}
    with tempfile.TemporaryDirectory(prefix="thunder-aot-cold-") as tmp:
        generated = None
        if any(s.startswith("thunder-aot") for s in systems):
            model = resolve_module(source).eval().cpu()
            call = prefill_call(model.config)
            progress(f"exporting the decoder layer as {call.__name__} with the {backend} backend")
            generated = Path(tmp) / "layer.py"
            export(
                call(_layers(model)[0]),
                layer_shapes(model, max(tokens, 2), mask=call is DecoderLayerMaskCall),
                backend=backend,
                out=generated,
                progress=progress,
            )
            del model
        for system in systems:
            if system == "torch.compile" and not torch.cuda.is_available():
                skipped[system] = "not run on CPU: inductor compiles C++ for the model (minutes)"
                continue
            caches = Path(tmp) / f"caches-{len(runs)}"
            try:
                progress(f"{system}: a fresh process with empty caches")
                cold = _run_child(source, system, tokens, generated, caches)
                progress(f"{system}: a fresh process with warm caches")
                warm = _run_child(source, system, tokens, generated, caches)
            except RuntimeError as e:
                skipped[system] = str(e)
                continue
            for label, r in (("cold", cold), ("warm", warm)):
                runs.append(ColdStart(system, label, r["to_first_output_s"], r["after_build_s"]))
    return runs, skipped


def markdown(runs: list[ColdStart], skipped: dict[str, str], title: str, command: str, backend: str) -> str:
    """The cold-start table: per system, cold and warm, both spans in seconds."""
    lines = [
        f"# Cold start: {title}",
        "",
        f"    {command}",
        "",
        f"A fresh process to its first output (judged against eager), seconds; thunder-aot systems use "
        f"the {backend} backend. 'after build': the part after the model was built.",
        "",
        "| system | cold: to first output | cold: after build | warm: to first output | warm: after build |",
        "|---|---|---|---|---|",
    ]
    for system in dict.fromkeys(r.system for r in runs):
        cold = next(r for r in runs if r.system == system and r.caches == "cold")
        warm = next(r for r in runs if r.system == system and r.caches == "warm")
        lines.append(
            f"| {system} | {cold.to_first_output_s:.2f} | {cold.after_build_s:.3f} | "
            f"{warm.to_first_output_s:.2f} | {warm.after_build_s:.3f} |"
        )
    if skipped:
        lines += ["", "Skipped:", ""] + [f"- {name}: {why}" for name, why in skipped.items()]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    source_arg, system_arg, tokens_arg = sys.argv[1:4]
    print(
        json.dumps(
            _child(source_arg, system_arg, int(tokens_arg), sys.argv[4] if len(sys.argv) > 4 else None)
        )
    )
