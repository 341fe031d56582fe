"""The command line's grammar: ``thunder-aot``'s parser, the types that refuse a bad argument with one
line before any work (exit 2), and the export request that parsed arguments stand for. ``check``
parses a generated file's regenerate command with the same parser."""

from __future__ import annotations

import argparse

from thunder_aot import __version__
from thunder_aot.backends import BACKEND_CHOICES
from thunder_aot.request import SEED_LIMIT, ExportRequest


def _seed(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if not 0 <= value < SEED_LIMIT:
        raise argparse.ArgumentTypeError(f"expected an integer in [0, 2**63), got {text!r}")
    return value


def _positive(kind: type):
    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            value = 0
        if not value > 0:
            raise argparse.ArgumentTypeError(f"expected a positive {kind.__name__}, got {text!r}")
        return value

    parse.__name__ = f"positive {kind.__name__}"
    return parse


def _size_list(text: str) -> list[int]:
    sizes = [int(s) for s in text.split(",")]
    if not sizes or min(sizes) < 1:
        raise ValueError(text)
    return sizes


def _counts(text: str) -> list[int]:
    """``1,8,32``: positive integers."""
    try:
        return _size_list(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected positive integers separated by commas (1,8,32), got {text!r}"
        ) from None


def _sizes(text: str) -> list[int] | dict[str, list[int]]:
    """``1,16,128`` (a bucket's one dynamic dim) or ``B=1,8;S=1,128`` (per dim: every combination)."""
    try:
        if "=" not in text:
            return _size_list(text)
        named = {}
        for part in text.split(";"):
            name, _, values = part.partition("=")
            if not name.strip().isidentifier() or name.strip() in named:
                raise ValueError(part)
            named[name.strip()] = _size_list(values)
        return named
    except ValueError:
        raise argparse.ArgumentTypeError(
            "expected positive integers separated by commas (1,16,128), or per dim (B=1,8;S=1,128), "
            f"got {text!r}"
        ) from None


def _path(text: str) -> str:
    if not text:
        raise argparse.ArgumentTypeError("expected a path, got an empty string")
    return text


def _add_export_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("source", help="import path of an nn.Module instance, class or zero-argument factory")
    p.add_argument(
        "--shapes",
        action="append",
        required=True,
        help='bucket spec, e.g. "1x[1..2048]x2880:bf16"; '
        'several buckets separated by ";" or repeated --shapes',
    )
    p.add_argument(
        "--backend",
        choices=BACKEND_CHOICES,
        default="auto",
        help="what each fusion region becomes: auto (nvfuser where it is installed and a CUDA device is "
        "present, else triton on CUDA, else torch), nvfuser, triton or torch (default: %(default)s)",
    )
    p.add_argument("--out", type=_path, help="file to write (atomically); prints to stdout without it")
    p.add_argument(
        "--force", action="store_true", help="let --out overwrite a file that thunder-aot did not generate"
    )
    p.add_argument(
        "--fallback",
        action="store_true",
        help="the generated nn.Module runs the source module's own forward for shapes outside every bucket",
    )
    p.add_argument(
        "--nvfuser-dynamic",
        choices=["specialize", "symbolic"],
        default="specialize",
        help="nvFuser, dynamic buckets: one static FusionDefinition per size met (default), "
        "or one symbolic (-1) FusionDefinition for the whole bucket",
    )
    p.add_argument(
        "--nvfuser-frontend",
        choices=["direct", "legacy"],
        default="direct",
        help="nvFuser Python frontend the module is written for: nvfuser_direct (default, what Thunder "
        "0.2.6 uses with nvFuser >= 0.2.34) or the older nvfuser module",
    )
    p.add_argument(
        "--no-verify",
        action="store_true",
        help="write the module without comparing it with the source module (export refuses a module it "
        "cannot verify on this machine otherwise); the header records it",
    )
    p.add_argument(
        "--verify-seed",
        type=_seed,
        default=None,
        metavar="N",
        help="seed of the verification's random inputs "
        "(default: a fresh one; a refusal names the seed that repeats it)",
    )
    p.add_argument(
        "--no-merge-projections",
        action="store_true",
        help="keep one matmul per linear layer: by default linear layers that read one input "
        "(q/k/v, gate/up) become one matmul on their weights concatenated, the module's parameters "
        "(and the source's, in "
        "from_module) becoming views of that tensor",
    )
    p.add_argument(
        "--unchecked",
        action="store_true",
        help="UNSAFE: leave out the generated module's per-call checks of inputs (tensor, device, layout), "
        "parameters (dtype, shape, device) and autograd; only the bucket dispatch remains. A wrong input "
        "then reads out of bounds or computes garbage. For callers that validate inputs themselves",
    )


DESCRIPTION = (
    "Export Thunder's fusions of a PyTorch module as a plain Python module: export traces it per shape "
    "bucket and writes the module, check proves generated files current, bench times it against eager, "
    "Thunder and torch.compile."
)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="thunder-aot", description=DESCRIPTION)
    p.add_argument("--version", action="version", version=f"thunder-aot {__version__}")
    sub = p.add_subparsers(dest="command", required=True)
    _add_export_args(
        sub.add_parser("export", help="trace a module per shape bucket and write a standalone module")
    )
    bench = sub.add_parser("bench", help="time eager, Thunder, torch.compile and thunder-aot side by side")
    bench.add_argument(
        "source", help="import path of the module (as for export); with --model, of a transformers causal LM"
    )
    bench.add_argument("--shapes", action="append", help="buckets, as for export (required without --model)")
    bench.add_argument(
        "--stack",
        action="store_true",
        help="with --model: also export the whole decoder stack as one module (Thunder traces it "
        "layer by layer: minutes for a 16-layer model)",
    )
    bench.add_argument(
        "--stack-module",
        action="append",
        default=[],
        metavar="FILE",
        help="with --model: a module already exported from the model's DecoderStackCall, timed as "
        "'thunder-aot(BACKEND) stack' (repeatable; instead of --stack's export)",
    )
    bench.add_argument(
        "--model",
        action="store_true",
        help="SOURCE is a whole causal LM: time forwards (eager, torch.compile default / reduce-overhead / "
        "per layer, thunder-aot whole decoder layers with and without CUDA graphs) at --sizes tokens",
    )
    bench.add_argument(
        "--decode",
        action="store_true",
        help="SOURCE is a causal LM on CUDA: greedy decode in ms per step and tokens/s (eager generate, "
        "a gpt-fast-style compiled loop, StaticDecoder with the model's layers and with layers generated "
        "per backend, with and without the CUDA graph) at --batches and --prompts, against the floor of "
        "the bytes a step reads; writes decode.json to --out",
    )
    bench.add_argument("--batches", type=_counts, default=[1, 8], help="with --decode: batch sizes (1,8,32)")
    bench.add_argument(
        "--prompts", type=_counts, default=[128], help="with --decode: prompt lengths (128,1024)"
    )
    bench.add_argument(
        "--steps", type=_positive(int), default=128, help="with --decode: timed steps (default 128)"
    )
    bench.add_argument(
        "--cold-start",
        action="store_true",
        help="with --model: instead of per-forward times, a fresh process to its first correct output "
        "(eager, torch.compile, thunder-aot layers and layer stack; empty and warm disk caches) at the "
        "first of --sizes tokens (default 16); writes cold.md to --out",
    )
    bench.add_argument(
        "--backends",
        default="auto",
        help="comma-separated thunder-aot backends (auto, nvfuser, triton, torch); "
        "NAME:unchecked adds that backend exported with --unchecked (default: %(default)s)",
    )
    bench.add_argument(
        "--sizes",
        type=_sizes,
        help="sizes to time: of a bucket's one dynamic dim, comma-separated (1,16,128), or per dim name "
        "for buckets with several (B=1,8;S=1,128: every combination; a dim not named: its edges) "
        "(default: edges and powers of two)",
    )
    bench.add_argument(
        "--device",
        choices=["auto", "cpu", "cuda"],
        default="auto",
        help="where to time: auto is cuda when present (default: %(default)s)",
    )
    bench.add_argument(
        "--rounds",
        type=_positive(int),
        default=3,
        help="interleaved timing rounds, the median reported (default: %(default)s)",
    )
    bench.add_argument(
        "--min-run-time",
        type=_positive(float),
        default=0.1,
        help="seconds per blocked_autorange (default: %(default)s)",
    )
    bench.add_argument(
        "--seed",
        type=_seed,
        default=0,
        help="seed of the random inputs (default: %(default)s); another seed where a baseline's MoE "
        "routing breaks a near tie otherwise than eager's at the default one",
    )
    bench.add_argument(
        "--skip",
        default="",
        help="baselines to leave out, comma-separated: thunder.jit, thunderfx "
        "(each compiles at every size: minutes for a decoder layer); with --model: torch.compile, "
        "torch.compile(reduce-overhead), torch.compile(layers)",
    )
    bench.add_argument("--out", type=_path, help="folder for bench.md, bench.json and bench.png")
    check = sub.add_parser(
        "check", help="regenerate every @generated file under PATHS and diff (exit 1 if stale)"
    )
    check.add_argument(
        "paths", nargs="*", default=["generated"], help="files or folders to check (default: generated)"
    )
    check.add_argument("--update", action="store_true", help="rewrite stale files instead of failing")
    return p


def request_from(args: argparse.Namespace) -> ExportRequest:
    """The export that parsed ``export`` arguments (or a header's regenerate command) ask for."""
    return ExportRequest(
        source=args.source,
        shapes=tuple(args.shapes),
        backend=args.backend,
        out=args.out,
        fallback=args.fallback,
        nvfuser_dynamic=args.nvfuser_dynamic,
        nvfuser_frontend=args.nvfuser_frontend,
        checks=not args.unchecked,
        verify_seed=getattr(args, "verify_seed", None),
        verify=not args.no_verify,
        merge_projections=not getattr(args, "no_merge_projections", False),
    )
