"""Triton backend on CPU, through Triton's interpreter (in a fresh process: tests/
triton_interpreted_check.py): every generated kernel computes what the source module computes
and writes every output element; and the kernels' structure."""

from __future__ import annotations

import ast
import re
import subprocess
import sys

import pytest

from tests.examples import EXPORTS
from tests.helpers import ROOT, interpreted_check, python_env, run_cli
from tests.view_modules import KERNELS as VIEW_KERNELS
from tests.view_modules import SOURCE_CALLS as VIEW_SOURCE_CALLS
from thunder_aot.verify import load_module_from_text

IDS = [e[0] for e in EXPORTS]
#: how many Triton kernels each module holds (regions whose kernel another bucket already has share it;
#: the rest run as torch ops): rmsnorm's four buckets share one
KERNELS = {
    "rmsnorm": 1,
    "gated_mlp": 1,
    "residual_rmsnorm": 1,
    "layer_norm": 1,
    "softmax": 2,
    "gelu_gate": 1,
    "rotary": 1,
    "vocab_softmax": 1,
    "wide_rmsnorm": 1,
}
#: modules whose rows are wider than MAX_BLOCK: their kernels walk the row in chunks
LOOPED = {"vocab_softmax", "wide_rmsnorm"}
#: modules whose rows are narrow enough for several to a program (TILE_LANES // BLOCK of them)
TILED = {"gated_mlp", "rotary", "softmax"}


@pytest.mark.traces
@pytest.mark.parametrize("stem", IDS)
def test_interpreted_kernels_match_source_and_write_every_element(stem):
    result = interpreted_check(stem)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.startswith(f"ok {stem}:")


def sizes_of(text: str) -> set[str]:
    """Run-time size arguments of the module's kernels (those without ``_ptr``)."""
    return {
        a.arg
        for n in ast.parse(text).body
        if isinstance(n, ast.FunctionDef) and n.name.endswith("_kernel")
        for a in n.args.args
        if a.annotation is None and not a.arg.endswith("_ptr")
    }


@pytest.mark.parametrize("stem", IDS)
def test_kernel_structure(stem):
    import torch

    from thunder_aot.runtime.triton import TRACING

    text = (ROOT / "generated" / f"{stem}_triton.py").read_text()
    tree = ast.parse(text)
    kernels = [
        n
        for n in tree.body
        if isinstance(n, ast.FunctionDef)
        and any(getattr(getattr(d, "func", d), "attr", None) == "jit" for d in n.decorator_list)
    ]
    assert len(kernels) == KERNELS[stem]
    tiled = 0
    for k in kernels:
        body = ast.unparse(k)
        rows = (
            int(m[1])
            if (m := re.search(r"# persistent: (\d+) rows of", text.split(f"def {k.name}(")[1]))
            else 1
        )
        if rows == 1:  # one row per program: [BLOCK] vectors
            assert "row = tl.program_id(0).to(tl.int64)\n" in body and "mask = cols < N" in body
            assert "keep_dims" not in body and "_rows" not in body
        else:
            # a [rows, BLOCK] tile: rows past the last one and lanes past N masked; per-row values [rows, 1]
            tiled += 1
            assert f"row = tl.program_id(0).to(tl.int64) * {rows} + tl.arange(0, {rows})[:, None]" in body
            assert (
                "in_rows = row < _rows" in body
                and "lanes = cols < N" in body
                and "mask = in_rows & lanes" in body
            )
            assert "cols = tl.arange(0, BLOCK)[None, :]" in body and "axis=0" not in body
            for line in body.splitlines():  # every load and store is masked; per-row ones by in_rows
                if "tl.load(" in line or "tl.store(" in line:
                    assert re.search(r"mask=(mask|lanes|in_rows)\b", line), line
                    if re.search(r"_ptr \+ row\)", line):
                        assert "mask=in_rows" in line, line
            assert (
                f"(_rows + {rows - 1}) // {rows}" in text and "_rows = " in text
            )  # the grid: programs of `rows` rows
        # run-time sizes are never specialised on: one compiled kernel serves every value (the
        # launcher's cache is keyed by device and alignment only). A run-time row width is passed
        # as N_units with the constant N_UNIT (one compiled kernel per unit, the key adds it), and
        # the kernel's first statement makes N of them
        sizes = [a.arg for a in k.args.args if a.annotation is None and not a.arg.endswith("_ptr")]
        calls = [d for d in k.decorator_list if isinstance(d, ast.Call)]
        unspecialised = ast.literal_eval(calls[0].keywords[0].value) if calls else []
        assert sizes == unspecialised and "N" not in sizes, (sizes, unspecialised)
        holder = next(
            n.value
            for n in tree.body
            if isinstance(n, ast.Assign) and ast.unparse(n.value).startswith(f"Kernel({k.name},")
        )
        constants = [a.arg for a in k.args.args if a.annotation is not None]
        if "N_units" in sizes:
            assert "width_units=True" in ast.unparse(holder) and constants == ["BLOCK", "N_UNIT"], constants
            assert ast.unparse(k.body[0]) == "N = N_units * N_UNIT", ast.unparse(k.body[0])
        else:
            assert "width_units" not in ast.unparse(holder) and constants == ["N", "BLOCK"], constants
        loops = [n for n in ast.walk(k) if isinstance(n, ast.For)]
        if stem in LOOPED:  # one pass per reduction, then one that stores
            reductions = body.count("tl.sum(") + body.count("nan_max(") + body.count("nan_min(")
            assert len(loops) == reductions + 1 and "cols = start + tl.arange(0, BLOCK)" in body
        else:
            assert not loops
        assert "tl.store(" in body and "tl.load(" in body
        for reduction in ("tl.sum(", "nan_max(", "nan_min("):  # padded lanes never reach a reduction
            for call in body.split(reduction)[1:]:
                # persistent: the reduction masks; looped: each chunk is masked into the accumulator
                assert call.startswith("tl.where(mask,") or (
                    stem in LOOPED and call.split(",")[0].endswith("_acc")
                ), stem
        for accumulate in re.findall(r"(\w+_acc) = (.*)", body):  # looped: every update masks its chunk
            assert accumulate[1].startswith("tl.full(") or "tl.where(mask," in accumulate[1], accumulate
    assert (tiled > 0) == (stem in TILED), tiled
    # CUDA: the compiled kernel's launcher (its C launch function, or CompiledKernel.run where the
    # kernel needs scratch memory: thunder_aot.runtime.triton.Kernel), no JIT binding; tensors reach
    # it as data_ptr() ints. forward launches directly where the kernel is compiled for _device and
    # the inputs' alignment, else through Kernel.launch (which compiles, and serves the interpreter,
    # tracing and other devices)
    holders = {
        n.targets[0].id: n.value
        for n in tree.body
        if isinstance(n, ast.Assign)
        and isinstance(n.value, ast.Call)
        and getattr(n.value.func, "id", "") == "Kernel"
    }
    assert sorted(f"{name}_kernel" for name in holders) == sorted(k.name for k in kernels)
    blocks = {
        name: next(kw.value.value for kw in call.keywords if kw.arg == "block")
        for name, call in holders.items()
    }
    forward = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "forward")
    forward_text = ast.unparse(forward)
    branches = [
        n for n in ast.walk(forward) if isinstance(n, ast.If) and ast.unparse(n.test) == "_kernel is not None"
    ]
    launches = [
        n for n in ast.walk(forward) if isinstance(n, ast.Call) and getattr(n.func, "attr", "") == "launch"
    ]
    assert len(branches) == len(launches) == forward_text.count("_kernel = ")
    body = [n for n in ast.walk(forward) if isinstance(n, (ast.If, ast.FunctionDef))]
    for branch in branches:
        (direct,), (general,) = branch.body, branch.orelse
        launch, direct = general.value, direct.value
        name = launch.func.value.id
        assert launch in launches and ast.unparse(direct.func) == "_kernel[1]" and name in holders
        programs, args, raw, misaligned, n = [ast.unparse(a) for a in launch.args]
        assert misaligned == "_misaligned"
        # the statements before the branch, in the same block: this region's allocations, each
        # input's pointer read once (``_<input>_ptr``), _misaligned (the inputs' pointers only), a
        # run-time row width's unit (runtime.triton.width_unit, written out), the compiled kernel
        block_of = next(b for b in body for field in ("body", "orelse") if branch in getattr(b, field, []))
        stmts = block_of.body if branch in block_of.body else block_of.orelse
        at = stmts.index(branch)
        units = "width_units=True" in ast.unparse(holders[name])
        kernel_stmt = ast.unparse(stmts[at - 1])
        if units:
            assert ast.unparse(stmts[at - 2]) == f"_unit = ({n} | 16) & -({n} | 16)", ast.unparse(
                stmts[at - 2]
            )
        misaligned_stmt = ast.unparse(stmts[at - 2 - units])
        pointers, before = [], at - 3 - units
        while before >= 0 and re.fullmatch(r"_\w+_ptr = \w+\.data_ptr\(\)", ast.unparse(stmts[before])):
            pointers.insert(0, ast.unparse(stmts[before]))
            before -= 1
        outputs = set()
        while (
            before >= 0
            and isinstance(stmts[before], ast.Assign)
            and isinstance(stmts[before].value, ast.IfExp)
        ):
            outputs.add(ast.unparse(stmts[before].targets[0]))
            before -= 1
        assert outputs
        tensors = [ast.unparse(e) for e in launch.args[1].elts if ast.unparse(e) not in sizes_of(text)]
        inputs = list(dict.fromkeys(t for t in tensors if t not in outputs))
        assert pointers == [f"_{t}_ptr = {t}.data_ptr()" for t in inputs], pointers
        # the launch's raw arguments: each tensor as its data_ptr() (an input's read once), then sizes
        raw_args = [
            a if a in sizes_of(text) else f"_{a}_ptr" if a in inputs else f"{a}.data_ptr()"
            for a in map(ast.unparse, launch.args[1].elts)
        ]
        assert raw == f"({', '.join(raw_args)}{',' if len(raw_args) == 1 else ''})", raw
        tail = f"{n} // _unit, {blocks[name]}, _unit" if units else f"{n}, {blocks[name]}"
        assert ast.unparse(direct) == (
            f"_kernel[1]({programs}, 1, 1, raw_stream(_device), *_kernel[2], {', '.join(raw_args)}, {tail})"
        )
        # an input off a 16-byte boundary gets its own kernel: every input's pointer is tested, no output's
        # (skipped under torch.compile's tracing, where _device is runtime.triton.TRACING)
        tested = (
            f"_misaligned = _device != {TRACING} and ({' | '.join(f'_{t}_ptr' for t in inputs)}) & 15 != 0"
        )
        assert misaligned_stmt == ast.unparse(ast.parse(tested)), misaligned_stmt
        key = "(_device + _device + _misaligned) * 32 + _unit" if units else "_device + _device + _misaligned"
        assert kernel_stmt == f"_kernel = {name}.binaries.get({key})", kernel_stmt
    # _device: once per call, from the guard's entry on the fast path, from eager_device otherwise
    if kernels:
        assert forward_text.count("_device = eager_device(") == 1 and "_device = fast[3]" in forward_text
    # outputs are allocated only through what tests.helpers.poisoned_outputs poisons: on the direct
    # path empty_strided_cuda with the contiguous strides of its sizes, otherwise torch.empty
    allocators = set(re.findall(r"torch\.(empty\w*|zeros\w*|ones\w*|full\w*|new_\w+)\(", text))
    assert allocators <= {"empty", "empty_like"}, allocators
    # (the guard table's entry is no allocation, nor a merged projection's matmul, member by member
    # while dynamo traces)
    allocations = [
        n.value
        for n in ast.walk(forward)
        if isinstance(n, ast.Assign)
        and isinstance(n.value, ast.IfExp)
        and ast.unparse(n.targets[0]) != "fast"
        and ast.unparse(n.value.test) != "dynamo_compiling()"
    ]
    assert len(allocations) == forward_text.count("empty_strided_cuda(") >= len(launches)
    # names bound per shape (codegen.per_shape): each program's branch unpacks its _sizes_of_<k>,
    # here evaluated with every dim 3 (any values will do)
    functions = {
        n.name: n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name.startswith("_sizes_of_")
    }
    env_of = {}  # an allocation -> the names its program's branch has bound
    for branch in (
        n for n in forward.body if isinstance(n, ast.If) and ast.unparse(n.test).startswith("program == ")
    ):
        index, env = ast.unparse(branch.test).split()[-1], {}
        unpack = next(
            (s for s in branch.body if isinstance(s, ast.Assign) and ast.unparse(s.value) == "sizes"), None
        )
        if f"_sizes_of_{index}" in functions:
            function, namespace = functions[f"_sizes_of_{index}"], {}
            exec(ast.unparse(function), {}, namespace)
            values = namespace[function.name](*[3] * len(function.args.args))
            env = dict(zip([ast.unparse(e) for e in unpack.targets[0].elts], values))
        for node in ast.walk(branch):
            env_of[id(node)] = env
    for a in allocations:
        assert ast.unparse(a.test) == "_device >= 0" and ast.unparse(a.body.func) == "empty_strided_cuda"
        sizes, strides, dtype = a.body.args
        assert ast.unparse(a.orelse.func) == "torch.empty" and ast.unparse(a.orelse.args[0]) == ast.unparse(
            sizes
        )
        assert ast.unparse(a.orelse.keywords[0].value) == ast.unparse(dtype)
        names = {n.id: 3 for n in ast.walk(sizes) if isinstance(n, ast.Name)} | env_of[id(a)]
        names |= {n.id: 3 for n in ast.walk(strides) if isinstance(n, ast.Name) and n.id not in names}
        got = eval(ast.unparse(strides), {}, names)
        assert list(got) == list(torch.empty(eval(ast.unparse(sizes), {}, names)).stride()), ast.unparse(a)


def test_output_strides_are_the_contiguous_strides_of_the_sizes_text():
    import torch

    from thunder_aot.backends.triton.launch import contiguous_strides as _contiguous_strides

    assert _contiguous_strides(["1", "15", "2880"]) == ["43200", "2880", "1"]
    assert _contiguous_strides(["1", "s0", "2880"]) == ["2880 * s0", "2880", "1"]
    assert _contiguous_strides(["1", "8", "S", "S"]) == ["S * S * 8", "S * S", "S", "1"]
    assert _contiguous_strides(["s0", "1"]) == ["1", "1"]
    assert _contiguous_strides(["7"]) == ["1"]
    for sizes in ([1, 15, 2880], [3, 5, 7, 1], [2, 1, 4]):  # against torch, with the names bound
        text = _contiguous_strides(["a", "b", *map(str, sizes[2:])])
        env = {"a": sizes[0], "b": sizes[1]}
        assert [eval(t, {}, env) for t in text] == list(torch.empty(sizes).stride())


def test_schedule_is_persistent_while_a_row_fits_narrow_rows_several_to_a_program_then_looped():
    from thunder_aot.backends.triton.schedule import LOOP_BLOCK, MAX_BLOCK, TILE_LANES, Schedule, schedule

    assert TILE_LANES == 1024
    assert schedule(2880) == Schedule(
        4096, 4, looped=False, rows=1
    )  # the seed's RMSNorm: one row per program
    assert schedule(256) == Schedule(256, 1, looped=False, rows=4)  # 4 rows of 256: a 1024-lane tile
    assert schedule(1024) == Schedule(1024, 1, looped=False, rows=1)
    assert schedule(64, max_rows=1024) == Schedule(64, 1, looped=False, rows=16)
    assert schedule(64, max_rows=8) == Schedule(
        64, 1, looped=False, rows=8
    )  # never more rows than the bucket has
    assert schedule(64, max_rows=5) == Schedule(64, 1, looped=False, rows=8)  # (rounded up to a power of two)
    assert schedule(1, max_rows=1) == Schedule(1, 1, looped=False, rows=1)
    assert schedule(MAX_BLOCK) == Schedule(MAX_BLOCK, 8, looped=False, rows=1)
    assert schedule(MAX_BLOCK + 1) == Schedule(LOOP_BLOCK, 16, looped=True, rows=1)
    assert schedule(32000).looped and schedule(32000).block == LOOP_BLOCK


def test_interpreter_patched_to_round_bf16_as_the_gpu_does():
    """Triton's interpreter truncates float32 -> bfloat16; the CPU checks patch it to round to
    nearest even (as the GPU does), or kernels with many 16-bit intermediates drift on CPU only."""
    code = """
import torch, triton, triton.language as tl
from thunder_aot.backends.triton import interpreter_rounds_like_the_gpu

@triton.jit
def to_bf16_and_back(x_ptr, y_ptr, N: tl.constexpr):
    c = tl.arange(0, N)
    tl.store(y_ptr + c, tl.load(x_ptr + c).to(tl.bfloat16).to(tl.float32))

x = torch.tensor([1 + 2**-8 + 2**-12, -(1 + 2**-8 + 2**-12), 1 + 2**-9, 2 - 2**-12], dtype=torch.float32)
for patched in (False, True):
    if patched:
        interpreter_rounds_like_the_gpu()
    y = torch.empty_like(x)
    to_bf16_and_back[(1,)](x, y, N=4)
    print(patched, torch.equal(y, x.bfloat16().float()))
"""
    env = python_env(TRITON_INTERPRET="1")
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.split() == ["False", "False", "True", "True"]


def test_bfloat16_bits_are_torchs_rounding():
    """The interpreter's float32 -> bfloat16 rounding (numpy) gives torch's bits: random patterns,
    ties, denormals, the largest finite values, infinities and NaNs of both signs."""
    import numpy as np
    import torch

    from thunder_aot.backends.triton.interpreter import bfloat16_bits

    patterns = np.random.default_rng(0).integers(0, 2**32, size=200_000, dtype=np.uint64).astype(np.uint32)
    special = [0, 2**31, 0x7F800000, 0xFF800000, 0x7FC00000, 0x7F800001, 0xFF800001, 0x7F7FFFFF, 1, 0x8000]
    special += [0x18000, 0x3F808000, 0x3F818000, 0x7F7F8000, 0xFFFFFFFF, 0x3F80FFFF]
    values = np.concatenate([patterns, np.array(special, dtype=np.uint32)]).view(np.float32)
    expected = torch.from_numpy(values.copy()).to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
    assert np.array_equal(bfloat16_bits(values), expected)


def test_interpreter_patches_the_language_once_per_launch():
    """A kernel calling Triton's library helpers (tl.sum, tl.max) in every program: the language is
    patched for the launch and once for the library's module, not at every helper call, and the
    kernel computes what it did."""
    code = """
import torch, triton, triton.language as tl
from triton.runtime import interpreter
from thunder_aot.backends.triton import interpreter_rounds_like_the_gpu

@triton.jit
def row_stats(x_ptr, y_ptr, N: tl.constexpr):
    row = tl.program_id(0)
    v = tl.load(x_ptr + row * N + tl.arange(0, N))
    tl.store(y_ptr + row, tl.sum(v, axis=0) + tl.max(v, axis=0))

x = torch.randn(16, 32)
expected = x.sum(1) + x.amax(1)
for once in (False, True):
    if once:
        interpreter_rounds_like_the_gpu()
    patched = []
    original = interpreter._patch_builtin
    interpreter._patch_builtin = lambda *a: patched.append(1) or original(*a)
    y = torch.empty(16)
    row_stats[(16,)](x, y, N=32)
    interpreter._patch_builtin = original
    print(len(patched), torch.allclose(y, expected))
"""
    env = python_env(TRITON_INTERPRET="1")
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-3000:]
    (before, same_before), (after, same_after) = (line.split() for line in result.stdout.splitlines())
    assert same_before == same_after == "True"
    assert int(before) > 16 * 2 * 3 and int(after) <= 2 * 5, (before, after)


def test_parameters_a_kernel_reads_are_checked_on_every_call():
    """A module converted after export (dtype, shape, layout of a parameter) is refused with one
    line before any kernel runs; the same module with its exported parameter works (interpreter)."""
    code = """
import sys, torch
sys.path.insert(0, '.')
from thunder_aot.verify import load_module_from_text
from thunder_aot.examples.gpt_oss import rmsnorm
g = load_module_from_text(open('generated/rmsnorm_triton.py').read(), 'state_check')
source = rmsnorm()
aot = g.GptOssRMSNorm.from_module(source)
x = torch.randn(1, 5, 2880, dtype=torch.bfloat16)
with torch.no_grad():
    torch.testing.assert_close(aot(x), source(x), rtol=1.6e-2, atol=1e-2)
    for what, weight in [("half", source.weight.half()), ("short", source.weight[:2000]),
                         ("strided", torch.randn(5760)[::2])]:
        aot._parameters["weight"] = torch.nn.Parameter(weight, requires_grad=False)
        try:
            aot(x)
            print(what, "ACCEPTED")
        except ValueError as e:
            print(what, "|", e)
"""
    env = python_env(TRITON_INTERPRET="1")
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stdout.strip().splitlines()
    assert [line.split(" |")[0] for line in lines] == ["half", "short", "strided"], lines
    for line in lines:
        assert (
            "weight must be a contiguous float32 tensor of shape 2880 on hidden_states's device" in line
        ), line
    assert (
        "got a float16 tensor of shape 2880" in lines[0]
        and "shape 2000" in lines[1]
        and "contiguous=False" in lines[2]
    )


@pytest.mark.parametrize(
    "full,own",
    [
        ((1, 8, "S", 64), (1, 1, "S", 64)),  # rotary's cos/sin over heads
        ((2, 8, "S", 64), (2, 1, "S", 64)),  # batch kept, heads broadcast
        ((2, 8, "S", 64), (1, 8, "S", 64)),  # batch broadcast
        ((3, 4, 5, 16), (3, 1, 5, 16)),  # static sizes
    ],
)
def test_broadcast_rows_index_the_row_they_repeat(full, own):
    """An input whose rows repeat along lead dims of size 1 is read at the row broadcasting gives."""
    import torch

    from thunder_aot.backends.triton.row_kernels import RowProgram
    from thunder_aot.ir import DimRange, Region, SymDim, TensorSpec, Value

    def dims(shape):
        return tuple(SymDim("S") if d == "S" else d for d in shape)

    region = Region("r", (Value("x", TensorSpec(dims(full), "float32")),), (), ())
    prog = RowProgram(region, (DimRange("S", 1, 64),))
    expression = prog.broadcast_row(dims(own))
    assert expression is not None and prog.size_params == (["S"] if "S" in full else [])
    for s in (1, 3, 7):
        lead = [s if d == "S" else d for d in full[:-1]]
        own_lead = [s if d == "S" else d for d in own[:-1]]
        expected = torch.arange(int(torch.tensor(own_lead).prod())).reshape(own_lead).expand(lead).reshape(-1)
        got = [eval(expression, {"row": row, "S": s}) for row in range(len(expected))]
        assert got == expected.tolist(), (expression, s)
    assert prog.broadcast_row(dims(full)) is None  # the full shape is a plain row


@pytest.mark.traces
def test_an_unchecked_triton_export_runs_and_matches_its_source_under_the_interpreter(tmp_path):
    """--unchecked leaves out the checks and the guard table; forward still sets _device (from
    eager_device) before the kernels launch. Export's verification runs it against the source."""
    out = tmp_path / "rotary_unchecked.py"
    shapes = "1x8x[S=1..128]x64:bf16, 1x1x[S]x64:bf16, 1x1x[S]x64:bf16"
    result = run_cli(
        "export",
        "thunder_aot.examples.blocks:rotary_embedding",
        "--shapes",
        shapes,
        "--backend",
        "triton",
        "--unchecked",
        "--out",
        str(out),
        env={"TRITON_INTERPRET": "1"},
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert re.search(r"verified: \d+ calls match the source module \(against float64; seed", result.stderr)
    text = out.read_text()
    assert "_FAST" not in text and "raise bad_input(" not in text
    forward = text.split("\ndef forward(")[1].split("\n\n\n")[0]
    assert forward.count("_device = eager_device(x)") == 1 and "_kernel[1](" in forward


@pytest.mark.traces
@pytest.mark.parametrize("source,shapes", VIEW_KERNELS, ids=[k[0].split(":")[1] for k in VIEW_KERNELS])
def test_regions_with_views_inside_are_one_kernel_each(source, shapes):
    """Transposes, reshapes, expands, strided slices and cats inside a region (and a reduction under
    a view) become index arithmetic in one kernel: export reports no region without a kernel, and the
    kernels match the source at every bucket's edges and inside, non-finite inputs included, outputs
    poisoned."""
    result = interpreted_check(source, shapes)
    assert result.returncode == 0, result.stderr[-3000:]
    messages = [line for line in result.stdout.splitlines() if line.startswith("export: ")]
    assert messages and not [m for m in messages if "no triton kernel" in m], messages
    assert result.stdout.splitlines()[-1].startswith("ok ")


@pytest.mark.traces
def test_a_region_no_kernel_takes_runs_as_its_source_calls():
    """A softmax over a first dim longer than a tile's lanes: export names the region and what it runs
    as, the user's own calls (one softmax, not the dozen prims it decomposes into), and the module
    matches its source."""
    from thunder_aot.pipeline import export
    from thunder_aot.request import ExportRequest

    ((source, shapes),) = VIEW_SOURCE_CALLS
    result = interpreted_check(source, shapes)
    assert result.returncode == 0, result.stderr[-3000:]
    assert (
        "no triton kernel for region aotFusion0 (amax, broadcast_in_dim, convert_element_type, div, exp, "
        "mul, shallow_copy, sub, sum): runs as its source's torch calls: "
        "torch.Tensor.to x2, torch.mul x1, torch.softmax x1" in result.stdout
    ), result.stdout
    text = export(ExportRequest(source, (shapes,), backend="triton"), verify=False)
    body = text[text.index("def forward(") :]
    assert "torch.softmax(" in body and "torch.amax(" not in body and "torch.exp(" not in body
    assert "no kernel for convert_element_type, mul" in body  # the region's comment says what happened


@pytest.mark.traces
def test_a_region_of_independent_parts_is_a_kernel_per_group_of_them(monkeypatch):
    """DeepSeek-V3's latent RMSNorm beside its keys' and queries' rotary: Thunder forms one region of
    the three, which no one kernel computes (a reduction over one row, outputs of three shapes).
    passes.split_regions makes it two kernels (the norm; both rotaries and the cat); without the pass it
    ran as its source's torch calls. (The kernels are checked against the source in
    test_regions_with_views_inside_are_one_kernel_each.)"""
    import thunder_aot.passes.split_regions as split
    from tests.view_modules import LATENT_SHAPES
    from thunder_aot.backends import get_backend
    from thunder_aot.pipeline import build_program, regions_without_kernels
    from thunder_aot.request import ExportRequest

    request = ExportRequest("tests.view_modules:latent_norm_and_rotary", (LATENT_SHAPES,), backend="triton")
    program, _, _ = build_program(request, progress=lambda m: None)
    regions = list(program.programs[0].regions())
    assert [r.name for r in regions] == ["aotFusion0_0", "aotFusion0_1"]
    assert not regions_without_kernels(program, get_backend("triton"))
    norm, rotary = sorted(regions, key=lambda r: not any(op.prim == "sum" for op in r.ops))
    assert (
        len(norm.outputs) == 1 and len(rotary.outputs) == 2 and not any(op.prim == "sum" for op in rotary.ops)
    )
    monkeypatch.setattr(split, "split_regions", lambda bp, makes_kernel: bp)
    whole, _, _ = build_program(request, progress=lambda m: None)
    assert [r.name for r in whole.programs[0].regions()] == ["aotFusion0"]
    assert regions_without_kernels(whole, get_backend("triton"))


@pytest.mark.traces
def test_a_tensor_filled_slice_by_slice_is_one_kernel():
    """An empty tensor filled by copies into slices of its last dim (DeepSeek-V3's keys, one piece
    through an expand) is a concatenation: one region (passes.fills_as_concatenations) that the regions
    computing the
    pieces join, so no allocation, slice, copy or expand stays a torch call. Read between the copies,
    the tensor is no fill, and the calls stay. (The kernel is checked against the source in
    test_regions_with_views_inside_are_one_kernel_each.)"""
    from tests.view_modules import KEYS_FILL_SHAPES
    from thunder_aot.ir import TorchCall
    from thunder_aot.pipeline import build_program
    from thunder_aot.request import ExportRequest

    def calls(source):
        program, _, _ = build_program(
            ExportRequest(source, (KEYS_FILL_SHAPES,), backend="triton"), progress=lambda m: None
        )
        return [s.target for bp in program.programs for s in bp.steps if isinstance(s, TorchCall)], program

    filled, program = calls("tests.view_modules:keys_fill")
    assert filled == [] and [len(list(bp.regions())) for bp in program.programs] == [1]
    kept, _ = calls("tests.view_modules:keys_fill_read_between")
    assert {"torch.Tensor.new_empty", "torch.Tensor.copy_", "torch.Tensor.expand"} <= set(kept)


@pytest.mark.traces
def test_basic_indices_and_a_weights_transpose_are_no_torch_calls(monkeypatch):
    """Falcon's fused projection, ``(x * 2) @ weight.T`` split by ``[:-2]``, ``[[-2]]``, ``[[-1]]``
    (and integer indices, which Thunder fuses itself): the indices are slices inside the kernel that
    reads them (passes.move_slices_into_kernels), and the weight's transpose, which Thunder puts in the
    region beside
    the scaling, is a view the matmul reads (passes.transposed_outputs_as_views), not a kernel copying the
    weight each
    call. Without the slices pass the indices stay torch calls. (The kernels are checked against the
    source in test_regions_with_views_inside_are_one_kernel_each.)"""
    import thunder_aot.passes.move_slices_into_kernels as slices
    from tests.view_modules import FUSED_SPLIT_SHAPES
    from thunder_aot.ir import Ref, TorchCall
    from thunder_aot.pipeline import build_program
    from thunder_aot.request import ExportRequest

    request = ExportRequest(
        "tests.view_modules:fused_projection_split", (FUSED_SPLIT_SHAPES,), backend="triton"
    )
    ((bp,),) = [build_program(request, progress=lambda m: None)[0].programs]
    calls = [s for s in bp.steps if isinstance(s, TorchCall)]
    assert sorted(c.target for c in calls) == ["torch.Tensor.view", "torch.matmul", "torch.permute"]
    weight = next(v.name for v in bp.inputs if v.name.endswith("weight"))
    permute = next(c for c in calls if c.target == "torch.permute")
    assert permute.args[0] == Ref(weight)
    assert not any(weight in {v.name for v in r.inputs} for r in bp.regions())
    reader = next(r for r in bp.regions() if any(op.prim == "squeeze" for op in r.ops))
    assert [op.prim for op in reader.ops][:3] == ["slice"] * 3  # the three indices, in front of Thunder's ops
    monkeypatch.setattr(slices, "absorb_slices", lambda bp, makes_kernel: bp)
    ((kept,),) = [build_program(request, progress=lambda m: None)[0].programs]
    assert [s.target for s in kept.steps if isinstance(s, TorchCall)].count("torch.Tensor.__getitem__") == 3


def test_basic_index_reads_only_indices_a_slice_computes():
    """passes.move_slices_into_kernels takes constant slices (any bounds on a static dim, ``:`` on a dynamic
    one),
    ``...``, integers and one-position lists; not a boolean or longer list, a step, ``None``, an
    index out of range or a constant bound on a dynamic dim."""
    from thunder_aot.ir import Const, Ref, Seq, SliceArg, SymDim, TensorSpec, TorchCall, TorchName, Value
    from thunder_aot.passes.move_slices_into_kernels import basic_index

    S = SymDim("S")
    specs = {"x": TensorSpec((1, S, 2, 4, 16), "float32")}
    full = SliceArg(Const(None), Const(None), Const(None))

    def index(items, out_shape):
        call = TorchCall(
            "torch.Tensor.__getitem__",
            (Value("y", TensorSpec(out_shape, "float32")),),
            (Ref("x"), Seq(tuple(items))),
        )
        return basic_index(call, specs)

    got = index([full, full, full, SliceArg(Const(None), Const(-2), Const(None))], (1, S, 2, 2, 16))
    assert (got.starts, got.ends, got.squeezed) == ((0, 0, 0, 0, 0), (1, S, 2, 2, 16), ())
    got = index([TorchName("..."), Seq((Const(-2),), is_list=True), full], (1, S, 2, 1, 16))
    assert (got.starts[3], got.ends[3], got.squeezed) == (2, 3, ())
    got = index([full, full, Const(0), Const(-1)], (1, S, 16))
    assert (got.starts[2:4], got.ends[2:4], got.squeezed) == ((0, 3), (1, 4), (2, 3))
    refused = [
        ([full, full, full, Seq((Const(True),), is_list=True)], (1, S, 2, 1, 16)),
        ([full, full, full, Seq((Const(0), Const(1)), is_list=True)], (1, S, 2, 2, 16)),
        ([full, full, full, SliceArg(Const(None), Const(None), Const(2))], (1, S, 2, 2, 16)),
        ([full, Const(None)], (1, 1, S, 2, 4, 16)),
        ([full, full, Const(2)], (1, S, 4, 16)),
        ([full, SliceArg(Const(None), Const(5), Const(None))], (1, 5, 2, 4, 16)),
    ]
    assert [index(items, shape) for items, shape in refused] == [None] * len(refused)


@pytest.mark.traces
def test_a_part_no_kernel_takes_runs_as_its_part_of_the_source_calls():
    """A region of a column softmax (no kernel past 8192 rows) beside an RMSNorm of another input:
    the norm becomes a kernel, the softmax runs as its own source calls (not the norm's), and the
    module matches its source under the interpreter."""
    from tests.view_modules import PART_SOURCE_CALLS
    from thunder_aot.pipeline import export
    from thunder_aot.request import ExportRequest

    source, shapes = PART_SOURCE_CALLS
    result = interpreted_check(source, shapes)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "no triton kernel for region aotFusion0_1" in result.stdout, result.stdout
    assert (
        "runs as its source's torch calls: torch.Tensor.to x2, torch.mul x1, torch.softmax x1"
        in result.stdout
    )
    assert "aotFusion0_0" not in result.stdout
    text = export(ExportRequest(source, (shapes,), backend="triton"), verify=False)
    body = text[text.index("def forward(") :]
    assert body.count("@triton.jit") == 0 and text.count("@triton.jit") == 1
    assert "torch.softmax(" in body and "torch.rsqrt(" not in body and "torch.mean(" not in body


@pytest.mark.traces
def test_a_row_reduction_wider_than_the_output_row_takes_whole_rows():
    """Attention sinks (a softmax over the scores and a sink column, the sink's column dropped): the
    lanes walk the dynamic key dim, one row per program, as wide as the output's row at the
    bucket's upper edge, and the reductions take the sink column in a tail of lanes past it (not
    2048 lanes, half of them idle, for a row of 1025); never one output element per row, which
    would reduce the whole row for each of its elements (quadratic in S: 300 ms at S=1024 in
    GPT-OSS's layer, profiled at 7e67ed3)."""
    from thunder_aot.pipeline import export
    from thunder_aot.request import ExportRequest

    text = export(
        ExportRequest(
            "tests.view_modules:sink_softmax",
            ("1x4x[S=1..1024]x[S]:bf16, 1x1x[S]x[S]:bf16",),
            backend="triton",
        ),
        verify=False,
    )
    assert text.count("@triton.jit") == 1
    assert "# persistent: one row of 1024 per program in BLOCK=1024 lanes" in text
    assert "the reductions' rows 1 longer in a tail of 1 lanes" in text
    assert "one output element per row" not in text
    # the output's lanes and the reductions' share every value: the scores and the mask load once,
    # in the tile's lanes only (the tail's lanes hold the sink alone), the sinks once; each of the
    # source's two maxima and its sum is one reduction over the tile and one over the tail
    kernel = text[text.index("def fusion0_kernel") : text.index("fusion0 = Kernel")]
    assert kernel.count("tl.load(scores_ptr") == 1 and kernel.count("tl.load(mask__ptr") == 1
    assert kernel.count("tl.load(t_sinks_ptr") == 1 and "+ tail)" not in kernel
    assert kernel.count("nan_max(") == 4 and kernel.count("tl.sum(") == 2 and kernel.count("tl.maximum(") == 2


def test_masks_are_sets_of_conditions_less_the_implied_ones():
    """A mask is the set of its conditions (parentheses and nesting aside), less each one another
    implies; a value computed under a mask serves any mask that implies it."""
    from thunder_aot.backends.triton.index_math import conjuncts, empty, implies, simplest

    assert conjuncts("m0 & ((cols >= S) & (cols < S + 1))") == ["m0", "cols >= S", "cols < S + 1"]
    assert simplest({"row < 4 * S", "cols < S", "cols < (S + 1)"}) == {"row < 4 * S", "cols < S"}
    kept = simplest({"cols >= S", "cols >= S + 1", "cols < 32 + 32", "cols < 64"})  # two bounds, equivalent
    assert len(kept) == 2 and "cols >= S + 1" in kept
    assert implies(frozenset({"row < R", "cols < S"}), frozenset({"row < R", "cols < S + 1"}))
    assert not implies(frozenset({"row < R", "cols < S + 1"}), frozenset({"row < R", "cols < S"}))
    assert not implies(frozenset({"cols < S"}), frozenset({"cols < 2 * S"}))  # only constant offsets compare
    assert not implies(frozenset({"cols < S"}), frozenset({"row < R", "cols < S"}))
    # a cat's piece that no lane of a mask reads: below a bound and at or above it; a tail lane
    # (never negative) before the row's end
    assert empty({"row < R", "cols < S", "cols >= S"}) and empty({"cols < S", "cols >= S + 1"})
    assert empty({"tail < 1", "(S + tail) < S"}) and not empty(
        {"tail < 1", "(S + tail) >= S", "(S + tail) < S + 1"}
    )
    assert not empty({"cols < S + 1", "cols >= S"}) and not empty({"cols < S", "cols >= S - 1"})


@pytest.mark.traces
def test_a_region_whose_outputs_would_reduce_each_row_many_times_runs_as_its_source_calls():
    """Two outputs no lane dim serves (the rows, and their sums apart): one output element per row
    would reduce each row once per element (32 times), so the region runs as its source's calls,
    and the module matches its source."""
    result = interpreted_check("tests.view_modules:rows_and_their_sums", "1x[S=1..40]x128:bf16")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "no triton kernel for region aotFusion0" in result.stdout
    assert (
        "runs as its source's torch calls: torch.Tensor.to x1, torch.Tensor.view x1, torch.amax x1"
        in result.stdout
    )


@pytest.mark.traces
@pytest.mark.parametrize("backend", ["triton", "nvfuser"])
def test_a_region_can_use_the_definition_another_region_emits(backend):
    """Regions with the same definition (a layer's input norm in two programs) share one kernel: the
    sharing view keeps everything but its name and emits no definition of its own."""
    from thunder_aot.backends import get_backend
    from thunder_aot.pipeline import build_program
    from thunder_aot.request import ExportRequest

    program, _, _ = build_program(
        ExportRequest("thunder_aot.examples.gpt_oss:rmsnorm", ("1x[1..8]x2880:bf16",), backend=backend),
        progress=lambda m: None,
    )
    bp = program.programs[0]
    view = get_backend(backend).region_view(bp.regions()[0], bp.bucket.dims)
    shared = view.sharing("fusion0")
    assert view.template and shared.template == "" and shared.name == "fusion0"
    assert shared.definition_key == view.definition_key


_OUT_OF_BOUNDS = """
import torch, triton, triton.language as tl
from tests.interpreter_bounds import OutOfBounds, install
install()

@triton.jit
def copy(x_ptr, y_ptr, n, extra, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n + extra, other=0), mask=offs < n)

x, y = torch.randn(10), torch.empty(10)
copy[(1,)](x, y, 10, 0, BLOCK=16)
assert torch.equal(x, y)
try:
    copy[(1,)](x, y, 10, 1, BLOCK=16)  # one lane loads past x (its mask is the bug)
except Exception as e:  # the interpreter raises its own error, caused by the check's
    assert isinstance(e.__cause__, OutOfBounds), repr(e)
    print("caught:", e.__cause__)
"""


def test_the_interpreter_checks_that_every_masked_lane_is_inside_a_tensor_argument():
    """The CPU stand-in for memcheck that the interpreted checks run under: a kernel whose load mask
    reaches one element past its input is stopped (the same kernel with the right mask runs)."""
    import subprocess
    import sys

    pytest.importorskip("triton")
    env = python_env(TRITON_INTERPRET="1")
    done = subprocess.run(
        [sys.executable, "-c", _OUT_OF_BOUNDS], env=env, capture_output=True, text=True, cwd=ROOT
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "caught: a masked load of 1 lanes outside every tensor argument" in done.stdout, done.stdout


def test_tuples_made_from_the_dims_alone_are_bound_once_per_shape():
    """codegen.per_shape: an allocation's shape and strides (and any other tuple of dims and ints)
    become names the guard entry's sizes hold; the dims a statement still reads stay, others go;
    tuples that read anything else stay where they are."""
    from thunder_aot.backends.base import Line
    from thunder_aot.codegen.per_shape import bind_per_shape

    steps = (
        Line(
            "t = empty_strided_cuda((1, s0, 64), (64 * s0, 64, 1), torch.bfloat16) if _device >= 0 else "
            "torch.empty((1, s0, 64), dtype=torch.bfloat16, device=x.device)",
            "a comment stays",
        ),
        Line("u = torch.reshape(t, (s0 // 2, 2 * s1, -1))"),
        Line("_raw = (t.data_ptr(), s1)"),
        Line("v = w.view((1, 64))"),
        Line("z = y.view((s0, x.shape[0]))"),
    )
    bound = bind_per_shape(steps, ["s0", "s1"])
    assert [line.code for line in bound.steps] == [
        "t = empty_strided_cuda(t_shape, t_strides, torch.bfloat16) if _device >= 0 else "
        "torch.empty(t_shape, dtype=torch.bfloat16, device=x.device)",
        "u = torch.reshape(t, _shape_2)",
        "_raw = (t.data_ptr(), s1)",
        "v = w.view((1, 64))",
        "z = y.view((s0, x.shape[0]))",
    ]
    assert bound.steps[0].comment == "a comment stays"
    assert bound.values == (
        ("s0", "s0"),
        ("s1", "s1"),
        ("t_shape", "(1, s0, 64)"),
        ("t_strides", "(64 * s0, 64, 1)"),
        ("_shape_2", "(s0 // 2, 2 * s1, -1)"),
    )
    dims = {"s0": 6, "s1": 5}  # the values, evaluated, are what the statements built
    assert [eval(text, {}, dims) for _, text in bound.values][2:] == [(1, 6, 64), (384, 64, 1), (3, 10, -1)]
    only = bind_per_shape((Line("t = empty_strided_cuda((s0, 8), (8, 1), torch.float32)"),), ["s0"])
    assert only.values == (("t_shape", "(s0, 8)"),)  # s0 read nowhere else: not unpacked


def test_width_unit_is_the_largest_power_of_two_up_to_16_dividing_the_width():
    """runtime.triton.width_unit (written out in generated modules as ``(N | 16) & -(N | 16)``):
    N_units * unit is N, and the unit is the largest power of two dividing N, at most 16."""
    from thunder_aot.runtime.triton import width_unit

    for n in [
        *range(0, 300),
        1000,
        1500,
        2000,
        2001,
        2047,
        2048,
        4096,
        32000,
        32001,
        2**31 - 1,
        2**31,
        2**40 + 24,
    ]:
        unit = width_unit(n)
        assert unit in (1, 2, 4, 8, 16) and n % unit == 0 and (n // unit) * unit == n, (n, unit)
        assert unit == 16 or n % (2 * unit) != 0, (n, unit)  # the largest such power of two


def test_width_unit_reaches_the_compiler_as_vector_loads_and_stores():
    """The generated softmax's row kernel, compiled for sm_90 on this CPU (Triton's bundled ptxas,
    no GPU): a bf16 row of a unit of 1 loads and stores element by element, a unit of 8 or 16 in
    16-byte vectors, so knowing N's divisibility is what vectorises a run-time row width."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    from triton.compiler import compile as triton_compile

    gen = load_module_from_text((ROOT / "generated" / "softmax_triton.py").read_text(), "softmax_units")
    kernel = gen.program1_fusion0_kernel
    assert gen.program1_fusion0.width_units
    widths = {}
    for unit in (1, 2, 4, 8, 16):
        signature = {
            "scores_ptr": "*bf16",
            "mask__ptr": "*fp32",
            "t20_out_ptr": "*bf16",
            "S": "i32",
            "_rows": "i32",
            "N_units": "i32",
            "BLOCK": "constexpr",
            "N_UNIT": "constexpr",
        }
        source = ASTSource(
            fn=kernel,
            signature=signature,
            constexprs={"BLOCK": 512, "N_UNIT": unit},
            attrs={(i,): [["tt.divisibility", 16]] for i in range(3)},
        )
        ptx = triton_compile(source, target=GPUTarget("cuda", 90, 32), options={"num_warps": 1}).asm["ptx"]
        widths[unit] = (
            sorted(set(re.findall(r"ld\.global(?:\.\w+)*\.b16\b|ld\.global(?:\.v\d)?\.b32", ptx))),
            sorted(set(re.findall(r"st\.global(?:\.\w+)*\.b(?:16|32)\b", ptx))),
        )
    stores = {unit: w[1] for unit, w in widths.items()}
    assert stores[1] == ["st.global.b16"], widths[1]  # one bf16 per store
    assert stores[8] == stores[16] == ["st.global.v4.b32"], widths  # 8 bf16 per store
    assert stores[2] == ["st.global.b32"] and stores[4] == ["st.global.v2.b32"], widths


@pytest.mark.parametrize("stem", sorted(p.stem for p in (ROOT / "generated").glob("*_triton.py")))
def test_torch_compile_can_copy_each_kernel_with_the_helpers_it_calls(stem):
    """Under torch.compile, inductor rebuilds each user kernel it captures from source: the kernel's
    text plus the text of every @triton.jit global it calls, by the name the kernel calls it
    (torch._inductor.codegen.wrapper.user_defined_triton_kernel_transitive_closure_source_code).
    That file, imported alone, must define every global name its functions read; a helper bound to
    another name (``nan_max = _nan_max_compiled``) was undefined there (the GPU run at 618f597)."""
    import builtins
    import dis

    from torch._inductor.codegen.wrapper import user_defined_triton_kernel_transitive_closure_source_code
    from triton import JITFunction

    gen = load_module_from_text((ROOT / "generated" / f"{stem}.py").read_text(), f"closure_{stem}")
    kernels = [v for k, v in vars(gen).items() if isinstance(v, JITFunction) and k.endswith("_kernel")]
    assert kernels, stem
    for kernel in kernels:
        text = (
            "import triton\nimport triton.language as tl\n\n"
            + user_defined_triton_kernel_transitive_closure_source_code(kernel)
        )
        copied = load_module_from_text(text, f"closure_{stem}_{kernel.__name__}")
        # the kernel itself is copied undecorated (inductor decorates it), its helpers as @triton.jit
        functions = [copied.__dict__[kernel.__name__]]
        functions += [v.fn for v in vars(copied).values() if isinstance(v, JITFunction)]
        for function in functions:
            reads = {i.argval for i in dis.Bytecode(function) if i.opname == "LOAD_GLOBAL"}
            missing = {n for n in reads if n not in vars(copied) and not hasattr(builtins, n)}
            assert (
                not missing
            ), f"{stem}: {function.__name__} reads {sorted(missing)}, undefined in inductor's copy"
