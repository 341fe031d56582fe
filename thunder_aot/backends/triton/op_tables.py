"""The translation tables the Triton kernels share: torch dtypes as Triton types, prims as Triton
expression templates, reductions with their identities, and the prims each kernel class groups.

Also :class:`Unsupported`, which a kernel raises for a region outside what it (or these tables)
covers: the backend then renders the region as torch calls, so correctness never depends on
coverage. The tables of lowering functions (``ROW_OPS``, ``POINTWISE_OPS``, ``ROUTING_OPS``) stay
with the programs whose methods their rows call.
"""

from __future__ import annotations

import re

from thunder_aot.ir import Const


class Unsupported(Exception):
    """A region (or an op of it) no kernel here writes; the backend renders it as torch calls."""


#: torch dtype name -> its Triton type (float8 and uint8 have none: their regions run as torch calls)
TL_DTYPES = {
    "bool": "tl.int1",
    "int8": "tl.int8",
    "int16": "tl.int16",
    "int32": "tl.int32",
    "int64": "tl.int64",
    "float16": "tl.float16",
    "bfloat16": "tl.bfloat16",
    "float32": "tl.float32",
    "float64": "tl.float64",
}

FLOAT_DTYPES = ("float16", "bfloat16", "float32", "float64")
#: the integer type a float's bits are read as (its sign bit is the integer's)
BITS = {"float16": "tl.int16", "bfloat16": "tl.int16", "float32": "tl.int32", "float64": "tl.int64"}

#: unary prim -> its Triton expression (``{}``: the operand)
UNARY = {
    "neg": "-({})",
    "exp": "tl.exp({})",
    "log": "tl.log({})",
    "sqrt": "tl.sqrt({})",
    "rsqrt": "tl.rsqrt({})",
    "reciprocal": "1.0 / ({})",
    "abs": "tl.abs({})",
    "floor": "tl.floor({})",
    "ceil": "tl.ceil({})",
    "erf": "tl.erf({})",
    "bitwise_not": "~({})",  # integers and bool (bool's is logical not, as torch's)
    "sin": "tl.sin({})",
    "cos": "tl.cos({})",
    "exp2": "tl.exp2({})",
    "log2": "tl.log2({})",
    "log10": "tl.log({}) * 0.4342944819032518",  # log10(e)
    # thunder_aot.runtime.triton's helpers (softplus decomposes into log1p; xIELU uses expm1; Triton's
    # core language has no tanh or round)
    "tanh": "math_tanh({})",
    "round": "math_round({})",
    "expm1": "math_expm1({})",
    "log1p": "math_log1p({})",
    "trunc": "math_trunc({})",
    "sign": "math_sign({})",
    "isfinite": '(tl.abs({}) < float("inf"))',
}
#: binary prim -> its Python operator
BINARY = {
    "add": "+",
    "sub": "-",
    "mul": "*",
    "bitwise_and": "&",
    "bitwise_or": "|",
    "bitwise_xor": "^",
}
#: comparison prim -> its Python operator
COMPARISONS = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}

#: reduction prim -> (the Triton reduction, its identity). amax and amin propagate NaN as torch's
#: do (runtime.triton.nan_max; ``tl.max`` would skip them)
REDUCE_IDENTITY = {
    "sum": ("tl.sum", "0.0"),
    "amax": ("nan_max", 'float("-inf")'),
    "amin": ("nan_min", 'float("inf")'),
}
#: how a reduction's partial results join: a chunk's into a row kernel's [BLOCK] accumulator (looped
#: schedule), a tail's into an index kernel's row
REDUCE_COMBINE = {
    "tl.sum": "{} + {}",
    "nan_max": "tl.maximum({}, {}, propagate_nan=tl.PropagateNan.ALL)",
    "nan_min": "tl.minimum({}, {}, propagate_nan=tl.PropagateNan.ALL)",
}

#: prims that only move elements: a flat index kernel of these alone is a copy (schedule.MOVE_WARPS)
MOVES = frozenset({"transpose", "reshape", "broadcast_in_dim", "squeeze", "slice", "cat", "shallow_copy"})

#: reductions (an index kernel's region with one is lowered in tiles of rows)
REDUCTIONS = frozenset({*REDUCE_IDENTITY, "var_mean"})

#: constant exponents of pow and how each is written (``{}``: the base, a name or literal)
POW_EXPONENTS = {
    0.5: "tl.sqrt({})",
    -0.5: "tl.rsqrt({})",
    1.0: "{}",
    2.0: "{0} * {0}",
    3.0: "{0} * {0} * {0}",  # GELU's tanh approximation (x ** 3)
    4.0: "({0} * {0}) * ({0} * {0})",
    -1.0: "1.0 / {}",
    -2.0: "1.0 / ({0} * {0})",
}


def pow_text(base: str, exponent) -> str:
    """``base ** exponent`` in kernel text for a constant exponent of :data:`POW_EXPONENTS`."""
    if (
        isinstance(exponent, Const)
        and isinstance(exponent.value, (int, float))
        and not isinstance(exponent.value, bool)
    ):
        template = POW_EXPONENTS.get(float(exponent.value))
        if template is not None:
            return template.format(base)
    raise Unsupported(f"pow with the exponent {exponent!r} (constants: {', '.join(map(str, POW_EXPONENTS))})")


def half_literal(text: str, dtype: str) -> str:
    """An arm of ``tl.where`` whose result is a 16-bit float: a number literal made a float32
    scalar and cast (Triton's interpreter cannot make a bfloat16 constant; on the GPU it folds)."""
    if dtype in ("float16", "bfloat16") and re.fullmatch(r"-?[0-9.e+-]+|float\(\S+\)", text):
        return f"tl.full([], {text}, tl.float32).to({TL_DTYPES[dtype]})"
    return text
