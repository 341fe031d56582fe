"""Command line: thunder-aot export | check | bench (also: python -m thunder_aot)."""

from __future__ import annotations

import argparse
import contextlib
import difflib
import shlex
import signal
import sys
import threading
from pathlib import Path

from thunder_aot import __version__
from thunder_aot.backends import BACKEND_CHOICES, resolve_auto
from thunder_aot.codegen.header import (
    FORMATTER,
    MARK,
    REGENERATE_PREFIX,
    recorded_formatter,
    regenerate_command,
    versions,
)
from thunder_aot.codegen.output import check_out_folder, check_out_target, write_atomic
from thunder_aot.errors import ExportError
from thunder_aot.request import SEED_LIMIT, ExportRequest

#: set by the SIGINT handler main() installs: a Ctrl-C that code it interrupted swallowed (Thunder's
#: interpreter can) still stops the command at the next progress report or before any write
_INTERRUPTED = threading.Event()


def _on_sigint(signum, frame) -> None:
    _INTERRUPTED.set()
    raise KeyboardInterrupt


def _stop_if_interrupted() -> None:
    if _INTERRUPTED.is_set():
        raise KeyboardInterrupt


def _progress(message: str) -> None:
    _stop_if_interrupted()
    print(f"thunder-aot: {message}", file=sys.stderr, flush=True)


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


def _sizes(text: str) -> list[int]:
    try:
        sizes = [int(s) for s in text.split(",")]
    except ValueError:
        sizes = []
    if not sizes or min(sizes) < 1:
        raise argparse.ArgumentTypeError(
            f"expected positive integers separated by commas (1,16,128), got {text!r}"
        )
    return sizes


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
        help="sizes of a bucket's dynamic dim to time, comma-separated (default: edges and powers of two)",
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


def _request(args: argparse.Namespace):
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


def cmd_export(args: argparse.Namespace) -> int:
    from thunder_aot.pipeline import export  # imports Thunder: only where export runs

    if args.out is not None:
        check_out_target(args.out, args.force)
    # stdout carries the module alone: what the source prints while it is traced and verified goes
    # to stderr
    with contextlib.redirect_stdout(sys.stderr):
        text = export(_request(args), progress=_progress)
    _stop_if_interrupted()
    if args.out is None:
        sys.stdout.write(text)
        return 0
    try:
        written = write_atomic(Path(args.out), text)
    except OSError as e:
        raise ExportError(f"cannot write --out {args.out}: {e.strerror or e}") from None
    _progress(f"wrote {args.out}" if written else f"{args.out} is already up to date")
    return 0


def python_files(paths: list[str]) -> list[Path]:
    """Every ``.py`` file ``paths`` name: the files given, and those under the folders given."""
    files: list[Path] = []
    for raw in paths:
        p = Path(raw)
        if not p.exists():
            raise ExportError(f"no such file or directory: {raw}")
        files += sorted(p.rglob("*.py")) if p.is_dir() else [p]
    return files


def generated_files(paths: list[str]) -> list[Path]:
    """The generated files among :func:`python_files` (by their header)."""
    return [f for f in python_files(paths) if regenerate_command(f) is not None]


def _read_text(path: Path) -> tuple[str | None, str]:
    """(the file's text, "") or (None, why it cannot be read as UTF-8 text)."""
    try:
        data = path.read_bytes()
    except OSError as e:
        return None, e.strerror or str(e)
    try:
        return data.decode("utf-8"), ""
    except UnicodeDecodeError as e:
        return None, f"not UTF-8 text (byte 0x{data[e.start]:02x} at offset {e.start})"


def cmd_check(args: argparse.Namespace) -> int:
    """One line per .py file given: ok, stale (with its diff), not generated, unreadable, or a
    header that cannot run or is damaged; the exit code is 1 if any file is anything but ok or not
    generated."""
    files = python_files(args.paths)
    stale = failed = generated = 0
    for path in files:
        actual, why = _read_text(path)
        if actual is None:
            failed += 1
            print(f"UNREADABLE {path}: {why}")
            continue
        head = actual.splitlines()[:12]
        if not head or not head[0].startswith(MARK):
            if any(REGENERATE_PREFIX in line or "@generated" in line for line in head):
                failed += 1
                print(f"DAMAGED {path}: a thunder-aot header without its first line {MARK!r}")
            else:
                print(f"NOT GENERATED {path}")
            continue
        generated += 1
        argv = regenerate_command(path)
        if not argv:
            failed += 1
            print(f"DAMAGED {path}: its header has no readable {REGENERATE_PREFIX.strip()!r} line")
            continue
        if len(argv) > 2 and argv[2].startswith("<") and argv[2].endswith(" instance>"):
            print(
                f"SKIP   {path}: exported in Python from a module object ({argv[2][1:-10]}), "
                "not an import path: not regenerable here (export it from an import path to make it "
                "checkable)"
            )
            continue
        try:
            expected = _regenerate(path)
        except KeyboardInterrupt:
            raise
        except BaseException as e:  # noqa: BLE001 - a header that cannot run fails that file, not the check
            failed += 1
            reason = (
                f"exited with {e.code}"
                if isinstance(e, SystemExit)
                else " ".join(str(e).split())[:300] or type(e).__name__
            )
            print(f"FAILED {path}: its regenerate command cannot run: {reason}")
            continue
        if expected == actual:
            print(f"ok     {path}")
            continue
        if args.update:
            write_atomic(path, expected)
            print(f"update {path}")
            continue
        stale += 1
        recorded, here = recorded_formatter(actual), f"{FORMATTER} {versions()[FORMATTER]}"
        note = (
            ""
            if recorded == here
            else f" (its header names the formatter {recorded or 'of an unrecorded version'}, this "
            f"environment has {here}: where that is the only change, install that version)"
        )
        print(f"STALE  {path}{note}")
        sys.stdout.writelines(
            difflib.unified_diff(
                actual.splitlines(keepends=True),
                expected.splitlines(keepends=True),
                f"{path} (checked in)",
                f"{path} (regenerated)",
            )
        )
    if not generated and not failed:
        raise ExportError(f"no @generated files under {', '.join(args.paths)}")
    if stale:
        print(
            f"{stale} of {generated} generated files are stale; "
            f"refresh them with: thunder-aot check --update {' '.join(args.paths)}"
        )
    if failed:
        print(
            f"{failed} of {len(files)} files could not be checked (see UNREADABLE, DAMAGED or FAILED above)"
        )
    return 1 if stale or failed else 0


def _regenerate(path: Path) -> str:
    """The text the export command in ``path``'s header writes (verification off)."""
    from thunder_aot.pipeline import export  # imports Thunder: only where export runs

    argv = regenerate_command(path)
    if not argv or argv[:2] != ["thunder-aot", "export"]:
        raise ExportError(f"unexpected regenerate command {shlex.join(argv or [])!r}")
    export_args = parser().parse_args(argv[1:])
    return export(_request(export_args), verify=False, progress=lambda m: None)


def cmd_bench(args: argparse.Namespace) -> int:
    from thunder_aot.bench import print_compare, write_reports  # torch: loaded for bench alone

    sizes = args.sizes
    if args.out:  # before any measurement: a folder bench cannot write loses nothing measured
        check_out_folder(args.out)
    command = shlex.join(["thunder-aot", "bench", *sys.argv[2:]]) if sys.argv[1:2] == ["bench"] else ""
    checkpoint = (lambda report: write_reports(report, Path(args.out))) if args.out else (lambda report: None)
    if args.cold_start:
        return _cold_start(args, sizes, command)
    if args.model:
        from thunder_aot.bench.model_bench import run_model_bench  # torch: loaded for bench alone

        if args.shapes:
            raise ExportError(
                "bench --model: the layers' buckets follow from the model and --sizes; drop --shapes"
            )
        backends = [b for b in args.backends.split(",") if b]
        report = run_model_bench(
            args.source,
            backends,
            sizes=sizes,
            rounds=args.rounds,
            min_run_time=args.min_run_time,
            skip=frozenset(x for x in args.skip.split(",") if x),
            stack=args.stack,
            seed=args.seed,
            stack_modules=[Path(f) for f in args.stack_module],
            command=command,
            progress=_progress,
            checkpoint=checkpoint,
        )
    elif args.stack or args.stack_module:
        raise ExportError(
            "bench --stack / --stack-module: expected --model (they time a causal LM's decoder stack)"
        )
    elif not args.shapes:
        raise ExportError("bench: --shapes is required (or --model for a whole causal LM)")
    else:
        report = _bench_module(args, sizes, command, checkpoint)
    print_compare(report)
    if args.out:
        for path in write_reports(report, Path(args.out)):
            _progress(f"wrote {path}")
    return 0


def _cold_start(args: argparse.Namespace, sizes: list[int] | None, command: str) -> int:
    from thunder_aot.bench.cold import markdown, run_cold_start  # torch: loaded for bench alone

    backends = [b for b in args.backends.split(",") if b]
    if (
        not args.model
        or args.shapes
        or args.stack
        or args.stack_module
        or len(backends) != 1
        or ":" in backends[0]
    ):
        raise ExportError(
            "bench --cold-start: expected --model and one backend (no --shapes, --stack, :unchecked)"
        )
    backend = backends[0]
    if backend == "auto":
        backend, _ = resolve_auto()
    tokens = (sizes or [16])[0]
    runs, skipped = run_cold_start(args.source, backend, tokens, progress=_progress)
    text = markdown(runs, skipped, f"{args.source}, {tokens} tokens", command, backend)
    print(text, end="")
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "cold.md").write_text(text)
        _progress(f"wrote {out / 'cold.md'}")
    return 0


def _bench_module(args: argparse.Namespace, sizes: list[int] | None, command: str, checkpoint) -> object:
    from thunder_aot.bench import run_bench  # torch: loaded for bench alone

    return run_bench(
        args.source,
        args.shapes,
        [b for b in args.backends.split(",") if b],
        sizes=sizes,
        device=args.device,
        rounds=args.rounds,
        min_run_time=args.min_run_time,
        skip=frozenset(x for x in args.skip.split(",") if x),
        seed=args.seed,
        command=command,
        progress=_progress,
        checkpoint=checkpoint,
    )


#: what an interrupted command leaves behind (every file is written atomically)
_WRITTEN_WHEN_INTERRUPTED = {
    "export": "nothing was written",
    "check": "files listed as updated above were rewritten, the rest left as they were",
    "bench": "the reports under --out (if given) hold the points measured so far",
}


#: what ``export``, ``check`` and ``bench`` import beyond the runtime (``pip install 'thunder-aot[export]'``)
EXPORTER_MODULES = {"thunder": "lightning-thunder", "jinja2": "jinja2", "black": "black"}


def missing_exporter_packages() -> list[str]:
    """The exporter's dependencies this environment lacks (a deployment may hold only the runtime)."""
    import importlib.util

    return [
        package for module, package in EXPORTER_MODULES.items() if importlib.util.find_spec(module) is None
    ]


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    missing = missing_exporter_packages()
    if missing:
        print(
            f"thunder-aot: error: {args.command} needs the exporter's dependencies "
            f"({', '.join(missing)} missing): pip install 'thunder-aot[export]'",
            file=sys.stderr,
        )
        return 2
    _INTERRUPTED.clear()
    in_main_thread = threading.current_thread() is threading.main_thread()
    previous = (signal.getsignal(signal.SIGINT) or signal.default_int_handler) if in_main_thread else None
    if in_main_thread:
        signal.signal(signal.SIGINT, _on_sigint)
    try:
        return {"export": cmd_export, "check": cmd_check, "bench": cmd_bench}[args.command](args)
    except (ExportError, KeyboardInterrupt) as e:
        if isinstance(e, ExportError) and not _INTERRUPTED.is_set():
            print(f"thunder-aot: error: {e}", file=sys.stderr)
            return 2
        # Ctrl-C, or an error that it caused
        print(f"thunder-aot: interrupted; {_WRITTEN_WHEN_INTERRUPTED[args.command]}", file=sys.stderr)
        return 130
    finally:
        if in_main_thread:
            signal.signal(signal.SIGINT, previous)


if __name__ == "__main__":
    sys.exit(main())
