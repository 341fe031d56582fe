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

from thunder_aot.arguments import parser, request_from
from thunder_aot.backends import resolve_auto
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


def cmd_export(args: argparse.Namespace) -> int:
    from thunder_aot.pipeline import export  # imports Thunder: only where export runs

    if args.out is not None:
        check_out_target(args.out, args.force)
    # stdout carries the module alone: what the source prints while it is traced and verified goes
    # to stderr
    with contextlib.redirect_stdout(sys.stderr):
        text = export(request_from(args), progress=_progress)
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
    return export(request_from(export_args), verify=False, progress=lambda m: None)


def cmd_bench(args: argparse.Namespace) -> int:
    from thunder_aot.bench import print_compare, write_reports  # torch: loaded for bench alone

    sizes = args.sizes
    if isinstance(sizes, dict) and (args.model or args.cold_start):
        raise ExportError("bench --model: --sizes takes token counts (1,16,128), not sizes per dim")
    if args.out:  # before any measurement: a folder bench cannot write loses nothing measured
        check_out_folder(args.out)
    command = shlex.join(["thunder-aot", "bench", *sys.argv[2:]]) if sys.argv[1:2] == ["bench"] else ""
    checkpoint = (lambda report: write_reports(report, Path(args.out))) if args.out else (lambda report: None)
    if args.cold_start:
        return _cold_start(args, sizes, command)
    if args.decode:
        from thunder_aot.bench.decode_bench import markdown, run_decode_bench  # torch, transformers

        if args.shapes or args.model or sizes:
            raise ExportError(
                "bench --decode: takes --batches, --prompts and --steps; drop --shapes/--model/--sizes"
            )
        report = run_decode_bench(
            args.source,
            [b for b in args.backends.split(",") if b and b != "auto"] or ["triton"],
            args.batches,
            args.prompts,
            args.steps,
            out=Path(args.out) if args.out else None,
            progress=_progress,
            command=command,
        )
        print(markdown(report))
        return 0
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
