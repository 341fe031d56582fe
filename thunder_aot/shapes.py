"""The ``--shapes`` grammar: which input shapes and dtypes each bucket covers.

::

    spec    := bucket (";" bucket)*           several buckets
    bucket  := input ("," input)*             one entry per tensor argument of forward()
    input   := dim ("x" dim)* [":" dtype [values]]  dtype defaults to fp32
    values  := "[" INT ".." INT "]"          an integer input's values (token ids: [0..VOCAB-1]);
                                              export samples them from -100..99 otherwise
    dim     := INT                            an exact size
             | "[" [NAME "="] INT ".." INT "]"  a dynamic size, every integer in the range
             | "[" NAME "]"                   the same size as the dynamic dim NAME
                                              defined earlier in the bucket

Examples: ``1x15x2880:bf16``, ``1x[1..2048]x2880:bf16``,
``1x[S=1..2048]x2880:bf16, 1x[S]x2880:bf16`` (two inputs sharing one dynamic size),
``1x15x2880:bf16; 1x[1..2048]x2880:bf16`` (two buckets), ``1x[1..64]:i64[0..31999]`` (token ids of
a 32000-word vocabulary). ``--shapes`` may also be repeated.

Buckets must not partly overlap: two buckets are disjoint, or one lies strictly inside the
other. Dispatch tries the most specific bucket first, so an exact shape inside a dynamic range is
a specialisation of it.
"""

from __future__ import annotations

import builtins
import keyword
import math
import re
from collections.abc import Iterable

from thunder_aot.errors import ExportError
from thunder_aot.ir import Bucket, Dim, DimRange, SymDim, TensorSpec

DTYPE_ALIASES: dict[str, str] = {
    "bf16": "bfloat16",
    "bfloat16": "bfloat16",
    "fp16": "float16",
    "f16": "float16",
    "half": "float16",
    "float16": "float16",
    "fp32": "float32",
    "f32": "float32",
    "float": "float32",
    "float32": "float32",
    "fp64": "float64",
    "f64": "float64",
    "double": "float64",
    "float64": "float64",
    "i64": "int64",
    "int64": "int64",
    "long": "int64",
    "i32": "int32",
    "int32": "int32",
    "int": "int32",
    "i16": "int16",
    "int16": "int16",
    "i8": "int8",
    "int8": "int8",
    "u8": "uint8",
    "uint8": "uint8",
    "bool": "bool",
}

_INT = r"\d+"
_NAME = r"[A-Za-z_][A-Za-z_0-9]*"
_RANGE = re.compile(rf"^\[\s*(?:({_NAME})\s*=\s*)?({_INT})\s*\.\.\s*({_INT})\s*\]$")
_REF = re.compile(rf"^\[\s*({_NAME})\s*\]$")
_EXACT = re.compile(rf"^{_INT}$")
_DIM_TOKEN = re.compile(r"\[[^\]]*\]|[^x\[\]]+")


#: the largest size a dim may have (int32: what kernels index with, and far past any model's sizes)
MAX_SIZE = 2**31 - 1
#: the most elements one input may have at its bucket's largest sizes: export traces and verifies
#: the module on CPU tensors of those sizes
MAX_ELEMENTS = 2**31


def _size(text: str, here: str) -> int:
    size = int(text) if len(text) <= 12 else MAX_SIZE + 1
    if size > MAX_SIZE:
        raise ExportError(
            f"{here}: size {text[:20]}{'...' if len(text) > 20 else ''} is too large; "
            f"expected at most {MAX_SIZE}"
        )
    return size


def _dim_name(name: str, here: str) -> str:
    """``name`` where it can name a dynamic dim (a local of the generated forward), else one line
    saying why it cannot."""
    if keyword.iskeyword(name) or keyword.issoftkeyword(name):
        why = "it is a Python keyword"
    elif name in dir(builtins):
        why = "it is a Python builtin, which the generated code may call"
    elif name in RESERVED_DIM_NAMES:
        why = "the generated code binds that name itself (" + ", ".join(sorted(GENERATED_NAMES)) + ")"
    elif name.startswith("_"):
        why = "names starting with _ are the generated code's own"
    else:
        return name
    raise ExportError(f"{here}: {name!r} cannot name a dynamic dim: {why}; name it otherwise, e.g. S or seq")


#: names the generated code binds itself, besides Python's builtins (a dim of that name would
#: shadow them)
GENERATED_NAMES = frozenset(
    {
        "torch",
        "triton",
        "tl",
        "fd",
        "program",
        "fast",
        "state",
        "device",
        "error",
        "forward",
        "shape",
        "dtype",
        *("row", "rows", "cols", "mask", "lanes", "in_rows", "start", "N", "BLOCK"),
    }
)
RESERVED_DIM_NAMES = frozenset(set(dir(builtins)) | GENERATED_NAMES)


def parse_dtype(text: str) -> str:
    key = text.strip().removeprefix("torch.").lower()
    if key not in DTYPE_ALIASES:
        known = ", ".join(sorted(DTYPE_ALIASES))
        raise ExportError(f"unknown dtype {text.strip()!r}; expected one of: {known}")
    return DTYPE_ALIASES[key]


def _split_dims(text: str, where: str) -> list[str]:
    tokens: list[str] = []
    pos = 0
    expect_dim = True
    for m in re.finditer(r"\[[^\]]*\]|x|[^x\[]+", text):
        if m.start() != pos:
            raise ExportError(f"{where}: cannot read {text[pos:]!r}")
        tok = m.group(0).strip()
        pos = m.end()
        if tok == "x":
            if expect_dim:
                raise ExportError(f"{where}: expected a size before 'x' in {text!r}")
            expect_dim = True
            continue
        if not expect_dim:
            raise ExportError(f"{where}: expected 'x' between sizes in {text!r}")
        tokens.append(tok)
        expect_dim = False
    if pos != len(text) or expect_dim:
        raise ExportError(
            f"{where}: expected a size after 'x' in {text!r}" if tokens else f"{where}: empty shape"
        )
    return tokens


def _parse_bucket(text: str, where: str) -> Bucket:
    ranges: dict[str, DimRange] = {}
    order: list[str] = []
    specs: list[TensorSpec] = []
    values: list[tuple[int, int] | None] = []
    anon = 0
    entries = [e.strip() for e in text.split(",")]
    for i, entry in enumerate(entries):
        here = f"{where}, input {i}"
        if not entry:
            raise ExportError(f"{here}: empty input spec in {text!r}")
        shape_text, sep, dtype_text = entry.partition(":")
        dtype_text, value_range = _value_range(dtype_text, here)
        dtype = parse_dtype(dtype_text) if sep else "float32"
        if value_range is not None:
            _check_value_range(value_range, dtype, here)
        values.append(value_range)
        dims: list[Dim] = []
        for tok in _split_dims(shape_text.replace(" ", ""), here):
            if _EXACT.match(tok):
                dims.append(_size(tok, here))
            elif m := _RANGE.match(tok):
                name, lo, hi = m.group(1), _size(m.group(2), here), _size(m.group(3), here)
                if name is not None:
                    name = _dim_name(name, here)
                else:
                    while f"s{anon}" in ranges or f"s{anon}" in text:
                        anon += 1
                    name = f"s{anon}"
                    anon += 1
                if name in ranges:
                    raise ExportError(f"{here}: dynamic dim {name!r} defined twice; refer to it as [{name}]")
                if lo > hi:
                    raise ExportError(f"{here}: empty range [{lo}..{hi}]; expected lo <= hi")
                if lo == hi:
                    raise ExportError(f"{here}: range [{lo}..{hi}] holds one size; write it as {lo}")
                ranges[name] = DimRange(name, lo, hi)
                order.append(name)
                dims.append(SymDim(name))
            elif m := _REF.match(tok):
                name = m.group(1)
                if name not in ranges:
                    raise ExportError(
                        f"{here}: [{name}] refers to no dynamic dim defined before it; "
                        f"expected [{name}=LO..HI] first"
                    )
                dims.append(SymDim(name))
            else:
                raise ExportError(
                    f"{here}: cannot read size {tok!r}; expected N, [LO..HI], [NAME=LO..HI] or [NAME]"
                )
        spec = TensorSpec(tuple(dims), dtype)
        elements = math.prod(d if isinstance(d, int) else ranges[d.name].hi for d in dims)
        if elements > MAX_ELEMENTS:
            raise ExportError(
                f"{here}: up to {elements} elements at the bucket's largest sizes; "
                f"expected at most {MAX_ELEMENTS} (export traces and verifies the module at those sizes)"
            )
        specs.append(spec)
    return Bucket(tuple(specs), tuple(ranges[n] for n in order), tuple(values) if any(values) else ())


_VALUES = re.compile(r"^(.*?)\[\s*(-?\d+)\s*\.\.\s*(-?\d+)\s*\]\s*$")


def _value_range(dtype_text: str, where: str) -> tuple[str, tuple[int, int] | None]:
    """``i64[0..511]`` -> (``i64``, (0, 511)); a dtype without a range -> (it, None)."""
    m = _VALUES.match(dtype_text)
    if m is None:
        return dtype_text, None
    lo, hi = int(m.group(2)), int(m.group(3))
    if lo > hi:
        raise ExportError(f"{where}: empty value range [{lo}..{hi}]; expected lo <= hi")
    return m.group(1), (lo, hi)


def _check_value_range(value_range: tuple[int, int], dtype: str, where: str) -> None:
    import torch

    kind = getattr(torch, dtype)
    if kind.is_floating_point or kind == torch.bool:
        raise ExportError(
            f"{where}: a value range [LO..HI] is for integer inputs; expected an integer dtype, not {dtype}"
        )
    info = torch.iinfo(kind)
    if value_range[0] < info.min or value_range[1] > info.max:
        raise ExportError(
            f"{where}: value range [{value_range[0]}..{value_range[1]}] "
            f"exceeds {dtype} ({info.min}..{info.max})"
        )


def parse_shapes(texts: str | Iterable[str]) -> list[Bucket]:
    """Parse one or more ``--shapes`` values into buckets (in the order given) and check overlaps."""
    if isinstance(texts, str):
        texts = [texts]
    buckets: list[Bucket] = []
    for text in texts:
        for part in text.split(";"):
            if not part.strip():
                raise ExportError(f"empty bucket in --shapes {text!r}")
            buckets.append(_parse_bucket(part.strip(), f"bucket {format_bucket_spec_text(part)}"))
    if not buckets:
        raise ExportError("no buckets given; expected --shapes like 1x[1..2048]x2880:bf16")
    check_overlaps(buckets)
    return buckets


def format_bucket_spec_text(part: str) -> str:
    return repr(part.strip())


def format_dim(dim: Dim, ranges: dict[str, DimRange], seen: set[str]) -> str:
    if isinstance(dim, int):
        return str(dim)
    r = ranges[dim.name]
    if dim.name in seen:
        return f"[{dim.name}]"
    seen.add(dim.name)
    return f"[{dim.name}={r.lo}..{r.hi}]"


def format_bucket(bucket: Bucket) -> str:
    """The canonical spec text of a bucket (parses back to the same bucket)."""
    ranges = {r.name: r for r in bucket.dims}
    seen: set[str] = set()
    parts = []
    for i, spec in enumerate(bucket.inputs):
        dims = "x".join(format_dim(d, ranges, seen) for d in spec.shape)
        value_range = bucket.value_range(i)
        parts.append(
            f"{dims}:{spec.dtype}" + (f"[{value_range[0]}..{value_range[1]}]" if value_range else "")
        )
    return ", ".join(parts)


def _interval(dim: Dim, ranges: dict[str, DimRange]) -> tuple[int, int]:
    if isinstance(dim, int):
        return dim, dim
    r = ranges[dim.name]
    return r.lo, r.hi


def _comparable(a: Bucket, b: Bucket) -> bool:
    return len(a.inputs) == len(b.inputs) and all(
        x.dtype == y.dtype and len(x.shape) == len(y.shape) for x, y in zip(a.inputs, b.inputs)
    )


def _positions(bucket: Bucket) -> list[tuple[int, int, Dim]]:
    return [(i, j, d) for i, spec in enumerate(bucket.inputs) for j, d in enumerate(spec.shape)]


def intersects(a: Bucket, b: Bucket) -> bool:
    if not _comparable(a, b):
        return False
    ra, rb = {r.name: r for r in a.dims}, {r.name: r for r in b.dims}
    for (_, _, da), (_, _, db) in zip(_positions(a), _positions(b)):
        lo_a, hi_a = _interval(da, ra)
        lo_b, hi_b = _interval(db, rb)
        if hi_a < lo_b or hi_b < lo_a:
            return False
    return True


def contains(outer: Bucket, inner: Bucket) -> bool:
    """Every shape of ``inner`` is a shape of ``outer`` (assuming they are comparable)."""
    if not _comparable(outer, inner):
        return False
    ro, ri = {r.name: r for r in outer.dims}, {r.name: r for r in inner.dims}
    tied: dict[str, Dim] = {}
    for (_, _, do), (_, _, di) in zip(_positions(outer), _positions(inner)):
        lo_o, hi_o = _interval(do, ro)
        lo_i, hi_i = _interval(di, ri)
        if not (lo_o <= lo_i and hi_i <= hi_o):
            return False
        if isinstance(do, SymDim):
            if do.name in tied and tied[do.name] != di:
                return False  # outer ties two sizes that inner lets differ
            tied[do.name] = di
        elif do != di:
            return False
    return True


def check_overlaps(buckets: list[Bucket]) -> None:
    for i, a in enumerate(buckets):
        for b in buckets[i + 1 :]:
            if not intersects(a, b):
                continue
            if contains(a, b) and contains(b, a):
                raise ExportError(f"duplicate bucket {format_bucket(a)}; give each bucket once")
            if contains(a, b) or contains(b, a):
                continue
            raise ExportError(
                f"buckets {format_bucket(a)} and {format_bucket(b)} partly overlap; "
                "expected disjoint buckets, or one strictly inside the other"
            )


def dispatch_order(buckets: list[Bucket]) -> list[int]:
    """Indices of ``buckets`` most specific first (fewest shapes), stable for equal counts."""
    return sorted(range(len(buckets)), key=lambda i: buckets[i].size_count())


def env_inside(outer: Bucket, inner: Bucket) -> dict[str, int] | None:
    """The sizes of ``outer``'s dynamic dims at which it has the exact bucket ``inner``'s shapes
    (None when ``inner`` is not inside ``outer``)."""
    env: dict[str, int] = {}
    for o, i in zip(outer.inputs, inner.inputs):
        if len(o.shape) != len(i.shape) or o.dtype != i.dtype:
            return None
        for d, size in zip(o.shape, i.shape):
            if isinstance(d, SymDim):
                value = d.solve(size)
                if value is None or env.setdefault(d.name, value) != value:
                    return None
            elif d != size:
                return None
    if not all(r.lo <= env[r.name] <= r.hi for r in outer.dims):
        return None
    return env
