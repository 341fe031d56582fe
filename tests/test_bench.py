"""thunder-aot bench on CPU: what can run is timed, what cannot is listed with a reason, reports."""

from __future__ import annotations

import ast
import json

import pytest
import torch

from tests.helpers import ROOT, run_cli
from thunder_aot.bench import Measurement, Report, floor_of, points_for, write_markdown, write_reports
from thunder_aot.shapes import parse_shapes
from thunder_aot.verify import load_module_from_text


def test_points_cover_edges_and_powers_of_two():
    (b,) = parse_shapes("1x[3..100]x8")
    assert [p.rows for p in points_for(b, None)] == [3, 4, 8, 16, 32, 64, 100]
    assert [p.label for p in points_for(b, [1, 5, 100, 200])] == ["1x5x8", "1x100x8"]
    (e,) = parse_shapes("2x7x8")
    assert [(p.label, p.rows) for p in points_for(e, None)] == [("2x7x8", 14)]


@pytest.mark.traces
def test_bench_on_cpu_times_what_runs_and_says_what_it_skipped(tmp_path):
    out = tmp_path / "report"
    result = run_cli(
        "bench",
        "thunder_aot.examples.gpt_oss:rmsnorm",
        "--shapes",
        "1x[1..16]x2880:bf16",
        "--sizes",
        "1,16",
        "--rounds",
        "1",
        "--min-run-time",
        "0.02",
        "--device",
        "cpu",
        "--out",
        str(out),
        "--backends",
        "auto,nvfuser",  # auto: torch on this CPU; nvfuser: skipped, with the reason
        "--seed",
        "3",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    data = json.loads((out / "bench.json").read_text())
    assert data["systems"] == ["Eager", "thunder.jit", "thunder-aot(torch)"]
    assert data["points"] == ["1x1x2880", "1x16x2880"]
    assert len(data["measurements"]) == 6 and all(m["us_per_call"] > 0 for m in data["measurements"])
    assert set(data["skipped"]) >= {
        "thunder-aot(nvfuser)",
        "torch.compile",
        "thunderfx",
        "FD.execute",
        "FDWrapper",
    }
    assert "skipped torch.compile: not run on CPU" in result.stderr
    assert "GptOssRMSNorm" in result.stdout and "thunder-aot(torch)" in result.stdout  # the Compare table
    md = (out / "bench.md").read_text()
    assert (
        "| 1x16x2880 |" in md
        and "Skipped:" in md
        and "thunder-aot bench thunder_aot.examples.gpt_oss:rmsnorm" in md
        and "--seed 3" in md
    )
    assert (out / "bench.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_report_writers_with_device_rows(tmp_path):
    report = Report(
        title="T",
        command="thunder-aot bench x",
        device="GPU",
        versions={"torch": "2.11.0"},
        systems=["Eager", "thunder-aot(nvfuser)"],
        points=["1x1x8", "1x2x8"],
        copy_gb_per_s=4000.0,
        skipped={"FD.execute": "needs nvFuser"},
    )
    report.measurements = [
        Measurement("Eager", "1x1x8", 1, 70.0, 5.0, 1000.0),
        Measurement("thunder-aot(nvfuser)", "1x1x8", 1, 11.0, 4.0, 3900.0),
        Measurement("Eager", "1x2x8", 2, 72.0),
    ]
    paths = write_reports(report, tmp_path)
    md = (tmp_path / "bench.md").read_text()
    assert "| 1x1x8 | 70.0 | 11.0 |" in md and "| 1x2x8 | 72.0 |  |" in md
    assert "| 1x1x8 | thunder-aot(nvfuser) | 4.00 | 3900 | 98% |" in md
    assert "- FD.execute: needs nvFuser" in md
    assert json.loads((tmp_path / "bench.json").read_text())["copy_gb_per_s"] == 4000.0
    assert [p.name for p in paths] == ["bench.json", "bench.md", "bench.png"]


def test_ratios_against_floors_and_baselines(tmp_path):
    report = Report(
        title="T",
        command="c",
        device="GPU",
        versions={},
        points=["1x1x8"],
        systems=[
            "Eager",
            "torch.compile",
            "FD.execute",
            "thunder-aot(nvfuser)",
            "bare launch(nvfuser)",
            "thunder-aot(triton)",
            "bare launch(triton)",
        ],
    )
    report.measurements = [
        Measurement("Eager", "1x1x8", 1, 80.0),
        Measurement("torch.compile", "1x1x8", 1, 50.0),
        Measurement("FD.execute", "1x1x8", 1, 10.0),
        Measurement("thunder-aot(nvfuser)", "1x1x8", 1, 11.0),
        Measurement("bare launch(nvfuser)", "1x1x8", 1, 10.0),
        Measurement("thunder-aot(triton)", "1x1x8", 1, 6.0),
        Measurement("bare launch(triton)", "1x1x8", 1, 5.0),
    ]
    write_markdown(report, tmp_path / "bench.md")
    md = (tmp_path / "bench.md").read_text()
    header = next(line for line in md.splitlines() if "thunder-aot(nvfuser) / bare launch(nvfuser)" in line)
    assert "thunder-aot(triton) / FD.execute" not in header  # Thunder's FD is nvFuser's floor only
    row = next(line for line in md.splitlines() if line.startswith("| 1x1x8 | 1.10 |"))
    assert row == "| 1x1x8 | 1.10 | 1.10 | 0.22 | 0.14 | 1.20 | 0.12 | 0.07 |"


def test_an_unchecked_module_is_measured_against_the_same_floor():
    assert (
        floor_of("thunder-aot(nvfuser)")
        == floor_of("thunder-aot(nvfuser, unchecked)")
        == "bare launch(nvfuser)"
    )
    assert floor_of("thunder-aot(triton, unchecked)") == "bare launch(triton)"


def test_print_table_prints_and_writes_the_table(tmp_path, capsys):
    from thunder_aot.bench import print_table

    lines = ["| a | b |", "|---|---|", "| 1 | 2.50 |"]
    print_table(lines, str(tmp_path / "t.md"))
    assert (tmp_path / "t.md").read_text() == "\n".join(lines) + "\n"
    assert capsys.readouterr().out == "\n".join(lines) + "\n\n"
    print_table(lines, None)
    assert "| 1 | 2.50 |" in capsys.readouterr().out and sorted(p.name for p in tmp_path.iterdir()) == [
        "t.md"
    ]


def test_schedule_sweep_names_kernels_the_generated_modules_define():
    """tools/triton_schedule.py launches a kernel of generated/ by name and row width: both must still be
    there (a regenerated module once dropped the kernel the sweep asked for, found only on the GPU)."""
    sweep = load_module_from_text((ROOT / "tools" / "triton_schedule.py").read_text(), "triton_schedule")
    for stem, n, *_ in sweep.CASES:
        text = (ROOT / "generated" / f"{stem}_triton.py").read_text()
        assert f"def {sweep.KERNEL}(" in text, stem
        # the kernel is launched with rows of n (its last two arguments: N, then BLOCK)
        launches = [
            c
            for c in ast.walk(ast.parse(text))
            if isinstance(c, ast.Call) and ast.unparse(c.func) == "_kernel[1]"
        ]
        assert any(ast.unparse(c.args[-2]) == str(n) for c in launches), (stem, n)


@pytest.mark.traces
def test_model_bench_on_cpu_checks_and_times_whole_forwards(tmp_path):
    """bench --model (issue 19) on CPU: the decoder layers exported whole and swapped in, every
    system's logits judged against eager's before timing; what needs CUDA is listed as skipped.
    (Without --stack: its export of the decoder stack is the one this test runs first for
    --stack-module, and it cost two minutes.)"""
    out = tmp_path / "model"
    stack = tmp_path / "tiny_stack.py"  # exported earlier, as a 16-layer stack would be
    assert (
        run_cli(
            "export",
            "tests.hf_fixtures:tiny_llama_stack",
            "--shapes",  # (test_real_models' stack test exports these: one trace of them per run)
            "1x[S=1..64]x256",
            "--backend",
            "torch",
            "--no-verify",
            "--out",
            str(stack),
        ).returncode
        == 0
    )
    result = run_cli(
        "bench",
        "thunder_aot.examples.hf:tiny_llama",
        "--model",
        "--backends",
        "torch",
        "--stack-module",
        str(stack),
        "--sizes",
        "1,9",
        "--rounds",
        "1",
        "--min-run-time",
        "0.01",
        "--out",
        str(out),
    )
    assert result.returncode == 0, result.stderr
    report = json.loads((out / "bench.json").read_text())
    assert report["systems"] == [
        "Eager",
        "thunder-aot(torch) layers",
        "thunder-aot(torch) layer stack",
        "thunder-aot(torch) stack (tiny_stack.py)",
    ]
    assert report["points"] == ["S=1", "S=9"]
    assert {(m["system"], m["point"]) for m in report["measurements"]} == {
        (s, p) for s in report["systems"] for p in report["points"]
    }
    assert not any("MISMATCH" in why for why in report["skipped"].values()), report["skipped"]
    assert not any("original layers ran" in name for name in report["skipped"]), report["skipped"]
    assert "torch.compile" in report["skipped"] and "CUDA graphs" in report["skipped"]
    assert "--model" in (out / "bench.md").read_text()


@pytest.mark.traces
def test_cold_start_of_a_model_runs_each_system_in_fresh_processes(tmp_path):
    """bench --model --cold-start (issue 19): each system in a fresh process with empty and with warm
    caches, to a first output judged against float64; torch.compile is left out on CPU."""
    out = tmp_path / "cold"
    result = run_cli(
        "bench",
        "thunder_aot.examples.hf:tiny_llama",
        "--model",
        "--cold-start",
        "--backends",
        "torch",
        "--sizes",
        "5",
        "--out",
        str(out),
    )
    assert result.returncode == 0, result.stderr[-3000:]
    text = (out / "cold.md").read_text()
    assert "--cold-start" in text and "5 tokens" in text
    rows = {
        line.split(" | ")[0].lstrip("| "): line
        for line in text.splitlines()
        if line.startswith("| ") and "---" not in line
    }
    assert set(rows) == {"system", "Eager", "thunder-aot layers", "thunder-aot layer stack"}, rows
    for system in ("Eager", "thunder-aot layers", "thunder-aot layer stack"):
        cold_total, cold_after, warm_total, warm_after = (
            float(x) for x in rows[system].strip("| ").split(" | ")[1:]
        )
        assert 0 <= cold_after < cold_total and 0 <= warm_after < warm_total, rows[system]
    assert "- torch.compile: not run on CPU" in text


def test_model_bench_arguments_are_checked():
    both = run_cli("bench", "thunder_aot.examples.hf:tiny_llama", "--model", "--shapes", "1x[1..8]x256")
    assert both.returncode != 0 and "drop --shapes" in both.stderr
    stack_alone = run_cli(
        "bench", "thunder_aot.examples.gpt_oss:rmsnorm", "--shapes", "1x[1..8]x2880", "--stack-module", "x.py"
    )
    assert stack_alone.returncode != 0 and "expected --model" in stack_alone.stderr
    neither = run_cli("bench", "thunder_aot.examples.gpt_oss:rmsnorm")
    assert neither.returncode != 0 and "--shapes is required" in neither.stderr
    cold_module = run_cli(
        "bench", "thunder_aot.examples.gpt_oss:rmsnorm", "--shapes", "1x[1..8]x2880", "--cold-start"
    )
    assert cold_module.returncode != 0 and "--cold-start: expected --model" in cold_module.stderr


class _TiedRouter(torch.nn.Module):
    """A token router whose first two experts tie exactly (equal rows and biases, both well above
    the others): any top-1 between them is a top-1, and the two experts' outputs differ widely."""

    def __init__(self) -> None:
        super().__init__()
        self.router = torch.nn.Linear(8, 4)
        self.experts = torch.nn.Parameter(torch.randn(4, 8, 8, generator=torch.Generator().manual_seed(3)))
        with torch.no_grad():
            self.router.weight[1] = self.router.weight[0]
            self.router.bias.copy_(torch.tensor([10.0, 10.0, -10.0, -10.0]))

    def forward(self, x):
        _, picks = torch.topk(self.router(x), 1, dim=-1)
        return torch.einsum("td,tdo->to", x, self.experts[picks[:, 0]])


def test_model_bench_judges_a_system_by_the_picks_it_made():
    """bench --model's judgement (issue 19): a system that breaks a router's tie otherwise than eager
    is judged against float64 making its picks and passes; judged against eager's picks it would
    fail; picks that are no top-k of the input fail either way."""
    import copy

    from thunder_aot.bench.model_bench import judge_with_picks
    from thunder_aot.errors import ExportError
    from thunder_aot.verify.judge import judge, run64_choosing, run_choosing, run_recording_choices

    torch.manual_seed(0)
    model = _TiedRouter().to(torch.bfloat16).eval()
    model64 = copy.deepcopy(model).double()
    x = torch.randn(16, 8, generator=torch.Generator().manual_seed(1)).to(torch.bfloat16)
    with torch.no_grad():
        expected, eager_picks = run_recording_choices(model, [x])
        reference = run64_choosing(model64, [x], eager_picks, model64)
        flipped = [1 - eager_picks[0]]  # the other of the tied experts, every token
        got = run_choosing(model, [x], flipped)
        assert (
            judge_with_picks(expected, eager_picks, got, flipped, reference, model, model64, [x], "tie") == 16
        )
        with pytest.raises(ExportError):
            judge(expected, got, reference, "tie judged by eager's picks")
        assert (
            judge_with_picks(
                expected, eager_picks, expected, eager_picks, reference, model, model64, [x], "same"
            )
            == 0
        )
        wrong = [torch.full_like(eager_picks[0], 2)]  # a pick 20 below the row's largest
        with pytest.raises(ExportError):
            judge_with_picks(
                expected,
                eager_picks,
                run_choosing(model, [x], wrong),
                wrong,
                reference,
                model,
                model64,
                [x],
                "wrong",
            )


def test_sizes_per_dim_name_time_every_combination():
    """``--sizes 'B=1,8;S=1,128'`` on ``[B=1..16]x[S=1..256]``: each combination inside the ranges; a
    dim not named takes its edges; an exact bucket its shape."""
    (b,) = parse_shapes(["[B=1..16]x[S=1..256]x8"])
    assert [p.env for p in points_for(b, {"B": [1, 8], "S": [1, 128, 512]})] == [
        (("B", 1), ("S", 1)),
        (("B", 1), ("S", 128)),
        (("B", 8), ("S", 1)),
        (("B", 8), ("S", 128)),
    ]
    assert [p.env for p in points_for(b, {"S": [64]})] == [(("B", 1), ("S", 64)), (("B", 16), ("S", 64))]
