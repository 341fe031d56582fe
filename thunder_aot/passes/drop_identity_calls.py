"""Torch calls that return their input at the arguments the trace recorded: dropped from the program.

Export traces in eval mode, so a transformers module's ``F.dropout(h, p=self.dropout,
training=self.training)`` is recorded as ``dropout(h, 0.0, False, False)``: torch returns ``h``
itself (no kernel, no copy), but left as a torch call it still costs a Python call per forward
(Starcoder2's MLP and attention, GPT-2's blocks, BERT-style layers). The pass reads later uses of
such a call's output as its input. A call whose arguments are not literals (a size or a tensor
computed at run time) is kept.
"""

from __future__ import annotations

import dataclasses

from thunder_aot.ir import Arg, BucketProgram, Const, Ref, Region, TorchCall, bound_args, renamed
from thunder_aot.passes.base import Pass

#: the parameters, in order, of the dropout family (functional spellings and torch's own)
_DROPOUT_PARAMS = ("input", "p", "training", "inplace")
DROPOUTS = {
    target: _DROPOUT_PARAMS
    for target in (
        "torch.nn.functional.dropout",
        "torch.nn.functional.dropout1d",
        "torch.nn.functional.dropout2d",
        "torch.nn.functional.dropout3d",
        "torch.nn.functional.alpha_dropout",
        "torch.nn.functional.feature_alpha_dropout",
    )
}
DROPOUTS.update(
    {
        "torch.dropout": ("input", "p", "train"),
        "torch.alpha_dropout": ("input", "p", "train"),
        "torch.feature_dropout": ("input", "p", "train"),
    }
)

#: the defaults of the parameters above that a call may leave out
_DEFAULTS = {"p": 0.5, "training": True, "inplace": False}


def _literal(bound: dict[str, Arg], name: str) -> object:
    """The literal value of a parameter (its default where left out); ``...`` where not a literal."""
    if name not in bound:
        return _DEFAULTS.get(name, ...)
    arg = bound[name]
    return arg.value if isinstance(arg, Const) else ...


def returns_its_input(step: TorchCall) -> str | None:
    """The name of the tensor ``step`` returns unchanged at its recorded arguments, or None."""
    params = DROPOUTS.get(step.target)
    if params is None or len(step.outputs) != 1:
        return None
    bound = bound_args(step, params)
    if bound is None or not isinstance(bound.get("input"), Ref):
        return None
    training = _literal(bound, "train" if "train" in params else "training")
    p = _literal(bound, "p")
    if training is False or (isinstance(p, (int, float)) and not isinstance(p, bool) and p == 0):
        return bound["input"].name  # type: ignore[union-attr]
    return None


def without_identity_source_calls(region: Region) -> Region:
    """``region`` whose source calls (what it runs as where it makes no kernel, and the torch
    backend's code) leave out the calls that return their input, where a later source call, not the
    region's caller, reads what they return."""
    outputs = {o.name for o in region.outputs}
    names: dict[str, str] = {}
    kept = []
    for call in region.source_calls:
        call = renamed(call, names)
        source = returns_its_input(call) if isinstance(call, TorchCall) else None
        if source is None or call.outputs[0].name in outputs:
            kept.append(call)
        else:
            names[call.outputs[0].name] = source
    if len(kept) == len(region.source_calls):
        return region
    return dataclasses.replace(region, source_calls=tuple(kept))


def drop_identity_calls(program: BucketProgram) -> BucketProgram:
    """``program`` without the torch calls that return their input; their outputs' readers (and the
    program's outputs) take the input instead. Regions' source calls lose theirs too."""
    steps = tuple(without_identity_source_calls(s) if isinstance(s, Region) else s for s in program.steps)
    if steps != program.steps:
        program = dataclasses.replace(program, steps=steps)
    names: dict[str, str] = {}
    kept = []
    for step in program.steps:
        source = returns_its_input(step) if isinstance(step, TorchCall) else None
        if source is None:
            kept.append(renamed(step, names))
        else:
            names[step.outputs[0].name] = names.get(source, source)
    if not names:
        return program
    if any(isinstance(s, Region) and len({v.name for v in s.inputs}) < len(s.inputs) for s in kept):
        return program  # a region read both the input and the call's output: kept as traced
    return BucketProgram(
        index=program.index,
        bucket=program.bucket,
        inputs=program.inputs,
        steps=tuple(kept),
        outputs=tuple(names.get(n, n) for n in program.outputs),
    )


PASS = Pass("drop_identity_calls", lambda program, _kernels: drop_identity_calls(program))
