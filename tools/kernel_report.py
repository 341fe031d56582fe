"""Each Triton kernel of a generated module compiled for a GPU on this machine (no GPU needed):
registers, spills, shared memory and instruction counts from ptxas, before any device time.

The module runs once under Triton's interpreter at the given sizes; each kernel launch records its
arguments' types and compile-time constants, and the kernel is compiled for the target (sm_90:
the H200) as the module compiles it on the GPU (16-byte aligned pointers). The per-thread figures
come from ptxas's own report (``-v``). A kernel that fails to compile here would fail there.

    python3 tools/kernel_report.py generated/rotary_triton.py     # its header's source, its last bucket
    python3 tools/kernel_report.py build/layer.py \\
        --source thunder_aot.examples.hf:gpt_oss_decoder_layer_mask \\
        --inputs "1x[S=1..1024]x2880:bf16, 1x[S]x32:bf16, 1x[S]x32:bf16, 1x1x[S]x[S]:bf16"
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _short(dtype) -> str:
    import torch

    return {
        torch.bfloat16: "bf16",
        torch.float16: "fp16",
        torch.float32: "fp32",
        torch.float64: "fp64",
        torch.int64: "i64",
        torch.int32: "i32",
        torch.int16: "i16",
        torch.int8: "i8",
        torch.uint8: "u8",
        torch.bool: "i1",
    }[dtype]


def _load(path: str):
    from thunder_aot.verify import load_module_from_text

    with open(path) as f:
        return load_module_from_text(f.read(), "report_module")


def record_launches(path: str, source: str, shapes: str, size: int = 3) -> list[dict]:
    """Under Triton's interpreter: one call of the generated module at ``path`` (built from
    ``source``) on random inputs of the bucket ``shapes`` (each dynamic dim at ``size``, within its
    range: one compile serves the range); per kernel, its name in the module and the types of the
    arguments of its first launch."""
    import torch

    from thunder_aot.frontend.resolve import resolve_module
    from thunder_aot.runtime import triton as rt
    from thunder_aot.shapes import parse_shapes

    generated = _load(path)
    names = {id(v): k for k, v in vars(generated).items() if isinstance(v, rt.Kernel)}
    (bucket,) = parse_shapes([shapes])
    env = {r.name: min(r.hi, max(r.lo, size)) for r in bucket.dims}
    torch.manual_seed(0)
    inputs = [
        torch.randn(tuple(d if isinstance(d, int) else d.at(env) for d in spec.shape)).to(
            getattr(torch, spec.dtype)
        )
        for spec in bucket.inputs
    ]
    cls = next(
        v
        for v in vars(generated).values()
        if isinstance(v, type) and v.__module__ == generated.__name__ and hasattr(v, "from_module")
    )
    module = cls.from_module(resolve_module(source))
    seen: dict[str, dict] = {}
    original = rt.Kernel.launch

    def launch(self, programs, args, raw, misaligned, n):
        types = [
            (
                ("*" + _short(a.dtype))
                if isinstance(a, torch.Tensor)
                else ("i64" if abs(int(a)) >= 2**31 else "i32")
            )
            for a in args
        ]
        seen.setdefault(names[id(self)], {"kernel": names[id(self)], "args": types, "n": int(n)})
        return original(self, programs, args, raw, misaligned, n)

    rt.Kernel.launch = launch
    try:
        with torch.no_grad():
            module(*inputs)
    finally:
        rt.Kernel.launch = original
    return list(seen.values())


def compile_report(kernel, record: dict, arch: int = 90) -> dict:
    """ptxas's figures for ``kernel`` (a :class:`~thunder_aot.runtime.triton.Kernel`) compiled
    for ``sm_<arch>`` with the argument types of ``record``."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.backends.nvidia.compiler import get_ptxas
    from triton.compiler import ASTSource

    fn = kernel.fn
    constexprs = {"BLOCK": kernel.block}
    types = list(record["args"])
    signature, attrs = {}, {}
    for i, param in enumerate(fn.params):
        if param.name == "BLOCK" or (param.name == "N" and param.is_constexpr):
            signature[param.name] = "constexpr"
            if param.name == "N":
                constexprs["N"] = record["n"]
            continue
        kind = (
            "i64"
            if param.name == "N" and abs(record["n"]) >= 2**31
            else "i32" if param.name == "N" else types.pop(0)
        )
        signature[param.name] = kind
        if kind.startswith("*"):
            attrs[(i,)] = [["tt.divisibility", 16]]
    compiled = triton.compile(
        ASTSource(fn, signature, constexprs, attrs),
        target=GPUTarget("cuda", arch, 32),
        options={"num_warps": kernel.num_warps},
    )
    ptx = compiled.asm["ptx"]
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "k.ptx")
        with open(path, "w") as f:
            f.write(ptx)
        done = subprocess.run(
            [get_ptxas(arch).path, "-v", f"--gpu-name=sm_{arch}a", path, "-o", os.path.join(tmp, "k.o")],
            capture_output=True,
            text=True,
        )
    regs = re.search(r"Used (\d+) registers", done.stderr)
    spills = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", done.stderr)
    body = [
        line
        for line in ptx.splitlines()
        if line.startswith("\t") and not line.strip().startswith(("//", "."))
    ]
    return {
        "kernel": record["kernel"],
        "warps": kernel.num_warps,
        "BLOCK": kernel.block,
        "registers": int(regs.group(1)) if regs else None,
        "spill stores (B)": int(spills.group(1)) if spills else None,
        "spill loads (B)": int(spills.group(2)) if spills else None,
        "shared (B)": compiled.metadata.shared,
        "PTX instructions": len(body),
    }


def main() -> None:
    import json

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("module", help="a generated Triton module (.py)")
    parser.add_argument("--source", help="the module it was exported from (default: its header's Source)")
    parser.add_argument("--inputs", help="one bucket, as --shapes writes it (default: the module's last)")
    parser.add_argument("--size", type=int, default=3, help="each dynamic dim's size in the interpreted call")
    parser.add_argument("--arch", type=int, default=90)
    parser.add_argument("--record", action="store_true", help=argparse.SUPPRESS)
    ns = parser.parse_args()
    if ns.source is None or ns.inputs is None:
        generated = _load(ns.module)
        header = next(line for line in open(ns.module) if line.startswith("# Source: "))
        ns.source = ns.source or header.split()[2]
        ns.inputs = ns.inputs or generated.BUCKETS[-1]
    if ns.record:
        print(json.dumps(record_launches(ns.module, ns.source, ns.inputs, ns.size)))
        return
    child = subprocess.run(
        [
            sys.executable,
            __file__,
            ns.module,
            "--source",
            ns.source,
            "--inputs",
            ns.inputs,
            "--size",
            str(ns.size),
            "--record",
        ],
        env={**os.environ, "TRITON_INTERPRET": "1"},
        capture_output=True,
        text=True,
    )
    if child.returncode:
        sys.exit(child.stderr[-3000:])
    records = json.loads(child.stdout.strip().splitlines()[-1])
    generated = _load(ns.module)
    rows = [compile_report(getattr(generated, r["kernel"]), r, ns.arch) for r in records]
    keys = list(rows[0])
    print("| " + " | ".join(keys) + " |")
    print("|" + "---|" * len(keys))
    for r in rows:
        print("| " + " | ".join(str(r[k]) for k in keys) + " |")


if __name__ == "__main__":
    main()
