"""A forward that gives other outputs for the same inputs cannot be exported: its trace fixes one
call's values. Found before tracing by calling a copy of the module twice on the same inputs, and
named by what the first call changed in the module (a counter, a buffer written in place)."""

from __future__ import annotations

import copy

import torch

from thunder_aot.errors import ExportError
from thunder_aot.frontend.torch_ops import cpu_safe_grouped_mm

#: plain attribute values whose change the refusal names
_SCALARS = (int, float, bool, str, type(None))


def _state(module: torch.nn.Module) -> dict[str, object]:
    """Every submodule's plain attributes (numbers, strings) and tensors, by their dotted names."""
    state: dict[str, object] = {}
    for prefix, sub in module.named_modules():
        dot = f"{prefix}." if prefix else ""
        for name, value in vars(sub).items():
            if isinstance(value, _SCALARS) and not name.startswith("_"):
                state[f"{dot}{name}"] = value
        for name, tensor in [*sub._parameters.items(), *sub._buffers.items()]:
            if tensor is not None:
                state[f"{dot}{name}"] = tensor.detach().clone()
    return state


def _same(a: object, b: object) -> bool:
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        if a.shape != b.shape or a.dtype != b.dtype:
            return False
        both_nan = a.isnan() & b.isnan() if a.is_floating_point() else torch.zeros_like(a, dtype=torch.bool)
        return bool(((a == b) | both_nan).all())
    return type(a) is type(b) and a == b


def _flat(out: object) -> list[object]:
    if isinstance(out, (tuple, list)):
        return [x for o in out for x in _flat(o)]
    if isinstance(out, dict):
        return [x for o in out.values() for x in _flat(o)]
    return [out]


def check_repeatable(module: torch.nn.Module, args: list[torch.Tensor]) -> None:
    """ExportError where two calls of (a copy of) ``module`` on ``args`` differ: the forward reads
    something besides its inputs and tensors (Python's ``random``, the time, a counter, state it
    changes). Names the attributes and tensors the first call changed, if any. Grouped matmuls on
    the CPU run as they do while tracing (:func:`cpu_safe_grouped_mm`: torch's CPU kernel crashes
    the process on some hosts)."""
    try:
        twin = copy.deepcopy(module)
    except Exception:  # noqa: BLE001 - a module that cannot be copied: verification's samples decide
        return
    before = _state(twin)
    with torch.no_grad(), cpu_safe_grouped_mm():
        try:
            first = _flat(twin(*[a.clone() for a in args]))
            after = _state(twin)
            second = _flat(twin(*[a.clone() for a in args]))
        except Exception:  # noqa: BLE001 - a forward that fails on these inputs: tracing names why
            return
    differ = [i for i, (a, b) in enumerate(zip(first, second)) if not _same(a, b)]
    if len(first) != len(second):
        differ = differ or [min(len(first), len(second))]
    if not differ:
        return
    changed = [name for name, value in before.items() if name in after and not _same(value, after[name])]
    cause = (
        f"its forward changes {', '.join(changed[:4])}{' and more' if len(changed) > 4 else ''}"
        if changed
        else "it reads something besides its inputs and tensors: Python's random, the time, or "
        "state outside the module"
    )
    raise ExportError(
        f"{type(module).__name__}: two calls on the same inputs return different values (output "
        f"{differ[0]}): {cause}; an export fixes one call's values. Expected a forward that depends "
        "on its inputs, parameters and buffers only"
    )
