"""Named suites of GPU tests and benchmarks for the project's GPU machine (lab tooling, not part of
thunder-aot; see tools/README.md and docs/contributing.md, "GPU tests and benchmarks").

    . .gpu/env.sh && python3 tools/gpu_suites.py SUITE [SUITE...] [--out DIR] [-- EXTRA...]
    python3 tools/gpu_suites.py --list

A suite is an entry of SUITES: a name, a one-line description, a time limit in seconds and its
steps (commands). The runner runs each named suite's steps one after another from the repository
root, each under the suite's time left (and its own limit where it has one), and tees their output
to DIR/SUITE/log.txt. A benchmark suite also writes a page, DIR/SUITE/<page>.md and its .json,
assembled from what its steps wrote (into a scratch folder, removed afterwards) after every step:
a call cut short keeps what finished. Log and page open with the commit, the device, the torch and
triton versions, the date and the command line. A suite that runs out of time is reported so and
the runner goes on to the next; it exits 1 if any step failed or timed out.

Every suite's limit fits one device call (10 minutes, . .gpu/env.sh included) except that of
`tests`, which is its three parts one after another. A suite that runs several modules, models or
sets names them items: after `--`, item names pick some (default: the suite's default items) and
the rest of EXTRA is appended to each of its main steps' commands (the last of a repeated option
wins: `-- --sizes 1,16`). Items the time limit left out are listed at the end of the log and page,
with the command that runs them.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: the device's limit per command, in seconds; a suite's limit leaves room for . .gpu/env.sh and the header
ONE_CALL = 600
#: a step is not started with less time than this left to its suite (one with its own limit: nor with
#: less than half of that): it is listed as not run, with the command that runs it
MIN_STEP = 10
#: each test file's limit: one call
TESTS_LIMIT = 520
#: the interpreter steps run with, written `python3` where that is the one on PATH
PY = (
    "python3"
    if shutil.which("python3")
    and os.path.realpath(shutil.which("python3")) == os.path.realpath(sys.executable)
    else sys.executable
)


@dataclass(frozen=True)
class Step:
    name: str
    argv: list[str]  # "{work}" in an argument stands for the suite's scratch folder
    limit: int | None = None  # seconds; the suite's time left caps it
    env: dict[str, str] = field(default_factory=dict)
    md: str | None = None  # a markdown file the step writes under {work}, copied into the page
    json: str | None = None  # a JSON file the step writes under {work}, copied into the page's .json
    quote_output: bool = False  # the step's output is its result: quoted in the page
    item: str | None = None  # the item this step runs (SUITE -- ITEM picks it)


@dataclass(frozen=True)
class Options:
    workers: int  # pytest-xdist workers for the test suites; 0: none


@dataclass(frozen=True)
class Suite:
    name: str
    description: str
    limit: int  # seconds, for all its steps together
    steps: Callable[[list[str], Options], list[Step]]  # (EXTRA after --, options) -> steps
    extra: str  # what EXTRA does, for --help and --list
    page: str | None = None  # the page's file name (without .md); None: the log only


# ---------------------------------------------------------------------------------------------- steps


def _pick(suite: str, items: dict, default: list[str], extra: list[str]) -> tuple[list[str], list[str]]:
    """Leading item names of EXTRA (commas allowed) -> (the items picked, or the default; the rest)."""
    picked, rest = [], list(extra)
    while rest and not rest[0].startswith("-"):
        for name in rest.pop(0).split(","):
            if name not in items:
                raise SystemExit(f"gpu_suites.py: {suite}: no item {name!r}; items: {', '.join(items)}")
            picked.append(name)
    return picked or default, rest


def _after_items(extra: list[str]) -> list[str]:
    """EXTRA without its leading item names: what goes to the steps' commands."""
    i = 0
    while i < len(extra) and not extra[i].startswith("-"):
        i += 1
    return extra[i:]


def _pytest(path: str):
    def steps(extra: list[str], options: Options) -> list[Step]:
        workers = ["-n", str(options.workers)] if options.workers else []
        argv = [PY, "-m", "pytest", "-q", "-m", "gpu", path, *workers, "--durations=15"]
        argv += ["-p", "no:cacheprovider", "-rs", *extra]
        return [Step(Path(path).stem, argv, TESTS_LIMIT)]

    return steps


def _all_tests(extra: list[str], options: Options) -> list[Step]:
    return [step for name in TEST_SUITES for step in SUITES[name].steps(extra, options)]


MEMCHECK = ["compute-sanitizer", "--tool", "memcheck", "--leak-check", "no", "--error-exitcode", "3"]


def _memcheck(extra: list[str], options: Options) -> list[Step]:
    if extra:  # one module (or a few) of tests/triton_memcheck.py, its generated module or --eager
        argv = [*MEMCHECK, PY, "tests/triton_memcheck.py", *extra]
        return [Step("triton_memcheck", argv, env={"PYTORCH_NO_CUDA_MEMORY_CACHING": "1"})]
    argv = [PY, "-m", "pytest", "-q", "-m", "gpu", "tests/test_gpu.py", "-k", "memcheck"]
    return [Step("memcheck", [*argv, "-p", "no:cacheprovider", "-rs", "--tb=short"])]


def _seed(extra: list[str], options: Options) -> list[Step]:
    argv = [PY, "tools/seed_table.py", "--rounds", "5", "--out", "{work}/seed", *extra]
    return [Step("seed_table", argv, md="seed.md", json="seed.json")]


def _overhead(extra: list[str], options: Options) -> list[Step]:
    argv = [PY, "tools/overhead.py", "--backends", "triton", "--rounds", "15", "--min-run-time", "0.05"]
    argv += ["--only", "guard only", "--out", "{work}/overhead.md", *extra]
    return [Step("overhead_triton", argv, md="overhead.md")]


def _bench(item: str, source: str, options: list[str], limit: int | None, extra: list[str]) -> Step:
    """One `thunder-aot bench` into {work}/ITEM, its bench.md and bench.json into the page."""
    argv = [PY, "-m", "thunder_aot", "bench", source, *options, "--out", f"{{work}}/{item}", *extra]
    return Step(item, argv, limit, md=f"{item}/bench.md", json=f"{item}/bench.json", item=item)


def module_stems() -> list[str]:
    """The modules of tools/modules.sh, in its order (its table is the one list of them)."""
    text = (ROOT / "tools" / "modules.sh").read_text()
    table = text.split("<<'LIST'\n", 1)[1].split("\nLIST", 1)[0]
    return [line.split("|", 1)[0] for line in table.splitlines() if line.strip()]


def _modules(extra: list[str], options: Options) -> list[Step]:
    stems = module_stems()
    picked, rest = _pick("modules", dict.fromkeys(stems), stems, extra)
    steps = []
    for stem in picked:  # each module alone: one cut short by the limit loses only itself
        argv = ["bash", "tools/modules.sh", "{work}", "2", stem, *rest]
        steps.append(Step(stem, argv, 150, md=f"{stem}/bench.md", json=f"{stem}/bench.json", item=stem))
    return steps


#: decoder layers exported whole: item -> (source, shapes, limit); the layer's rotary cos/sin are inputs
LLAMA_SHAPES = "1x[S=1..1024]x2048:bf16, 1x[S]x64:bf16, 1x[S]x64:bf16"
LAYERS = {
    "llama": ("thunder_aot.examples.hf:llama_1b_decoder_layer", LLAMA_SHAPES, 230),
    "qwen3": (
        "thunder_aot.examples.hf:qwen3_2b_decoder_layer",
        "1x[S=1..1024]x2048:bf16, 1x[S]x128:bf16, 1x[S]x128:bf16",
        230,
    ),
    # GPT-OSS's layer with its mask (causal, as the causal LM runs it)
    "gpt_oss": (
        "thunder_aot.examples.hf:gpt_oss_decoder_layer_mask",
        "1x[S=1..1024]x2880:bf16, 1x[S]x32:bf16, 1x[S]x32:bf16, 1x1x[S]x[S]:bf16",
        360,
    ),
    "llama_eager": ("thunder_aot.examples.hf:llama_1b_decoder_layer_eager_attention", LLAMA_SHAPES, 230),
}
LAYER_OPTIONS = ["--backends", "triton,nvfuser", "--sizes", "1,16,128,1024", "--rounds", "3"]
LAYER_OPTIONS += ["--min-run-time", "0.05", "--skip", "thunder.jit,thunderfx"]


def _layers(extra: list[str], options: Options) -> list[Step]:
    picked, rest = _pick("layers", LAYERS, ["llama", "qwen3"], extra)
    return [
        _bench(item, LAYERS[item][0], ["--shapes", LAYERS[item][1], *LAYER_OPTIONS], LAYERS[item][2], rest)
        for item in picked
    ]


#: causal LMs: item -> (source, limit)
MODELS = {
    "llama": ("thunder_aot.examples.hf:llama_1b_causal_lm", 260),
    "gpt_oss": ("thunder_aot.examples.hf:gpt_oss_causal_lm", 260),
}
MODEL_OPTIONS = ["--model", "--backends", "triton", "--sizes", "1,16", "--rounds", "2"]
MODEL_OPTIONS += ["--min-run-time", "0.05", "--skip", "torch.compile(layers)"]


def _models(extra: list[str], options: Options) -> list[Step]:
    picked, rest = _pick("models", MODELS, list(MODELS), extra)
    return [_bench(item, MODELS[item][0], MODEL_OPTIONS, MODELS[item][1], rest) for item in picked]


def _cold(extra: list[str], options: Options) -> list[Step]:
    argv = [PY, "-m", "thunder_aot", "bench", MODELS["llama"][0], "--model", "--cold-start"]
    argv += ["--backends", "triton", "--sizes", "16", "--out", "{work}/cold", *extra]
    return [
        Step("cold_start", argv, 460, md="cold/cold.md"),
        # where the part every system shares goes: imports, CUDA init, the model's build
        Step("build_time", [PY, "tools/build_time.py"], 40, quote_output=True),
    ]


def _decode(extra: list[str], options: Options) -> list[Step]:
    argv = [PY, "-m", "thunder_aot", "bench", MODELS["llama"][0], "--decode", "--backends", "triton"]
    argv += ["--batches", "1,8", "--prompts", "128", "--out", "{work}/decode", *extra]
    return [Step("decode", argv, md="decode/decode.md", json="decode/decode.json")]


def _decode_profile(extra: list[str], options: Options) -> list[Step]:
    argv = [PY, "tools/decode_profile.py", "--batches", "1,32", "--out", "{work}/profile", *extra]
    return [Step("decode_profile", argv, md="profile/profile.md", json="profile/profile.json")]


#: sound export's repeat run: the sets of tools/seed_verify.py
SOUND_SETS = ("sound", "generated", "hf")


def _sound(extra: list[str], options: Options) -> list[Step]:
    picked, rest = _pick("sound", dict.fromkeys(SOUND_SETS), ["sound"], extra)
    steps = []
    for group in picked:
        argv = [PY, "tools/seed_verify.py", "--device", "cuda", "--backends", "nvfuser,triton"]
        argv += ["--sets", group, "--out", f"{{work}}/{group}.md", *rest]
        steps.append(Step(group, argv, md=f"{group}.md", item=group))
    return steps


def _suites(*suites: Suite) -> dict[str, Suite]:
    return {s.name: s for s in suites}


PYTEST = "appended to pytest's arguments (e.g. -k triton -x)"
BENCH = "then options appended to thunder-aot bench"
TEST_SUITES = ("tests-kernels", "tests-models", "tests-graphs")
SUITES = _suites(
    Suite(
        "tests-kernels",
        "GPU tests of kernels and generated modules (tests/test_gpu.py)",
        TESTS_LIMIT,
        _pytest("tests/test_gpu.py"),
        PYTEST,
    ),
    Suite(
        "tests-models",
        "GPU tests of transformers' submodules, layers and models (tests/test_gpu_models.py)",
        TESTS_LIMIT,
        _pytest("tests/test_gpu_models.py"),
        PYTEST,
    ),
    Suite(
        "tests-graphs",
        "GPU tests of CUDA graphs and the KV-cache layers (tests/test_gpu_graphs.py)",
        TESTS_LIMIT,
        _pytest("tests/test_gpu_graphs.py"),
        PYTEST,
    ),
    Suite(
        "tests",
        "all GPU tests: tests-kernels, tests-models and tests-graphs in turn",
        3 * TESTS_LIMIT,
        _all_tests,
        PYTEST,
    ),
    Suite(
        "memcheck",
        "Triton kernels under compute-sanitizer's memcheck (its GPU test)",
        300,
        _memcheck,
        "STEM [STEM...] [--eager]: instead of the test, tests/triton_memcheck.py on those modules alone "
        "under memcheck (their generated modules, or with --eager the source modules)",
    ),
    Suite(
        "seed",
        "the seed issue's RMSNorm table (tools/seed_table.py)",
        400,
        _seed,
        "appended to tools/seed_table.py's arguments (e.g. --sizes 1,16,2048 --rounds 9)",
        "seed",
    ),
    Suite(
        "overhead",
        "the seed RMSNorm's Triton module against the floor (tools/overhead.py)",
        360,
        _overhead,
        "appended to tools/overhead.py's arguments (e.g. --only 'guard only,generated forward()')",
        "overhead",
    ),
    Suite(
        "modules",
        "the bundled modules with Triton kernels benched, nvFuser and Triton (tools/modules.sh)",
        520,
        _modules,
        f"module stems (default: all of tools/modules.sh, as many as fit), {BENCH}",
        "modules",
    ),
    Suite(
        "layers",
        "transformers decoder layers exported whole and benched (Triton, nvFuser, torch.compile)",
        520,
        _layers,
        f"items {', '.join(LAYERS)} (default: llama qwen3; gpt_oss alone fills a call), {BENCH}",
        "layers",
    ),
    Suite(
        "models",
        "causal LM forwards, Llama-1B- and GPT-OSS-shaped (thunder-aot bench --model)",
        520,
        _models,
        f"items {', '.join(MODELS)} (default: both), {BENCH} (e.g. --sizes 128,1024)",
        "models",
    ),
    Suite(
        "decode",
        "greedy decode of the Llama-1B-shaped causal LM: StaticDecoder against generate and a "
        "gpt-fast-style compiled loop (thunder-aot bench --decode)",
        520,
        _decode,
        f"{BENCH} (e.g. --batches 1,8,32 --prompts 128,1024 --backends triton,nvfuser)",
        "decode",
    ),
    Suite(
        "decode-profile",
        "where a graphed decode step's time goes: its kernels by kind and name, and the step's "
        "matmuls alone against the copy bandwidth (tools/decode_profile.py)",
        520,
        _decode_profile,
        "tools/decode_profile.py's options (e.g. --batches 1,8 --backend model)",
        "decode-profile",
    ),
    Suite(
        "sound",
        "sound export's repeat run: each module of a set verified under 20 seeds, nvFuser and Triton "
        "(tools/seed_verify.py)",
        520,
        _sound,
        f"sets {', '.join(SOUND_SETS)} (default: sound; generated and hf may need a call per backend), "
        "then options appended to tools/seed_verify.py (e.g. --modules sequence_statistics --backends "
        "nvfuser)",
        "sound",
    ),
    Suite(
        "cold",
        "the Llama-1B-shaped causal LM's cold start (bench --cold-start) and the build time every "
        "system shares (tools/build_time.py)",
        520,
        _cold,
        "appended to the cold-start bench's arguments (e.g. --sizes 1)",
        "cold-start",
    ),
)


# --------------------------------------------------------------------------------------------- header


def commit() -> str:
    """The commit measured: $THUNDER_AOT_COMMIT where the caller names it (a copy of the tree whose
    .git is not the tree's, as on the GPU machine, would name a stale HEAD); else HEAD, +dirty with
    changes to tracked files."""
    if os.environ.get("THUNDER_AOT_COMMIT"):
        return os.environ["THUNDER_AOT_COMMIT"]
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True, timeout=30
        )
        if head.returncode == 0:
            status = subprocess.run(
                ["git", "--no-optional-locks", "status", "--porcelain"],
                cwd=ROOT,
                capture_output=True,
                text=True,
                timeout=60,
            )
            dirty = any(line and not line.startswith("??") for line in status.stdout.splitlines())
            return head.stdout.strip() + ("+dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        pass
    return "unknown (no git here and THUNDER_AOT_COMMIT unset)"


PROBE = """
import json, platform
d = {"python": platform.python_version()}
try:
    import torch
    d["torch"] = torch.__version__
    d["device"] = torch.cuda.get_device_name() if torch.cuda.is_available() else "no GPU"
except Exception as e:
    d["torch"], d["device"] = f"not importable ({type(e).__name__})", "no GPU"
try:
    import triton
    d["triton"] = triton.__version__
except Exception as e:
    d["triton"] = f"not importable ({type(e).__name__})"
print(json.dumps(d))
"""


def header(argv: list[str]) -> dict[str, str]:
    try:
        probe = subprocess.run([PY, "-c", PROBE], cwd=ROOT, capture_output=True, text=True, timeout=180)
        env = json.loads(probe.stdout.strip().splitlines()[-1])
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        env = {"device": "unknown (the probe failed)", "torch": "unknown", "triton": "unknown"}
    return {
        "commit": commit(),
        "device": env["device"],
        "versions": f"torch {env['torch']}, triton {env['triton']}, Python {env.get('python', '?')}",
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC"),
        "command": shlex.join(["python3", "tools/gpu_suites.py", *argv]),
    }


# -------------------------------------------------------------------------------------------- running


@dataclass
class Result:
    step: Step
    command: str
    status: str = "not run: too little of the suite's time left"  # or ok, failed (exit N), timed out
    rc: int | None = None
    seconds: float = 0.0
    output: list[str] = field(default_factory=list)


class Log:
    """Lines to stdout and DIR/SUITE/log.txt, from the runner and a step's reader thread."""

    def __init__(self, path: Path):
        self.file = path.open("w", encoding="utf-8")
        self.lock = threading.Lock()

    def write(self, text: str) -> None:
        with self.lock:
            sys.stdout.write(text)
            sys.stdout.flush()
            self.file.write(text)
            self.file.flush()

    def close(self) -> None:
        self.file.close()


def shown(step: Step, work: str = "{work}") -> str:
    """The step's command line as a shell would take it, its environment variables first."""
    argv = [a.replace("{work}", work) for a in step.argv]
    return shlex.join([*(f"{k}={v}" for k, v in step.env.items()), *argv])


def run_step(step: Step, work: str, timeout: float, log: Log) -> Result:
    argv = [a.replace("{work}", work) for a in step.argv]
    result = Result(step, shown(step, work))
    log.write(f"\n=== {step.name} (limit {timeout:.0f} s)\n$ {result.command}\n")
    env = {**os.environ, "PYTHONUNBUFFERED": "1", **step.env}
    start = time.monotonic()
    try:
        proc = subprocess.Popen(
            argv,
            cwd=ROOT,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: a timeout ends its children too
        )
    except OSError as e:
        result.status, result.rc = f"failed: {e}", 127
        log.write(f"=== {step.name}: {result.status}\n")
        return result

    def tee() -> None:
        for raw in proc.stdout:
            line = raw.decode("utf-8", errors="replace")
            log.write(line)
            if step.quote_output:
                result.output.append(line)

    reader = threading.Thread(target=tee, daemon=True)
    reader.start()
    timed_out = False
    try:
        result.rc = proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        for sig, grace in ((signal.SIGTERM, 15), (signal.SIGKILL, 30)):
            try:
                os.killpg(proc.pid, sig)
                result.rc = proc.wait(timeout=grace)
                break
            except ProcessLookupError:
                result.rc = proc.wait()
                break
            except subprocess.TimeoutExpired:
                continue
    reader.join(timeout=30)
    result.seconds = time.monotonic() - start
    if timed_out:
        result.status = f"timed out after {timeout:.0f} s"
    else:
        result.status = "ok" if result.rc == 0 else f"failed (exit {result.rc})"
    log.write(f"=== {step.name}: {result.status} ({result.seconds:.0f} s)\n")
    return result


def _demoted(markdown: str, levels: int = 2) -> str:
    """A step's page under the step's own heading: its headings two levels down (not in code)."""
    out, fenced = [], False
    for line in markdown.splitlines():
        if line.startswith("```"):
            fenced = not fenced
        out.append("#" * levels + line if line.startswith("#") and not fenced else line)
    return "\n".join(out)


def write_page(suite: Suite, folder: Path, head: dict, results: list[Result], work: str, note: str) -> None:
    lines = [f"# {suite.description}", ""] + [f"- {key}: {value}" for key, value in head.items()]
    data: dict = {"suite": suite.name, "description": suite.description, **head, "steps": []}
    for r in results:
        lines += ["", f"## {r.step.name}: {r.status} ({r.seconds:.0f} s)", "", f"    {r.command}", ""]
        entry = {"name": r.step.name, "item": r.step.item, "command": r.command, "status": r.status}
        entry |= {"exit": r.rc, "seconds": round(r.seconds, 1), "result": None}
        if r.step.md and (Path(work) / r.step.md).is_file():
            lines.append(_demoted((Path(work) / r.step.md).read_text(errors="replace")))
        if r.step.json and (Path(work) / r.step.json).is_file():
            try:
                entry["result"] = json.loads((Path(work) / r.step.json).read_text())
            except ValueError:
                pass
        if r.step.quote_output and r.output:
            lines += ["```", *(line.rstrip("\n") for line in r.output[-40:]), "```"]
        data["steps"].append(entry)
    if note:
        lines += ["", note]
        data["note"] = note
    (folder / f"{suite.page}.md").write_text("\n".join(lines).rstrip() + "\n")
    (folder / f"{suite.page}.json").write_text(json.dumps(data, indent=1) + "\n")


def run_suite(suite: Suite, extra: list[str], options: Options, out: Path, head: dict) -> str:
    """Runs one suite; returns its status: ok, failed, timed out."""
    folder = out / suite.name
    folder.mkdir(parents=True, exist_ok=True)
    log = Log(folder / "log.txt")
    log.write(f"# {suite.name}: {suite.description}\n")
    log.write("".join(f"# {key}: {value}\n" for key, value in head.items()))
    log.write(f"# time limit: {suite.limit} s\n")
    if not options.workers and suite.name.startswith("tests"):
        log.write("# pytest-xdist: not used (--workers 0, or `import xdist` failed)\n")
    steps = suite.steps(extra, options)
    results = [Result(s, shown(s)) for s in steps]
    work = tempfile.mkdtemp(prefix=f"gpu-suite-{suite.name}-")
    deadline = time.monotonic() + suite.limit
    note = ""
    try:
        for i, step in enumerate(steps):
            left = deadline - time.monotonic()
            if left >= max(MIN_STEP, (step.limit or 0) / 2):
                results[i] = run_step(step, work, min(step.limit or left, left), log)
            if suite.page:
                write_page(suite, folder, head, results[: i + 1], work, note)
        left_out = [r.step for r in results if r.status.startswith("not run")]
        if left_out:
            items = [s.item for s in left_out if s.item]
            note = f"Not run (too little of the suite's {suite.limit} s left): "
            note += ", ".join(s.name for s in left_out) + "."
            if items and len(items) == len(left_out):
                again = ["python3", "tools/gpu_suites.py", suite.name, "--", *items, *_after_items(extra)]
                note += f" Run them with: `{shlex.join(again)}`"
        if suite.page:
            write_page(suite, folder, head, results, work, note)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if any(r.status.startswith("timed out") for r in results) or note:
        status = "timed out"
    elif any(r.status != "ok" for r in results):
        status = "failed"
    else:
        status = "ok"
    log.write(f"\n# {suite.name}: {status}\n")
    log.write("".join(f"#   {r.step.name}: {r.status} ({r.seconds:.0f} s)\n" for r in results))
    if note:
        log.write(f"# {note}\n")
    log.close()
    return status


# ----------------------------------------------------------------------------------------------- main


def listing() -> str:
    lines = []
    for s in SUITES.values():
        calls = f" ({-(-s.limit // TESTS_LIMIT)} device calls)" if s.limit + 60 > ONE_CALL else ""
        page = f" -> {s.name}/{s.page}.md" if s.page else ""
        lines += [f"{s.name:<14}{s.limit:>5} s  {s.description}{page}{calls}", f"{'':<21}-- {s.extra}"]
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    names, extra = (argv[: argv.index("--")], argv[argv.index("--") + 1 :]) if "--" in argv else (argv, [])
    xdist = importlib.util.find_spec("xdist") is not None
    ap = argparse.ArgumentParser(
        prog="gpu_suites.py",
        usage="%(prog)s SUITE [SUITE...] [--out DIR] [--workers N] [--dry-run] [-- EXTRA...] | --list",
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="suites (name, time limit, description; then what EXTRA after -- does, for every suite "
        "named):\n" + listing(),
    )
    ap.add_argument("suites", nargs="*", metavar="SUITE", help="suites to run, in this order")
    ap.add_argument(
        "--out",
        default=os.environ.get("OUT") or "gpu-out",
        help="output folder: DIR/SUITE/log.txt and the page (default: $OUT, else ./gpu-out)",
    )
    ap.add_argument("--list", action="store_true", help="print the suites, their limits and descriptions")
    ap.add_argument(
        "--dry-run", action="store_true", help="print each suite's steps (commands and limits); run nothing"
    )
    ap.add_argument(
        "--workers",
        type=int,
        default=4 if xdist else 0,
        help="pytest-xdist workers of the test suites (default: 4, or 0 where `import xdist` fails)",
    )
    args = ap.parse_args(names)
    if args.list:
        print(listing())
        return 0
    if not args.suites:
        ap.error("name one suite or more (--list shows them)")
    unknown = [n for n in args.suites if n not in SUITES]
    if unknown:
        ap.error(f"no suite {', '.join(unknown)}; suites: {', '.join(SUITES)}")
    options = Options(workers=args.workers if xdist else 0)
    suites = [SUITES[n] for n in args.suites]
    for suite in suites:
        suite.steps(extra, options)  # item names are checked before anything runs
    if args.dry_run:
        for suite in suites:
            print(f"{suite.name} (limit {suite.limit} s)")
            for step in suite.steps(extra, options):
                limit = f"limit {step.limit} s" if step.limit else "the suite's limit"
                print(f"  {step.name} ({limit}): {shown(step)}")
        return 0
    total = sum(s.limit for s in suites)
    if total + 60 > ONE_CALL:
        print(f"note: these suites may take {total} s, more than one device call ({ONE_CALL} s) holds")
    out = Path(args.out)
    head = header(argv)
    statuses = {s.name: run_suite(s, extra, options, out, head) for s in suites}
    print()
    for name, status in statuses.items():
        page = f", page {out / name / SUITES[name].page}.md" if SUITES[name].page else ""
        print(f"{name}: {status} (log {out / name / 'log.txt'}{page})")
    return 0 if all(status == "ok" for status in statuses.values()) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
