"""num_warps of each kernel of an exported Triton module, swept on the module itself (GPU machine;
lab tooling: how the schedule's warps for kernels with many live row values were chosen).

    python3 tools/warps_sweep.py thunder_aot.examples.hf:gpt_oss_decoder_layer_mask \
        "1x[S=1..1024]x2880:bf16, 1x[S]x32:bf16, 1x[S]x32:bf16, 1x1x[S]x[S]:bf16" \
        --sizes 1,16,1024 --warps 1,2,4,8,16 --out OUT.md

Exports the module once with the Triton backend, then for each of its kernels and each num_warps:
recompiles that kernel alone with it (the others keep the schedule's) and takes the kernel's device
time per call from torch.profiler at each size. Prints, per kernel, its schedule note, the number
of values its body computes (assignment lines, a proxy for the registers a thread holds) and the
time per setting, the schedule's own setting marked.
"""

from __future__ import annotations

import argparse
import copy
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402
from layer_profile import kernel_times  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("source")
    parser.add_argument("shapes")
    parser.add_argument("--sizes", default="1,16,1024")
    parser.add_argument("--warps", default="1,2,4,8,16")
    parser.add_argument("--out")
    args = parser.parse_args()

    from thunder_aot.frontend.resolve import resolve_module
    from thunder_aot.pipeline import export
    from thunder_aot.request import ExportRequest
    from thunder_aot.runtime.triton import Kernel
    from thunder_aot.shapes import parse_shapes
    from thunder_aot.verify import load_module_from_text, random_inputs

    module = copy.deepcopy(resolve_module(args.source)).eval().cuda()
    text = export(ExportRequest(args.source, (args.shapes,), backend="triton"), verify=False)
    gen = load_module_from_text(text, "warps_sweep")
    fn = getattr(gen, type(module).__name__).from_module(module)
    kernels = {name: k for name, k in vars(gen).items() if isinstance(k, Kernel)}
    notes, values = {}, {}
    for name in kernels:
        body = text.split(f"def {name}_kernel(", 1)[1].split("\n\n\n", 1)[0]
        note = re.search(r"^\s+# ((?:persistent|looped|pointwise|one program)[^\n]*)", body, re.M)
        notes[name] = note.group(1) if note else ""
        values[name] = len(re.findall(r"^\s+\w+ = ", body, re.M))
    (bucket,) = parse_shapes([args.shapes])[:1]
    dim = bucket.dims[0].name
    sizes = [int(s) for s in args.sizes.split(",")]
    generator = torch.Generator().manual_seed(0)
    inputs = {s: random_inputs(bucket, {dim: s}, "cuda", generator) for s in sizes}
    warps = [int(w) for w in args.warps.split(",")]
    lines = [
        f"# num_warps per kernel: {args.source}",
        "",
        f"    python3 tools/warps_sweep.py {' '.join(sys.argv[1:])}",
        "",
    ]
    lines += ["µs per call (torch.profiler, 20 calls); * the schedule's setting", ""]
    head = (
        "| kernel | schedule | values | "
        + " | ".join(f"{dim}={s} w={w}" for s in sizes for w in warps)
        + " |"
    )
    lines += [head, "|" + "---|" * (3 + len(sizes) * len(warps))]
    with torch.no_grad():
        for name, kernel in kernels.items():
            own = kernel.num_warps
            cells = {}
            for w in warps:
                kernel.num_warps, kernel.binaries = w, {}
                for s in sizes:
                    try:
                        times = kernel_times(lambda: fn(*inputs[s]))
                        t = sum(v for k, (v, _) in times.items() if k == f"{name}_kernel")
                        cells[s, w] = f"{t:.1f}{'*' if w == own else ''}"
                    except Exception as e:  # noqa: BLE001 - a setting the compiler refuses
                        cells[s, w] = f"failed: {type(e).__name__}"
                print(name, w, [cells[s, w] for s in sizes], flush=True)
            kernel.num_warps, kernel.binaries = own, {}
            note = notes.get(name, "").replace("|", "/")
            lines.append(
                f"| {name} | {note} | {values[name]} | "
                + " | ".join(cells[s, w] for s in sizes for w in warps)
                + " |"
            )
    out = "\n".join(lines) + "\n"
    if args.out:
        Path(args.out).write_text(out)
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
