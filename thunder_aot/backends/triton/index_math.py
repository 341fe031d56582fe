"""Index arithmetic of the index kernels, as text: masks as sets of conditions (split, simplified,
compared: which implies which, which no lane satisfies), and the runs of dims a reshape maps onto
each other. Pure functions on Triton index expressions and shapes; no kernel state.
"""

from __future__ import annotations

import re

#: a mask: its conditions (each a comparison, without parentheses around it)
Mask = frozenset[str]


def _split_top(text: str, separator: str) -> list[str]:
    """``text`` split at each ``separator`` outside parentheses."""
    parts, depth, start, k = [], 0, 0, 0
    while k < len(text):
        c = text[k]
        depth += (c == "(") - (c == ")")
        if depth == 0 and text.startswith(separator, k):
            parts.append(text[start:k])
            k = start = k + len(separator)
            continue
        k += 1
    return [*parts, text[start:]]


def _unwrapped(text: str) -> str:
    """``text`` without the parentheses around the whole of it."""
    text = text.strip()
    while text.startswith("(") and _closing(text) == len(text) - 1:
        text = text[1:-1].strip()
    return text


def _closing(text: str) -> int:
    """The position of the parenthesis that closes the one ``text`` opens with."""
    depth = 0
    for k, c in enumerate(text):
        depth += (c == "(") - (c == ")")
        if depth == 0:
            return k
    return -1


def conjuncts(condition: str) -> list[str]:
    """The conditions a conjunction (``a & (b) & (c & d)``) is made of."""
    parts = _split_top(_unwrapped(condition), " & ")
    if len(parts) == 1:
        return parts
    return [c for part in parts for c in conjuncts(part)]


def _bound(condition: str) -> tuple[str, str, str, int] | None:
    """``lhs < rhs`` or ``lhs >= rhs`` as (lhs, operator, rhs's symbolic terms, rhs's integer
    terms summed), else None."""
    for operator in (" < ", " >= "):
        sides = _split_top(condition, operator)
        if len(sides) == 2:
            symbolic, constant = [], 0
            for term in _terms(sides[1]):
                if re.fullmatch(r"-?\d+", term):
                    constant += int(term)
                else:
                    symbolic.append(term)
            return _unwrapped(sides[0]), operator.strip(), " + ".join(symbolic), constant
    return None


def _terms(text: str) -> list[str]:
    """The terms of a sum (``(S + 1) + 32``: S, 1, 32)."""
    parts = _split_top(_unwrapped(text), " + ")
    return [_unwrapped(parts[0])] if len(parts) == 1 else [t for part in parts for t in _terms(part)]


#: the program's lane indices (never negative)
_LANE_AXES = ("cols", "tail", "row", "offs")


def _lane_bound(condition: str) -> tuple[str, str, str, int] | None:
    """:func:`_bound`, with a lane index past a row (``(W + tail) < W + c``) compared as the lane
    itself (``tail < c``)."""
    bound = _bound(condition)
    if bound is None:
        return None
    lhs, operator, symbolic, constant = bound
    terms = _terms(lhs)
    lanes = [t for t in terms if t in _LANE_AXES]
    if len(lanes) == 1 and len(terms) > 1:
        rest = [t for t in terms if t != lanes[0]]
        numbers = [int(t) for t in rest if re.fullmatch(r"-?\d+", t)]
        if " + ".join(t for t in rest if not re.fullmatch(r"-?\d+", t)) == symbolic:
            return lanes[0], operator, "", constant - sum(numbers)
    return bound


def empty(atoms: set[str]) -> bool:
    """Whether no lane satisfies every condition of ``atoms``: a lane index below 0, or below a
    bound and at or above a bound no smaller (``cols < S`` and ``cols >= S``)."""
    bounds = [b for b in map(_lane_bound, atoms) if b is not None]
    if any(lhs in _LANE_AXES and op == "<" and not sym and c <= 0 for lhs, op, sym, c in bounds):
        return True
    return any(
        x[0] == y[0] and x[2] == y[2] and x[1] == "<" and y[1] == ">=" and y[3] >= x[3]
        for x in bounds
        for y in bounds
    )


def _implied(a: str, b: str) -> bool:
    """Condition ``a`` implies ``b`` (the same, or the same bound, tighter)."""
    if a == b:
        return True
    x, y = _bound(a), _bound(b)
    if x is None or y is None or x[:3] != y[:3]:
        return False
    return x[3] <= y[3] if x[1] == "<" else x[3] >= y[3]


def implies(have: Mask, need: Mask) -> bool:
    """Where every condition of ``have`` holds, every condition of ``need`` holds."""
    return all(any(_implied(a, b) for a in have) for b in need)


def simplest(atoms: set[str]) -> Mask:
    """``atoms`` less each condition another of them implies (of two equivalent, the first in order)."""

    def dropped(b: str) -> bool:
        return any(a != b and _implied(a, b) and (not _implied(b, a) or a < b) for a in atoms)

    return frozenset(b for b in atoms if not dropped(b))


def gathered(text: str) -> bool:
    """``text`` reads a gather's run-time index (``j<k>``)."""
    return re.search(r"\bj\d+\b", text) is not None


def is_name(text: str) -> bool:
    """``text`` is one name (a value, mask or index of the kernel): nothing to compute."""
    return text.isidentifier()


def is_literal(text: str) -> bool:
    """``text`` is a number or a bool literal."""
    try:
        float(text)
    except ValueError:
        return text in ("True", "False")
    return True


def _product_key(dims) -> tuple[int, tuple]:
    """A product of sizes as (its static factor, its dynamic factors in order): two products are
    equal where both are (dynamic sizes compared as symbols)."""
    static, dynamic = 1, []
    for d in dims:
        if isinstance(d, int):
            static *= d
        else:
            dynamic.append((d.name, d.coeff, d.offset))
    return static, tuple(sorted(dynamic))


def reshape_groups(in_shape: tuple, out_shape: tuple) -> list[tuple[list[int], list[int]]] | None:
    """The runs of consecutive input and output dims a reshape maps onto each other (equal
    products: ``[1, S, 256] -> [1, S, 4, 64]`` is (0|0), (1|1), (2|2, 3)); size-1 dims join the
    run beside them. None where the runs cannot be told apart from the shapes."""
    groups: list[tuple[list[int], list[int]]] = []
    i = j = 0
    while i < len(in_shape) or j < len(out_shape):
        dims_in, dims_out = [], []
        while True:
            key_in, key_out = _product_key(in_shape[k] for k in dims_in), _product_key(
                out_shape[k] for k in dims_out
            )
            if dims_in and dims_out and key_in == key_out:
                break
            sym_in, sym_out = set(key_in[1]), set(key_out[1])
            grow_in = (
                not dims_in or sym_in < sym_out or (sym_in == sym_out and key_in[0] < key_out[0])
            ) and i < len(in_shape)
            grow_out = (
                not dims_out or sym_out < sym_in or (sym_in == sym_out and key_out[0] < key_in[0])
            ) and j < len(out_shape)
            if grow_in:
                dims_in.append(i)
                i += 1
            elif grow_out:
                dims_out.append(j)
                j += 1
            else:
                return None
        while i < len(in_shape) and in_shape[i] == 1:  # trailing size-1 dims join this run
            dims_in.append(i)
            i += 1
        while j < len(out_shape) and out_shape[j] == 1:
            dims_out.append(j)
            j += 1
        groups.append((dims_in, dims_out))
    return groups
