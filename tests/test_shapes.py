from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from thunder_aot.errors import ExportError
from thunder_aot.ir import DimRange, SymDim
from thunder_aot.shapes import MAX_ELEMENTS, contains, dispatch_order, format_bucket, parse_shapes


def test_exact_dynamic_named_and_dtypes():
    (b,) = parse_shapes("1x[S=1..2048]x2880:bf16, 1x[S]x2880:fp16")
    assert b.inputs[0].shape == (1, SymDim("S"), 2880) and b.inputs[0].dtype == "bfloat16"
    assert b.inputs[1].dtype == "float16"
    assert b.dims == (DimRange("S", 1, 2048),)
    (e,) = parse_shapes("1x15x2880")
    assert e.is_exact and e.inputs[0].dtype == "float32"


def test_several_buckets_and_repeated_flags_dispatch_most_specific_first():
    buckets = parse_shapes(["1x[1..2048]x2880:bf16", "1x15x2880:bf16; 1x568x2880:bf16"])
    assert [format_bucket(buckets[i]) for i in dispatch_order(buckets)] == [
        "1x15x2880:bfloat16",
        "1x568x2880:bfloat16",
        "1x[s0=1..2048]x2880:bfloat16",
    ]


@pytest.mark.parametrize(
    "spec,message",
    [
        ("1xx2", "expected a size before 'x'"),
        ("1x2x", "expected a size after 'x'"),
        ("1x[5..2]", "empty range"),
        ("1x[3..3]", "holds one size"),
        ("1x2:bf17", "unknown dtype 'bf17'"),
        ("1x[T]", "refers to no dynamic dim"),
        ("1x[S=1..4], 1x[S=1..4]", "defined twice"),
        ("", "empty bucket"),
        ("1x15; 1x15", "duplicate bucket"),
        ("1x[1..10]; 1x[5..20]", "partly overlap"),
        ("1x[a..3]", "cannot read size"),
        ("1y2", "cannot read size"),
        ("1x[None=1..4]", "'None' cannot name a dynamic dim"),
        ("1x[if=1..4]", "'if' cannot name a dynamic dim"),
        ("1x[lambda=1..4]", "'lambda' cannot name a dynamic dim"),
        ("1x[program=1..4]", "'program' cannot name a dynamic dim"),  # a local of the generated forward
        ("1x[N=1..4]", "'N' cannot name a dynamic dim: the generated code binds that name itself"),
        ("1x[len=1..4]", "'len' cannot name a dynamic dim: it is a Python builtin"),
        ("1x[id=1..4]", "'id' cannot name a dynamic dim: it is a Python builtin"),
        ("1x[_s=1..4]", "'_s' cannot name a dynamic dim: names starting with _ are the generated code's own"),
        ("1x99999999999999999999999", "is too large; expected at most 2147483647"),
        ("1x[1..1000000000000]", "size 1000000000000 is too large"),
        ("[1..100000]x100000", "up to 10000000000 elements at the bucket's largest sizes; expected at most"),
        ("1x[1..8]:i64[9..2]", r"empty value range \[9..2\]"),
        (
            "1x[1..8]:bf16[0..3]",
            "a value range .* is for integer inputs; expected an integer dtype, not bfloat16",
        ),
        ("1x[1..8]:bool[0..1]", "expected an integer dtype, not bool"),
        ("1x[1..8]:i8[0..300]", r"value range \[0..300\] exceeds int8 \(-128..127\)"),
        ("1x[1..8]:i64[0..x]", "unknown dtype"),
    ],
)
def test_bad_specs_name_what_was_expected(spec, message):
    with pytest.raises(ExportError, match=message):
        parse_shapes(spec)


def test_tied_dims_are_not_contained_in_untied_ones_the_other_way():
    (tied,) = parse_shapes("[S=1..8]x[S]")
    (free,) = parse_shapes("[1..8]x[1..8]")
    assert contains(free, tied) and not contains(tied, free)


dims = st.one_of(
    st.integers(1, 4096).map(str),
    st.tuples(st.integers(1, 100), st.integers(1, 100))
    .filter(lambda t: t[0] < t[1])
    .map(lambda t: f"[{t[0]}..{t[1]}]"),
)


def _largest(dim: str) -> int:
    return int(dim.strip("]").split("..")[-1])


# within the grammar's bounds (test_bad_specs_name_what_was_expected covers past them)
specs = (
    st.lists(dims, min_size=1, max_size=4)
    .filter(lambda ds: math.prod(map(_largest, ds)) <= MAX_ELEMENTS)
    .map("x".join)
)
dtypes = st.sampled_from(
    ["bf16", "fp16", "fp32", "int64", "bool", "i32[0..511]", "int64[-3..-1]", "u8[7..7]"]
)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(specs, dtypes), min_size=1, max_size=3))
def test_format_round_trips(inputs):
    text = ", ".join(f"{s}:{d}" for s, d in inputs)
    (bucket,) = parse_shapes(text)
    assert parse_shapes(format_bucket(bucket)) == [bucket]


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="x0123456789[].,;:=Sbf", max_size=24))
def test_random_text_parses_or_raises_export_error(text):
    try:
        buckets = parse_shapes(text)
    except ExportError as e:
        assert "\n" not in str(e)
    else:
        assert buckets


def test_an_integer_inputs_values_are_sampled_from_its_range_and_kept_by_bucket_splits():
    """Token ids for an embedding: export traces and verifies with ids inside the vocabulary (else
    -100..99); the range survives the exporter's splits of a bucket at its edges."""
    import torch

    from thunder_aot.frontend.buckets import sub_bucket
    from thunder_aot.verify import bucket_inputs

    (bucket,) = parse_shapes("1x[S=1..64]:i64[5..9], 1x[S]x8, 64:i32")
    assert bucket.values == ((5, 9), None, None)
    assert format_bucket(bucket) == "1x[S=1..64]:int64[5..9], 1x[S]x8:float32, 64:int32"
    generator = torch.Generator().manual_seed(0)
    for part in (bucket, sub_bucket(bucket, "S", 1, 1), sub_bucket(bucket, "S", 2, 64)):
        for _, (ids, _x, other) in bucket_inputs(part, "cpu", generator):
            assert ids.dtype == torch.int64 and 5 <= ids.min() and ids.max() <= 9
            assert set(ids.unique().tolist()) == set(range(5, 10)) or ids.numel() < 20
            assert other.min() < 0  # no range: -100..99
    (plain,) = parse_shapes("1x[S=1..64]:i64")
    assert plain.values == () and plain == parse_shapes(format_bucket(plain))[0]


def test_verification_samples_both_edges_and_a_size_strictly_inside():
    import torch

    from thunder_aot.verify import sample_envs

    (bucket,) = parse_shapes("1x[s0=1..64]x8:bf16")
    for seed in range(200):  # an inside size equal to an edge would silently drop a check
        envs = sample_envs(bucket, torch.Generator().manual_seed(seed))
        assert [e["s0"] for e in envs[:2]] == [1, 64] and len(envs) == 3 and 1 < envs[2]["s0"] < 64
    (narrow,) = parse_shapes("[s0=3..4]x8")
    assert [e["s0"] for e in sample_envs(narrow, torch.Generator().manual_seed(0))] == [3, 4]
