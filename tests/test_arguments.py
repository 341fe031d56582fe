"""Every bad argument is refused before any work, with one line naming what was expected: the
CLI's (exit 2, before tracing or measuring) and the Python API's (an ExportError naming its keyword
argument)."""

from __future__ import annotations

import os
import sys

import pytest

from tests.helpers import run_cli
from thunder_aot.api import export
from thunder_aot.errors import ExportError

SOURCE = "thunder_aot.examples.gpt_oss:rmsnorm"
BENCH = ("bench", SOURCE, "--shapes", "1x[1..4]x2880:bf16", "--backends", "torch", "--device", "cpu")


def _one_line_refusal(result, expected: str) -> None:
    assert result.returncode == 2, (result.returncode, result.stderr[-2000:])
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert "Traceback" not in result.stderr, result.stderr[-2000:]
    assert expected in lines[-1], lines[-1]


@pytest.mark.parametrize(
    "args,expected",
    [
        (("--sizes", "abc"), "argument --sizes: expected positive integers separated by commas"),
        (("--sizes", "0,4"), "argument --sizes: expected positive integers separated by commas"),
        (("--rounds", "0"), "argument --rounds: expected a positive int, got '0'"),
        (("--min-run-time", "-1"), "argument --min-run-time: expected a positive float"),
        (("--seed", str(2**64)), "argument --seed: expected an integer in [0, 2**63)"),
        (("--out", ""), "argument --out: expected a path, got an empty string"),
        (("--out", "/dev/full"), "--out /dev/full is not a folder"),
    ],
)
def test_bench_refuses_a_bad_argument_before_measuring(args, expected):
    _one_line_refusal(run_cli(*BENCH, *args), expected)


@pytest.mark.parametrize(
    "sizes,expected",
    [
        ("1,8,16", "the bucket's dims B, S each need their sizes: name them, e.g. --sizes 'B=1,16;S=1,256'"),
        ("B=1,8;T=4", "bench --sizes: no bucket has a dynamic dim T (dims: B=1..16, S=1..256)"),
        ("B=1,99", "bench --sizes B=99: outside every bucket's dynamic range (B=1..16, S=1..256)"),
        ("B=1;B=2", "argument --sizes: expected positive integers separated by commas"),
    ],
)
def test_bench_sizes_of_a_bucket_with_several_dims_are_named_per_dim(sizes, expected):
    """On ``[B=1..16]x[S=1..256]`` plain sizes are ambiguous: one line says how to name them."""
    bench = ("bench", SOURCE, "--shapes", "[B=1..16]x[S=1..256]x2880:bf16", "--backends", "torch")
    _one_line_refusal(run_cli(*bench, "--device", "cpu", "--sizes", sizes), expected)


def test_bench_refuses_an_existing_file_as_its_out_folder(tmp_path):
    taken = tmp_path / "report.md"
    taken.write_text("mine\n")
    _one_line_refusal(run_cli(*BENCH, "--out", str(taken)), f"--out {taken} is not a folder")
    assert taken.read_text() == "mine\n"


@pytest.mark.skipif(os.geteuid() == 0 and sys.platform != "darwin", reason="root writes anywhere")
def test_export_refuses_a_read_only_folder_before_tracing(tmp_path):
    folder = tmp_path / "ro"
    folder.mkdir(mode=0o555)
    result = run_cli("export", SOURCE, "--shapes", "1x8x2880:bf16", "--out", str(folder / "m.py"))
    _one_line_refusal(result, "is not writable")


@pytest.mark.parametrize(
    "args,expected",
    [
        (("--verify-seed", str(2**64)), "argument --verify-seed: expected an integer in [0, 2**63)"),
        (("--verify-seed", "-1"), "argument --verify-seed: expected an integer in [0, 2**63)"),
        (("--out", ""), "argument --out: expected a path, got an empty string"),
    ],
)
def test_export_refuses_a_bad_argument_before_tracing(args, expected):
    _one_line_refusal(run_cli("export", SOURCE, "--shapes", "1x8x2880:bf16", *args), expected)


@pytest.mark.parametrize(
    "kwargs,expected",
    [
        ({"shapes": None}, "export: shapes= expected a bucket spec string"),
        ({"shapes": []}, "export: shapes= expected a bucket spec string"),
        ({"shapes": "1x8x2880:bf16", "verify_seed": 2**64}, "export: verify_seed= expected an integer"),
        ({"shapes": "1x8x2880:bf16", "out": ""}, "out= is empty"),
    ],
)
def test_the_python_api_names_its_keyword_argument(kwargs, expected):
    with pytest.raises(ExportError) as info:
        export(SOURCE, **kwargs)
    assert expected in str(info.value)
    assert "--" not in str(info.value)


def test_the_python_api_says_force_true_not_the_flag(tmp_path):
    mine = tmp_path / "mine.py"
    mine.write_text("x = 1\n")
    with pytest.raises(ExportError, match=r"pass force=True to overwrite it"):
        export(SOURCE, "1x8x2880:bf16", out=mine)
    assert mine.read_text() == "x = 1\n"
