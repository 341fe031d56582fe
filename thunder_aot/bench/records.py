"""The benchmark's model: shape points, measurements and the report they make."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass, field

from thunder_aot.ir import Bucket, dim_value

Call = Callable[[], object]


@dataclass(frozen=True)
class Point:
    """One concrete input shape set to time: its bucket and the sizes of the bucket's dims."""

    bucket: Bucket
    env: tuple[tuple[str, int], ...]

    @property
    def shapes(self) -> list[tuple[int, ...]]:
        env = dict(self.env)
        return [tuple(dim_value(d, env) for d in s.shape) for s in self.bucket.inputs]

    @property
    def rows(self) -> int:
        """The x axis: rows of the first input (its elements over its last dim), e.g. tokens."""
        shape = self.shapes[0]
        n = 1
        for s in shape[:-1]:
            n *= s
        return n

    @property
    def label(self) -> str:
        return ", ".join("x".join(map(str, s)) for s in self.shapes)


@dataclass
class Measurement:
    system: str
    point: str
    rows: int
    us_per_call: float
    device_us: float | None = None
    gb_per_s: float | None = None


@dataclass
class Report:
    title: str
    command: str
    device: str
    versions: dict[str, str]
    systems: list[str]
    points: list[str]
    measurements: list[Measurement] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)
    copy_gb_per_s: float | None = None

    def value(self, system: str, point: str) -> Measurement | None:
        return next((m for m in self.measurements if m.system == system and m.point == point), None)


#: what ``--sizes`` gives: None (the defaults), sizes for a bucket's one dynamic dim, or sizes per
#: dim name (``B=1,8;S=1,128``: every combination)
Sizes = list[int] | dict[str, list[int]] | None


def points_for(bucket: Bucket, sizes: Sizes) -> list[Point]:
    """Exact buckets: their shape. One dynamic dim: ``sizes`` inside its range (default: the edges
    and every power of two between; named sizes: those of its name). Several dims: with sizes per
    name, every combination inside the ranges (a dim not named: its edges); else all at their lower,
    then upper edge."""
    if bucket.is_exact:
        return [Point(bucket, ())]
    if isinstance(sizes, dict):
        grid = [
            [s for s in sizes[r.name] if r.lo <= s <= r.hi] if r.name in sizes else sorted({r.lo, r.hi})
            for r in bucket.dims
        ]
        names = [r.name for r in bucket.dims]
        return [Point(bucket, tuple(zip(names, combo))) for combo in itertools.product(*grid)]
    if len(bucket.dims) == 1:
        (r,) = bucket.dims
        if sizes is None:
            sizes = sorted({r.lo, r.hi} | {2**k for k in range(0, r.hi.bit_length()) if r.lo <= 2**k <= r.hi})
        return [Point(bucket, ((r.name, s),)) for s in sizes if r.lo <= s <= r.hi]
    return [Point(bucket, tuple((r.name, getattr(r, edge)) for r in bucket.dims)) for edge in ("lo", "hi")]
