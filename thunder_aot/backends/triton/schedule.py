"""The Triton schedule: how many lanes and rows one program takes, and how many warps, chosen per
region and bucket from the row width and the bucket's largest row count (from sweeps on the H200)."""

from __future__ import annotations

from dataclasses import dataclass

#: widest row (lanes, a power of two) the persistent schedule keeps in registers
MAX_BLOCK = 8192
#: chunk (lanes) of the looped schedule for wider rows
LOOP_BLOCK = 8192
#: lanes one program of the persistent schedule works on: rows narrower than this are taken several
#: to a program (rows per program = TILE_LANES // BLOCK, at most the bucket's rows); the best or
#: tied best setting at every module of the sweep (tools/triton_tiles.py, at 71eed81)
TILE_LANES = 1024
#: a tiled index kernel computing more values than this per lane (assignments in its body) takes
#: at most DENSE_LANES lanes per thread: GPT-OSS's sink softmax (24 to 50 values, rows of 1025 in
#: 2048 lanes) ran 490 µs at 4 warps against 655 at 2 and 526 at 8 at S=1024, where rows of 2880
#: with 15 to 20 values are fastest at 32 lanes per thread (tools/warps_sweep.py, at 325c671)
DENSE_VALUES = 20
DENSE_LANES = 16
#: warps of a flat kernel that only moves elements (a transposed copy): 5.6 µs at 8 warps against
#: 15.2 at 4 for eager attention's output copy at S=1024 (the same sweep)
MOVE_WARPS = 8
#: the most warps of a routing program, whose one program sorts up to MAX_BLOCK ids: the sort of
#: 2048 ids took 24.7 µs at 16 warps against 56.1 at 4 (the same sweep)
ROUTING_WARPS = 16


def next_pow2(n: int) -> int:
    return 1 << (n - 1).bit_length()


@dataclass(frozen=True)
class Schedule:
    block: int  # lanes per row (a power of two)
    num_warps: int
    looped: bool  # the row in chunks of BLOCK, or all of it at once
    rows: int = 1  # rows per program (a power of two)

    def note(self, n: int | str) -> str:
        if self.looped:
            return (
                f"looped: one row of {n} per program, in chunks of BLOCK={self.block}, {self.num_warps} warps"
            )
        rows = "one row" if self.rows == 1 else f"{self.rows} rows"
        warps = "1 warp" if self.num_warps == 1 else f"{self.num_warps} warps"
        return f"persistent: {rows} of {n} per program in BLOCK={self.block} lanes, {warps}"


def dense(plan: Schedule, values: int) -> Schedule:
    """``plan`` with more warps where the kernel computes more than DENSE_VALUES values per lane."""
    if values <= DENSE_VALUES or plan.looped:
        return plan
    return Schedule(
        plan.block,
        max(plan.num_warps, min(16, plan.rows * plan.block // (DENSE_LANES * 32))),
        looped=False,
        rows=plan.rows,
    )


def schedule(n: int, max_rows: int | None = None) -> Schedule:
    """For rows of (at most) ``n`` lanes, in a bucket of at most ``max_rows`` rows (None: unknown).

    A row that fits — padded to a power of two, at most MAX_BLOCK lanes — stays in registers
    (persistent: one read, one write). Rows narrower than TILE_LANES are taken several to a program,
    TILE_LANES // BLOCK of them (never more than the bucket's rows, rounded up to a power of two);
    wider rows take one program each. A row wider than MAX_BLOCK is walked in chunks of LOOP_BLOCK
    (looped: each reduction and the output take one pass over the row), one row per program.

    From sweeps on the H200. Rows per program (tools/triton_tiles.py, at 71eed81): 1024-lane tiles run
    262144 rotary rows of 64 in 24 µs against 163 µs at one row per program, and 65536 rows of 256
    in 30 µs against 45 µs; larger tiles are slower (a 1024-wide softmax: 61 µs at one row, 79 µs
    at four). num_warps (tools/triton_schedule.py, at 093551b): persistent, about 32 lanes of the
    program's tile per thread, 1 to 8 warps (a 2880-wide row: BLOCK 4096 and 4 warps reach 97% of a
    device-to-device copy's bandwidth at 65536 rows, against 79% with 16 warps); looped, chunks of
    8192 lanes with 16 warps (the best of 2048/4096/8192 x 4/8/16 for rows of 16384 and 32000)."""
    if n <= MAX_BLOCK:
        block = next_pow2(n)
        rows = max(1, TILE_LANES // block)
        if max_rows is not None:
            rows = min(rows, next_pow2(max_rows))
        return Schedule(block, max(1, min(8, rows * block // 1024)), looped=False, rows=rows)
    return Schedule(LOOP_BLOCK, 16, looped=True)
