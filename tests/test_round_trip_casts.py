"""The pass that keeps a region's intermediates in the dtype they were computed in
(passes.drop_round_trip_casts): a value rounded to a narrower float and widened back is read as it
was; the rounded value stays where something else reads it; other casts stay."""

from __future__ import annotations

from thunder_aot.ir import BucketProgram, Const, DType, PrimOp, Ref, Region, TensorSpec, Value
from thunder_aot.passes.drop_round_trip_casts import drop_round_trip_casts
from thunder_aot.shapes import parse_shapes


def _v(name: str, dtype: str) -> Value:
    return Value(name, TensorSpec((4, 8), dtype))


def _cast(out: Value, source: str) -> PrimOp:
    return PrimOp("convert_element_type", (out,), (Ref(source), DType(out.spec.dtype)))


def _program(ops: tuple[PrimOp, ...], outputs: tuple[Value, ...]) -> BucketProgram:
    x = _v("x", "bfloat16")
    region = Region("fusion0", (x,), outputs, ops)
    return BucketProgram(0, parse_shapes("4x8:bf16")[0], (x,), (region,), tuple(o.name for o in outputs))


def test_a_round_trip_inside_a_region_reads_the_value_before_the_rounding():
    ops = (
        _cast(_v("a", "float32"), "x"),
        PrimOp("tanh", (_v("b", "float32"),), (Ref("a"),)),
        _cast(_v("c", "bfloat16"), "b"),  # rounded ...
        _cast(_v("d", "float32"), "c"),  # ... and widened back: reads b
        PrimOp("add", (_v("e", "float32"),), (Const(1.0), Ref("d"))),
        _cast(_v("f", "bfloat16"), "e"),
    )
    (region,) = drop_round_trip_casts(_program(ops, (_v("f", "bfloat16"),))).steps
    assert [op.outputs[0].name for op in region.ops] == ["a", "b", "e", "f"]
    assert region.ops[2].args == (Const(1.0), Ref("b"))


def test_the_rounded_value_stays_where_it_is_read_and_a_widening_to_another_dtype_stays():
    ops = (
        _cast(_v("a", "float32"), "x"),
        _cast(_v("c", "bfloat16"), "a"),
        _cast(_v("d", "float32"), "c"),
        _cast(_v("g", "float64"), "c"),  # widened to another dtype than a's: a real rounding
        PrimOp("mul", (_v("e", "float32"),), (Ref("d"), Ref("d"))),
    )
    outputs = (_v("c", "bfloat16"), _v("e", "float32"), _v("g", "float64"))
    (region,) = drop_round_trip_casts(_program(ops, outputs)).steps
    names = [op.outputs[0].name for op in region.ops]
    assert names == ["a", "c", "g", "e"]  # d is read by nobody now
    assert region.ops[-1].args == (Ref("a"), Ref("a"))
    assert region.ops[2].args == (Ref("c"), DType("float64"))


def test_a_program_without_round_trips_is_the_same_program():
    ops = (_cast(_v("a", "float32"), "x"), _cast(_v("c", "bfloat16"), "a"))
    program = _program(ops, (_v("c", "bfloat16"),))
    assert drop_round_trip_casts(program) == program
