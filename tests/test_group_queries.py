"""passes/group_queries_instead_of_repeating_kv: attention over repeated key/value heads (transformers'
``repeat_kv`` before ``scaled_dot_product_attention``) computed over the heads themselves, the query
heads grouped as rows. Programs built by hand (no tracing) and run call by call, before and after the
pass, on random inputs: the same values, and the repeats gone; the cases the pass must leave alone
are left alone."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from thunder_aot.ir import (
    Bucket,
    BucketProgram,
    Const,
    DimRange,
    Ref,
    Seq,
    SizeArg,
    SliceArg,
    SymDim,
    TensorSpec,
    TorchCall,
    Value,
    dim_arg,
)
from thunder_aot.passes.group_queries_instead_of_repeating_kv import group_queries_instead_of_repeating_kv

SDPA = "torch.nn.functional.scaled_dot_product_attention"
FULL = SliceArg(Const(None), Const(None), Const(None))


def _arg(arg, values, env):
    if isinstance(arg, Ref):
        return values[arg.name]
    if isinstance(arg, Const):
        return arg.value
    if isinstance(arg, SizeArg):
        return arg.dim if isinstance(arg.dim, int) else arg.dim.at(env)
    if isinstance(arg, Seq):
        return tuple(_arg(a, values, env) for a in arg.items)
    if isinstance(arg, SliceArg):
        return slice(*(_arg(a, values, env) for a in (arg.start, arg.stop, arg.step)))
    raise TypeError(arg)


def run(program: BucketProgram, inputs: dict[str, torch.Tensor], env: dict[str, int]) -> list[torch.Tensor]:
    """The program's outputs, each torch call evaluated in order (a reference interpreter)."""
    values = dict(inputs)
    for step in program.steps:
        target = eval(step.target, {"torch": torch})  # noqa: S307 - the IR's qualified torch names
        out = target(
            *(_arg(a, values, env) for a in step.args), **{k: _arg(v, values, env) for k, v in step.kwargs}
        )
        values[step.outputs[0].name] = out
    return [values[n] for n in program.outputs]


def _spec(*shape, dtype="float32"):
    return TensorSpec(tuple(shape), dtype)


def _repeat(name: str, source: str, b, kv, group, length, d) -> list[TorchCall]:
    """transformers' repeat_kv as Thunder records it: a new axis 2, an expand, a reshape."""
    return [
        TorchCall(
            "torch.Tensor.__getitem__",
            (Value(f"{name}_axis", _spec(b, kv, 1, length, d)),),
            (Ref(source), Seq((FULL, FULL, Const(None), FULL, FULL))),
        ),
        TorchCall(
            "torch.Tensor.expand",
            (Value(f"{name}_expanded", _spec(b, kv, group, length, d)),),
            (Ref(f"{name}_axis"), *(dim_arg(x) for x in (b, kv, group, length, d))),
        ),
        TorchCall(
            "torch.reshape",
            (Value(name, _spec(b, kv * group, length, d)),),
            (Ref(f"{name}_expanded"), Seq(tuple(dim_arg(x) for x in (b, kv * group, length, d)))),
        ),
    ]


def attention_program(
    seq, mask_shape=None, mask_dtype="bool", is_causal=False, dropout=0.0, group=4, kv=2, length=12
) -> BucketProgram:
    """q [2, kv*group, seq, 8] against a cache of ``length`` positions, its kv heads repeated."""
    b, d, heads = 2, 8, kv * group
    inputs = [Value("q", _spec(b, heads, seq, d)), Value("k", _spec(b, kv, length, d))]
    inputs.append(Value("v", _spec(b, kv, length, d)))
    if mask_shape is not None:
        inputs.append(Value("mask", _spec(*mask_shape, dtype=mask_dtype)))
    steps = [*_repeat("k_rep", "k", b, kv, group, length, d), *_repeat("v_rep", "v", b, kv, group, length, d)]
    args = (Ref("q"), Ref("k_rep"), Ref("v_rep"), Ref("mask") if mask_shape else Const(None))
    args += (Const(dropout), Const(is_causal))
    steps.append(
        TorchCall(
            SDPA,
            (Value("attn", _spec(b, heads, seq, d)),),
            args,
            (("enable_gqa", Const(False)), ("scale", Const(0.3))),
        )
    )
    dims = tuple(DimRange(x.name, 1, 16) for x in [seq] if isinstance(x, SymDim))
    program = BucketProgram(
        0, Bucket(tuple(v.spec for v in inputs), dims), tuple(inputs), tuple(steps), ("attn",)
    )
    return program


def _inputs(program: BucketProgram, env: dict[str, int], seed: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    out = {}
    for v in program.inputs:
        shape = [x if isinstance(x, int) else x.at(env) for x in v.spec.shape]
        if v.spec.dtype == "bool":
            t = torch.rand(shape, generator=g) > 0.4
            t[..., 0] = True  # no row without a key
        else:
            t = torch.randn(shape, generator=g, dtype=torch.float64)
        out[v.name] = t
    return out


S = SymDim("S")


@pytest.mark.parametrize(
    "seq,mask_shape,mask_dtype",
    [
        (1, (2, 1, 1, 12), "bool"),  # a decode step: one row, the mask is a view
        (S, (2, 1, S, 12), "bool"),  # a prefill: the mask repeated over the group
        (S, (1, 1, S, 12), "float64"),  # an additive mask broadcast over the batch
        (5, None, None),  # no mask
    ],
    ids=["decode", "prefill", "additive", "no-mask"],
)
def test_grouped_queries_give_the_values_of_repeated_keys(seq, mask_shape, mask_dtype):
    program = attention_program(seq, mask_shape, mask_dtype or "bool")
    rewritten = group_queries_instead_of_repeating_kv(program)
    assert not any(o.name.startswith(("k_rep", "v_rep")) for s in rewritten.steps for o in s.outputs)
    sdpa = next(s for s in rewritten.steps if s.target == SDPA)
    assert sdpa.args[1:3] == (Ref("k"), Ref("v"))
    for size in (1, 3, 7) if isinstance(seq, SymDim) else (seq,):
        env = {"S": size}
        inputs = _inputs(program, env, seed=size)
        (expected,) = run(program, inputs, env)
        (got,) = run(rewritten, inputs, env)
        assert got.shape == expected.shape
        torch.testing.assert_close(got, expected, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize(
    "change",
    ["causal", "dropout", "mask per head", "one group"],
)
def test_attention_the_pass_cannot_regroup_is_left_as_traced(change):
    kwargs = {"seq": 3, "mask_shape": (2, 1, 3, 12)}
    if change == "causal":
        kwargs.update(mask_shape=None, is_causal=True)
    elif change == "dropout":
        kwargs.update(dropout=0.1)
    elif change == "mask per head":
        kwargs.update(mask_shape=(2, 8, 3, 12))
    else:
        kwargs.update(group=1)
    program = attention_program(**kwargs)
    assert group_queries_instead_of_repeating_kv(program) == program


def test_a_repeat_read_elsewhere_is_kept():
    """The repeated keys are also an output: the attention reads the heads, the repeat stays."""
    program = attention_program(1, (2, 1, 1, 12))
    program = dataclasses.replace(program, outputs=("attn", "k_rep"))
    rewritten = group_queries_instead_of_repeating_kv(program)
    assert "k_rep" in [o.name for s in rewritten.steps for o in s.outputs]
    assert "v_rep" not in [o.name for s in rewritten.steps for o in s.outputs]
    inputs = _inputs(program, {}, seed=0)
    for got, expected in zip(run(rewritten, inputs, {}), run(program, inputs, {})):
        torch.testing.assert_close(got, expected, rtol=1e-12, atol=1e-12)
