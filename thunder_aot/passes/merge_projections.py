"""Merged projections: linear layers that read one input become one matmul.

Attention's q/k/v projections and a gated MLP's gate/up projections each read the same tensor.
Where a program calls ``linear(x, W_i, b_i)`` for several parameters ``W_i`` of one dtype on the
same ``x``, this pass replaces those calls by one ``linear(x, W, b)`` over the parameters
concatenated along their output dim (:class:`~thunder_aot.ir.MergedWeight`), and hands each
caller its part of the result: a region that read ``linear(x, W_i)`` reads the merged output and
slices its part in the kernel (a prim ``slice`` of the innermost dim, prepended to its ops); a torch
call or a program output gets a ``torch.narrow`` view. One matmul instead of three or two: fewer
launches and their host dispatch, and a wider matmul at small token counts.

The generated module holds the concatenated tensor as a non-persistent buffer and keeps the
source's parameters as views of it (``GeneratedModule.merge_projections``), so that the state
dict, ``load_state_dict`` and in-place updates of the parameters keep working, and the source's
weights are not held twice.
"""

from __future__ import annotations

import dataclasses

from thunder_aot.ir import (
    LINEAR,
    BucketProgram,
    Const,
    MergedWeight,
    PrimOp,
    ProgramInput,
    Ref,
    Region,
    Seq,
    Step,
    TensorSpec,
    TorchCall,
    Value,
    dim_arg,
    step_reads,
    value_names,
)


@dataclasses.dataclass(frozen=True)
class _Group:
    """Linear calls of one program on one input: their weights (and biases), in program order."""

    weights: tuple[str, ...]
    biases: tuple[str, ...] | None  # None: no call has a bias

    def has(self, parts: tuple[str, str, str | None] | None) -> bool:
        """Whether a linear call's ``(input, weight, bias)`` is one of the group's calls."""
        if parts is None or parts[1] not in self.weights:
            return False
        return parts[2] == (None if self.biases is None else self.biases[self.weights.index(parts[1])])


def _linear_parts(step: Step, parameters: set[str]) -> tuple[str, str, str | None] | None:
    """``(input, weight, bias or None)`` of a linear call on parameters, else None."""
    if not isinstance(step, TorchCall) or step.target != LINEAR or step.kwargs or len(step.outputs) != 1:
        return None
    args = step.args
    if len(args) not in (2, 3) or not isinstance(args[0], Ref) or not isinstance(args[1], Ref):
        return None
    if args[1].name not in parameters:
        return None
    bias = args[2] if len(args) == 3 else Const(None)
    if isinstance(bias, Const) and bias.value is None:
        return args[0].name, args[1].name, None
    if isinstance(bias, Ref) and bias.name in parameters:
        return args[0].name, args[1].name, bias.name
    return None


def _groups(program: BucketProgram, parameters: set[str]) -> list[_Group]:
    specs = {v.name: v.spec for v in program.inputs}
    by_input: dict[tuple[str, bool, str], list[tuple[str, str | None]]] = {}
    for step in program.steps:
        parts = _linear_parts(step, parameters)
        if parts is None:
            continue
        x, weight, bias = parts
        spec = specs[weight]
        if len(spec.shape) != 2 or (
            bias is not None and (len(specs[bias].shape) != 1 or specs[bias].dtype != spec.dtype)
        ):
            continue
        by_input.setdefault((x, bias is not None, spec.dtype), []).append((weight, bias))
    groups = []
    for calls in by_input.values():
        weights = tuple(w for w, _ in calls)
        if len(calls) < 2 or len(set(weights)) != len(weights):
            continue
        biases = tuple(b for _, b in calls)
        groups.append(_Group(weights, biases if biases[0] is not None else None))
    return groups


def _input_of(program: BucketProgram, group: _Group, parameters: set[str]) -> str:
    """The tensor the group's linear calls read (the input of its first weight's call)."""
    for step in program.steps:
        parts = _linear_parts(step, parameters)
        if group.has(parts):
            return parts[0]
    raise AssertionError("the group's calls are not in the program")


def _merged_key(keys: tuple[str, ...], taken: set[str]) -> str:
    """The buffer's state key beside its parameters: ``self_attn.merged_q_proj_k_proj_v_proj_weight``."""
    split = [k.split(".") for k in keys]
    common = 0
    while all(len(s) > common + 1 for s in split) and len({s[common] for s in split}) == 1:
        common += 1
    parent = split[0][:common]
    rests = [s[common:] for s in split]
    leaves = {r[-1] for r in rests}
    if len(leaves) == 1 and all(len(r) > 1 for r in rests):
        name = "merged_" + "_".join("_".join(r[:-1]) for r in rests) + "_" + rests[0][-1]
    else:
        name = "merged_" + "_".join("_".join(r) for r in rests)
    key, n = ".".join([*parent, name]), 1
    while key in taken:
        n += 1
        key = ".".join([*parent, f"{name}{n}"])
    return key


def _identifier(key: str, taken: set[str]) -> str:
    name, n = "t_" + key.replace(".", "_"), 1
    while name in taken:
        n += 1
        name = f"t_{key.replace('.', '_')}_{n}"
    return name


def _slice_op(out: Value, merged: Value, start: int) -> PrimOp:
    """``out = merged[..., start:start + width]`` as Thunder's slice prim."""
    shape = out.spec.shape
    ends = [dim_arg(d) for d in shape[:-1]] + [Const(start + shape[-1])]
    return PrimOp(
        "slice",
        (out,),
        (
            Ref(merged.name),
            Seq(tuple(Const(0) for _ in shape[:-1]) + (Const(start),)),
            Seq(tuple(ends)),
            Seq(tuple(Const(1) for _ in shape)),
        ),
    )


def _narrow_call(out: Value, merged: Value, start: int, source) -> TorchCall:
    return TorchCall(
        "torch.narrow",
        (out,),
        (Ref(merged.name), Const(-1), Const(start), Const(out.spec.shape[-1])),
        source=source,
    )


def _rewrite(
    program: BucketProgram, group: _Group, weight: Value, bias: Value | None, parameters: set[str]
) -> BucketProgram:
    """One program with ``group``'s linear calls replaced by one call on the merged tensors (a member
    weight's calls on other inputs stay as they are, reading the member's view)."""
    x = _input_of(program, group, parameters)
    calls = []
    for i, s in enumerate(program.steps):
        parts = _linear_parts(s, parameters)
        if group.has(parts) and parts[0] == x:
            calls.append((i, s))
    first_index, first = calls[0]
    parts: list[tuple[Value, int]] = []  # each call's output and where it starts in the merged output
    start = 0
    for _, call in sorted(calls, key=lambda c: group.weights.index(c[1].args[1].name)):  # the buffer's order
        out = call.outputs[0]
        parts.append((out, start))
        start += out.spec.shape[-1]
    out0 = first.outputs[0]
    merged_out = Value(f"{out0.name}_merged", TensorSpec((*out0.spec.shape[:-1], start), out0.spec.dtype))
    merged_call = TorchCall(
        LINEAR,
        (merged_out,),
        (first.args[0], Ref(weight.name), Ref(bias.name) if bias else Const(None)),
        source=first.source,
    )
    dropped = {i for i, _ in calls}
    later = [s for i, s in enumerate(program.steps) if i > first_index and i not in dropped]
    views: list[TorchCall] = []
    rewritten: list[Step] = []
    for step in later:
        if isinstance(step, Region):
            read = [(out, at) for out, at in parts if out.name in step_reads(step)]
            if read:
                names = {out.name for out, _ in read}
                inputs = []
                for v in step.inputs:
                    if v.name in names:
                        if merged_out not in inputs:
                            inputs.append(merged_out)
                    else:
                        inputs.append(v)
                step = dataclasses.replace(
                    step,
                    inputs=tuple(inputs),
                    ops=tuple(_slice_op(out, merged_out, at) for out, at in read) + step.ops,
                    source_calls=(
                        tuple(_narrow_call(out, merged_out, at, first.source) for out, at in read)
                        + step.source_calls
                        if step.source_calls
                        else ()
                    ),
                )
        rewritten.append(step)
    for out, at in parts:
        if out.name in program.outputs or any(
            not isinstance(s, Region) and out.name in step_reads(s) for s in later
        ):
            views.append(_narrow_call(out, merged_out, at, first.source))
    steps = [s for i, s in enumerate(program.steps) if i < first_index] + [merged_call, *views, *rewritten]
    inputs = list(program.inputs) + [weight] + ([bias] if bias else [])
    return dataclasses.replace(program, inputs=tuple(inputs), steps=tuple(steps))


def merge_projections(
    programs: list[BucketProgram], inputs: list[ProgramInput]
) -> tuple[list[BucketProgram], list[ProgramInput], tuple[MergedWeight, ...]]:
    """Every program with its groups of linear calls merged (the groups every program that calls
    those weights agrees on), the program inputs with the merged tensors added, and their table."""
    parameters = {p.name for p in inputs if p.kind == "parameter"}
    per_program = [_groups(bp, parameters) for bp in programs]
    called = [{parts[1] for s in bp.steps if (parts := _linear_parts(s, parameters))} for bp in programs]
    accepted: list[_Group] = []
    claimed: set[str] = set()
    for group in (g for groups in per_program for g in groups):
        members = set(group.weights + (group.biases or ()))
        if group in accepted or claimed & members:
            continue
        # every program either merges the same group or calls none of its weights in a linear
        if all(group in groups or not (weights & members) for groups, weights in zip(per_program, called)):
            accepted.append(group)
            claimed |= members
    if not accepted:
        return programs, inputs, ()
    by_name = {p.name: p for p in inputs}
    specs = {v.name: v.spec for v in programs[0].inputs}
    taken_keys = {p.source_name for p in inputs}
    taken_names = {n for bp in programs for n in value_names(bp, [])}
    table: list[MergedWeight] = []
    new_inputs = list(inputs)
    for group in accepted:
        values = []
        for members in (group.weights, group.biases):
            if members is None:
                values.append(None)
                continue
            keys = tuple(by_name[m].source_name for m in members)
            key = _merged_key(keys, taken_keys)
            name = _identifier(key, taken_names)
            taken_keys.add(key)
            taken_names.add(name)
            shape = (sum(int(specs[m].shape[0]) for m in members), *specs[members[0]].shape[1:])
            table.append(MergedWeight(key, keys))
            new_inputs.append(ProgramInput(name, "merged", key, persistent=False))
            values.append(Value(name, TensorSpec(shape, specs[members[0]].dtype)))
        programs = [
            _rewrite(bp, group, values[0], values[1], parameters) if group in groups else bp
            for bp, groups in zip(programs, per_program)
        ]
        # programs without this group still take the merged tensors as arguments (one signature)
        programs = [
            (
                bp
                if any(v.name == values[0].name for v in bp.inputs)
                else dataclasses.replace(bp, inputs=bp.inputs + tuple(v for v in values if v is not None))
            )
            for bp in programs
        ]
    return programs, new_inputs, tuple(table)
