"""``thunder-aot bench``: the seed issue's comparison for any module, with a table and a plot.

Per shape point and system: per-call host+device time (``torch.utils.benchmark``, one CPU thread,
median of interleaved rounds), and on CUDA the device time of back-to-back calls (CUDA events)
with the bandwidth it achieves against a measured device-to-device copy. Every system's output is
checked against eager before it is timed; systems that cannot run here are listed with the reason.

:mod:`.model` (points, measurements, the report), :mod:`.timing`, :mod:`.floors` (a generated
module's kernels alone), :mod:`.report` (files and tables), :mod:`.run` (the command).
"""

from thunder_aot.bench.floors import bare_launches, io_bytes, nvfuser_executions
from thunder_aot.bench.records import Call, Measurement, Point, Report, points_for
from thunder_aot.bench.report import (
    floor_of,
    print_compare,
    print_table,
    ratio_pairs,
    write_json,
    write_markdown,
    write_plot,
    write_reports,
)
from thunder_aot.bench.run import run_bench
from thunder_aot.bench.timing import copy_bandwidth_gb_per_s, device_time_us, interleaved_times, time_call

__all__ = [
    "Call",
    "Measurement",
    "Point",
    "Report",
    "bare_launches",
    "copy_bandwidth_gb_per_s",
    "device_time_us",
    "floor_of",
    "interleaved_times",
    "io_bytes",
    "nvfuser_executions",
    "points_for",
    "print_compare",
    "print_table",
    "ratio_pairs",
    "run_bench",
    "time_call",
    "write_json",
    "write_markdown",
    "write_plot",
    "write_reports",
]
