"""Calls that copy nothing, dropped: ``x.to(dtype)`` where ``x`` has that dtype (no device, no
``copy=True``), and ``x.contiguous()`` where ``x`` is contiguous whatever the inputs' layouts (made
by a ``contiguous`` call, by a kernel that writes what it allocated, or a reshape of one): the
readers read ``x``. Kept where the program returns the call's value.

After a model's layout changes between matmuls (``x.reshape(...).contiguous()`` after attention's
second matmul), and in transformers' grouped-mm experts (``input.to(weight.dtype)`` on a tensor of
that dtype already), these calls copy nothing but are calls on every forward.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from thunder_aot.ir import BucketProgram, Const, DType, Ref, Region, Step, TorchCall, renamed, value_specs
from thunder_aot.passes.base import Pass

TO = "torch.Tensor.to"
CONTIGUOUS = "torch.Tensor.contiguous"
#: views that keep a contiguous tensor contiguous
RESHAPES = frozenset({"torch.reshape", "torch.Tensor.reshape", "torch.Tensor.view"})


def _kwargs(call: TorchCall) -> dict:
    return dict(call.kwargs)


def _is_no_op_to(call: TorchCall, specs: dict) -> bool:
    """``x.to(dtype)`` / ``x.to(dtype=..., copy=False)`` with ``x`` of that dtype already."""
    if call.target != TO or len(call.outputs) != 1 or not call.args or not isinstance(call.args[0], Ref):
        return False
    kwargs = _kwargs(call)
    if set(kwargs) - {"dtype", "copy", "non_blocking"} or kwargs.get("copy", Const(False)) != Const(False):
        return False
    dtypes = [a for a in (*call.args[1:], kwargs.get("dtype")) if a is not None]
    if len(dtypes) != 1 or not isinstance(dtypes[0], DType) or len(call.args) > 2:
        return False
    source = specs.get(call.args[0].name)
    return source is not None and source.dtype == dtypes[0].name == call.outputs[0].spec.dtype


def is_contiguous_call(call: Step) -> bool:
    if (
        not isinstance(call, TorchCall)
        or call.target != CONTIGUOUS
        or len(call.args) != 1
        or not isinstance(call.args[0], Ref)
        or len(call.outputs) != 1
    ):
        return False
    fmt = _kwargs(call).get("memory_format")
    return set(_kwargs(call)) <= {"memory_format"} and (
        fmt is None or getattr(fmt, "name", "") == "torch.contiguous_format"
    )


def contiguous_values(steps: list[Step], contiguous_outputs: Callable[[Region], set[str]]) -> set[str]:
    """The values contiguous whatever layouts the program's inputs have."""
    known: set[str] = set()
    for step in steps:
        if isinstance(step, Region):
            known |= contiguous_outputs(step)
        elif is_contiguous_call(step):
            known.add(step.outputs[0].name)
        elif (
            step.target in RESHAPES
            and step.args
            and isinstance(step.args[0], Ref)
            and step.args[0].name in known
        ):
            known.update(o.name for o in step.outputs)
    return known


def drop_no_op_calls(
    program: BucketProgram, contiguous_outputs: Callable[[Region], set[str]]
) -> BucketProgram:
    """``program`` without the ``to`` and ``contiguous`` calls that return their argument."""
    while True:
        steps = list(program.steps)
        specs = value_specs(program)
        known = contiguous_values(steps, contiguous_outputs)
        for i, step in enumerate(steps):
            if not isinstance(step, TorchCall) or step.outputs[0].name in program.outputs:
                continue
            if _is_no_op_to(step, specs) or (is_contiguous_call(step) and step.args[0].name in known):
                names = {step.outputs[0].name: step.args[0].name}
                program = dataclasses.replace(
                    program, steps=tuple(steps[:i]) + renamed(tuple(steps[i + 1 :]), names)
                )
                break
        else:
            return program


PASS = Pass(
    "drop_no_op_calls", lambda program, kernels: drop_no_op_calls(program, kernels.contiguous_outputs)
)
