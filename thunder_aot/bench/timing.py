"""Timing: per-call host+device time, interleaved rounds, device time, copy bandwidth."""

from __future__ import annotations

import torch

from thunder_aot.bench.records import Call


def time_call(fn: Call, min_run_time: float) -> float:
    from torch.utils.benchmark import Timer

    return Timer(stmt="fn()", globals={"fn": fn}).blocked_autorange(min_run_time=min_run_time).median * 1e6


def interleaved_times(cases: dict[str, Call], rounds: int, min_run_time: float) -> dict[str, list[float]]:
    """Per case, its µs per call in each round; every round times every case in turn, so that drift
    of a shared machine hits all alike (take ratios within a round, or medians over rounds)."""
    samples: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(rounds):
        for name, fn in cases.items():
            samples[name].append(time_call(fn, min_run_time))
    return samples


def device_time_us(fn: Call, calls: int = 50) -> float:
    """Device time per call of ``calls`` back-to-back calls, with CUDA events."""
    fn()
    torch.cuda.synchronize()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(calls):
        fn()
    stop.record()
    torch.cuda.synchronize()
    return start.elapsed_time(stop) * 1e3 / calls


def copy_bandwidth_gb_per_s(nbytes: int = 1 << 30) -> float:
    """A large device-to-device copy, counting bytes read plus bytes written."""
    src = torch.empty(nbytes // 2, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    us = device_time_us(lambda: dst.copy_(src), calls=10)
    return 2 * src.numel() / (us * 1e-6) / 1e9
