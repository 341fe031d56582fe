"""The numerical judgement of a generated module's outputs, the way torch's accuracy checkers judge
a compiled graph (``torch._dynamo.utils.same(..., fp64_ref=...)``): against the source module run in
float64, the generated module may err by a small multiple of what eager itself errs, plus one
rounding step of the output's dtype. Integer and bool outputs are exact; NaN and ±inf must stand
where eager's stand (:func:`_nonfinite_difference`).

Discrete choices (the top-k routing of mixture-of-experts layers) are not rounding: where a bf16
router and its float64 twin pick different experts for a token, eager's error there is as large as
the outputs, and a tolerance made of it would accept anything. So a module's choices are recorded
(:func:`run_recording_choices`) and its float64 reference makes the same ones (:func:`run64` with
``choices``): eager is judged against the float64 run that picks what eager picked, the generated
module against the one that picks what it picked (the same run where they agree).

It is one file because the bounds, the float64 runs they are measured against and the choices
those runs replay are one judgement: each is only right with the others.
"""

from __future__ import annotations

import copy
from collections.abc import Callable

import torch

from thunder_aot.errors import ExportError
from thunder_aot.runtime import CHOICES

#: how many times eager's own error (against float64) the generated module may err
ERROR_MULTIPLIER = 3.0
#: how many rounding steps of the outputs' scale the generated module may err in root mean square,
#: beyond :data:`ERROR_MULTIPLIER` times eager's: half of :data:`ROUNDING_STEPS`, as most elements of
#: a correct kernel err less than their bound (approximate exp, rsqrt and division of a few float32
#: steps each, in a float32 output of a few elements: a router's two weights)
RMS_ROUNDING_STEPS = 2.0


_FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
#: Tensor methods that cast to one floating dtype
_CASTS = {torch.Tensor.float, torch.Tensor.half, torch.Tensor.bfloat16}


def grouped_mm_by_group(mat_a, mat_b, offs=None, bias=None, out_dtype=None):
    """``torch._grouped_mm`` one plain matmul per group, as its documentation defines it: ``offs``
    holds the groups' ends along the jagged dim, rows past ``offs[-1]`` are zeros; without ``offs`` a
    batched product. Used where torch's kernel cannot run: float64 operands (its kernels take 16-
    and 32-bit floats only) and CPU tensors while export traces (its CPU kernel crashes on some hosts).
    ``out_dtype`` is ignored: the result has the operands' dtype."""
    if offs is None:
        out = torch.bmm(mat_a, mat_b) if mat_a.ndim == 3 else torch.matmul(mat_a, mat_b)
        return out if bias is None else out + bias.unsqueeze(-2)
    ends = offs.tolist()
    starts = [0, *ends[:-1]]
    if mat_a.ndim == 2 and mat_b.ndim == 3:  # rows of a jagged: out [M, N]
        out = mat_a.new_zeros(mat_a.shape[0], mat_b.shape[-1])
        for g, (start, end) in enumerate(zip(starts, ends)):
            out[start:end] = mat_a[start:end] @ mat_b[g] + (0 if bias is None else bias[g])
    elif mat_a.ndim == 3 and mat_b.ndim == 2:  # columns of b jagged: out [M, N]
        out = mat_a.new_zeros(mat_a.shape[1], mat_b.shape[-1])
        for g, (start, end) in enumerate(zip(starts, ends)):
            out[:, start:end] = mat_a[g] @ mat_b[:, start:end] + (0 if bias is None else bias[g, start:end])
    else:  # the shared dim jagged: out [G, M, N]
        out = torch.stack([mat_a[:, start:end] @ mat_b[start:end] for start, end in zip(starts, ends)])
        out = out if bias is None else out + bias.unsqueeze(-2)
    return out


#: torch's grouped matmuls, read off torch's C bindings: export's tracing replaces ``torch._grouped_mm``
#: for a while (frontend.torch_ops.cpu_safe_grouped_mm), and this module may be imported then
_GROUPED_MMS = {
    f
    for f in (
        getattr(torch._C._VariableFunctions, "_grouped_mm", None),
        getattr(torch.nn.functional, "grouped_mm", None),
    )
    if f
}


#: the selections whose picks a float64 reference replays (routers of mixture-of-experts layers)
_TOPKS = {torch.topk, torch.Tensor.topk}


class ChoicesDiffer(Exception):
    """A replayed forward made other selections than the recorded run (count or shapes)."""


def _topk_call(args, kwargs) -> tuple[torch.Tensor, int, int]:
    """``(input, k, dim)`` of a ``topk`` call however its arguments were passed."""
    names = ("input", "k", "dim")
    bound = dict(zip(names, args))
    bound.update({n: kwargs[n] for n in names if n in kwargs})
    return bound["input"], int(bound["k"]), int(bound.get("dim", -1))


class _RecordChoices(torch.overrides.TorchFunctionMode):
    """Records the indices each ``topk`` of a floating tensor picks, in call order: torch's calls,
    and a generated module's top-k kernels (which append theirs to ``runtime.CHOICES``)."""

    def __init__(self) -> None:
        super().__init__()
        self.picked: list[torch.Tensor] = []

    def __enter__(self):
        CHOICES.append(self.picked)
        return super().__enter__()

    def __exit__(self, *exc):
        del CHOICES[next(i for i in range(len(CHOICES) - 1, -1, -1) if CHOICES[i] is self.picked)]
        return super().__exit__(*exc)

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func in _TOPKS and args and isinstance(args[0], torch.Tensor) and args[0].is_floating_point():
            self.picked.append(out[1].detach().cpu())
        return out


def run_recording_choices(module, inputs: list[torch.Tensor]) -> tuple[object, list[torch.Tensor]]:
    """``module(*inputs)`` and the indices its top-k selections picked (empty: it made none)."""
    with torch.no_grad(), _RecordChoices() as recorder:
        out = module(*inputs)
    return out, [p.detach().cpu() for p in recorder.picked]


def same_choices(a: list[torch.Tensor], b: list[torch.Tensor]) -> bool:
    return len(a) == len(b) and all(x.shape == y.shape and torch.equal(x, y) for x, y in zip(a, b))


#: how far a replayed pick's value may be below the value torch.topk ranks at its place, relative to
#: the row's largest magnitude: a near tie that a low-precision run breaks otherwise than float64
#: is within it (bf16 holds 8 significant bits), a pick of a value well down the row is not
PICK_TOLERANCE = 2.0**-5


def _replayed_topk(
    choices: list[torch.Tensor], args, kwargs, check: bool, near: list[torch.Tensor] | None = None
):
    """``torch.topk``'s result making the next recorded pick of ``choices`` (its values gathered from
    the input); ``check``: raise :class:`ChoicesDiffer` where the picks are not a top-k of the input
    within :data:`PICK_TOLERANCE` of the row's largest magnitude, or within twice
    :data:`ERROR_MULTIPLIER` times eager's largest error in the row (two values each off by what the
    judgement accepts, in opposite directions) where ``near`` holds eager's input to this top-k (the
    next of them, taken in step: :func:`run_choosing`'s ``seen``); value by value, in order; NaN
    where the top-k has NaN. Deep in a low-precision model a router's values carry the rounding of
    every layer before it, and eager's own error there says how far a near tie may be broken."""
    source, k, dim = _topk_call(args, kwargs)
    if not choices:
        raise ChoicesDiffer("more top-k selections than recorded")
    eager_input = near.pop(0) if near else None
    indices = choices.pop(0).to(source.device)
    shape = list(source.shape)
    shape[dim] = k
    if list(indices.shape) != shape:
        raise ChoicesDiffer(f"a top-k of shape {shape} replays picks of shape {list(indices.shape)}")
    if indices.numel() and (indices.min() < 0 or indices.max() >= source.shape[dim]):
        raise ChoicesDiffer("a top-k pick outside its row")
    values = source.gather(dim, indices)
    if check and values.numel():
        best = torch.topk(source, k, dim=dim).values
        tolerance = PICK_TOLERANCE * source.abs().nan_to_num(0.0, 0.0, 0.0).amax(dim, keepdim=True)
        if eager_input is not None and eager_input.shape == source.shape:
            eager_error = (eager_input.to(source) - source).abs().nan_to_num(0.0, 0.0, 0.0)
            # two values trade places where each moves by its accepted error, in opposite directions
            tolerance = torch.maximum(tolerance, 2 * ERROR_MULTIPLIER * eager_error.amax(dim, keepdim=True))
        if (
            not torch.isclose(values, best, rtol=0.0, atol=0.0, equal_nan=True)
            .logical_or((best - values).abs() <= tolerance)
            .all()
        ):
            raise ChoicesDiffer("top-k picks that are not the row's largest values in order")
    return torch.return_types.topk((values, indices))


class _ReplayChoices(torch.overrides.TorchFunctionMode):
    """Runs a module as it is (its own dtypes), each ``topk`` making the recorded picks instead
    (``seen``: each top-k's input appended to it)."""

    def __init__(self, choices: list[torch.Tensor], seen: list[torch.Tensor] | None = None) -> None:
        super().__init__()
        self.choices, self.seen = list(choices), seen

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = dict(kwargs or {})
        if func in _TOPKS and args and args[0].is_floating_point():
            if self.seen is not None:
                self.seen.append(_topk_call(args, kwargs)[0].detach())
            return _replayed_topk(self.choices, args, kwargs, check=False)
        return func(*args, **kwargs)


def run_choosing(
    module: torch.nn.Module,
    inputs: list[torch.Tensor],
    choices: list[torch.Tensor],
    seen: list[torch.Tensor] | None = None,
):
    """``module(*inputs)`` in its own dtypes, each top-k making ``choices`` (None where its
    selections differ in count or shape): eager as it would be with the generated module's picks.
    ``seen``: each top-k's input appended to it (the ``near`` of a float64 run making the same picks:
    :func:`run64`)."""
    try:
        with torch.no_grad(), _ReplayChoices(choices, seen):
            return module(*inputs)
    except ChoicesDiffer:
        return None


class _StayInFloat64(torch.overrides.TorchFunctionMode):
    """Runs a module with every floating cast it writes (``x.float()``, ``x.to(torch.float32)``,
    ``softmax(..., dtype=torch.float32)``, ``.to(input_dtype)``) kept in float64, so that the
    reference carries no rounding of the module's own low-precision steps; grouped matmuls (MoE
    experts) run group by group in float64 (:func:`grouped_mm_by_group`); ``choices``: the indices each
    ``topk`` picks, replayed in order (its values gathered from the float64 input; ``near``: eager's
    inputs to them, :func:`_replayed_topk`)."""

    def __init__(
        self,
        choices: list[torch.Tensor] | None = None,
        check: bool = True,
        near: list[torch.Tensor] | None = None,
    ) -> None:
        super().__init__()
        self.choices = None if choices is None else list(choices)
        self.check = check
        self.near = list(near) if near else None

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = dict(kwargs or {})
        if func in _TOPKS and self.choices is not None and args and args[0].is_floating_point():
            # picks a kernel made (not torch.topk itself) must be a top-k of float64's input
            return _replayed_topk(self.choices, args, kwargs, check=self.check, near=self.near)
        if func in _GROUPED_MMS and args and getattr(args[0], "dtype", None) == torch.float64:
            return grouped_mm_by_group(*args, **kwargs)
        if func in _CASTS and args and isinstance(args[0], torch.Tensor):  # x.float() of floats or integers
            return args[0] if args[0].is_floating_point() else args[0].to(torch.float64)
        if kwargs.get("dtype") in _FLOATS:
            kwargs["dtype"] = torch.float64
        if func in (torch.Tensor.to, torch.Tensor.type):
            args = tuple(torch.float64 if a in _FLOATS else a for a in args)
        return func(*args, **kwargs)


def upcast64(module: torch.nn.Module) -> torch.nn.Module | None:
    """A float64 copy of the module (None where it cannot be made), for :func:`reference64`."""
    try:
        return copy.deepcopy(module).to(torch.float64)
    except Exception:  # noqa: BLE001 - judged against eager alone then
        return None


def reference64(
    module: torch.nn.Module,
    inputs: list[torch.Tensor],
    upcast: torch.nn.Module | None = None,
    choices: list[torch.Tensor] | None = None,
    fallback: bool = True,
    near: list[torch.Tensor] | None = None,
):
    """The module's outputs computed in float64: its floating parameters, buffers and inputs
    upcast, and the floating casts it writes kept in float64 (as torch's accuracy checkers'
    ``fp64_ref``, without the module's own downcasts). ``upcast``: :func:`upcast64` of the module,
    made once for many calls; ``choices``: the top-k picks to make, ``near`` eager's inputs to them
    (:func:`run64_choosing`). None where the module cannot run so."""
    try:
        return run64_choosing(module, inputs, choices, upcast, fallback, near)
    except ChoicesDiffer:
        raise
    except Exception:  # noqa: BLE001 - a module that cannot run in float64 is judged against eager alone
        return None


def run64_choosing(
    module: torch.nn.Module,
    inputs: list[torch.Tensor],
    choices: list[torch.Tensor] | None,
    upcast: torch.nn.Module | None = None,
    fallback: bool = True,
    near: list[torch.Tensor] | None = None,
):
    """:func:`run64` making ``choices`` (:func:`run_recording_choices`; ``near``: eager's inputs to
    them, :func:`run_choosing`'s ``seen``), else (``fallback``) its own: also where the float64 run
    selects otherwise than recorded, or the picks are no top-k of its input; without ``fallback``
    that raises ChoicesDiffer."""
    if choices:
        try:
            return run64(module, inputs, upcast, choices, near)
        except ChoicesDiffer:
            if not fallback:
                raise
    return run64(module, inputs, upcast)


def paired_references(
    run: Callable,
    eager_choices: list[torch.Tensor],
    choices: list[torch.Tensor],
    near: list[torch.Tensor] | None = None,
) -> tuple:
    """``(run(eager_choices), run(choices, False, near))``, the second None where the generated
    module chose as eager did (or the first is None), or where float64 cannot make its picks
    (``run``'s second argument: fall back to float64's own picks, else raise ChoicesDiffer; its
    third: eager's inputs to the top-k making ``choices``, :func:`run_choosing`'s ``seen``): the
    float64 references eager and the generated module are judged against (:func:`judge`'s
    ``reference`` and ``reference_ours``)."""
    reference = run(eager_choices)
    if reference is None or same_choices(eager_choices, choices):
        return reference, None
    try:  # (None where float64 cannot make the generated module's picks: they are no top-k of its input)
        return reference, run(choices, False, near)
    except ChoicesDiffer:
        return reference, None


def run64(
    module: torch.nn.Module,
    inputs: list[torch.Tensor],
    upcast: torch.nn.Module | None = None,
    choices: list[torch.Tensor] | None = None,
    near: list[torch.Tensor] | None = None,
):
    """:func:`reference64`, raising where the module cannot run in float64 (:class:`ChoicesDiffer`
    where it selects otherwise than ``choices``, within ``near``'s tolerance: :func:`_replayed_topk`)."""
    upcast = upcast if upcast is not None else copy.deepcopy(module).to(torch.float64)
    inputs64 = [t.double() if t.is_floating_point() else t for t in inputs]
    with torch.no_grad(), _StayInFloat64(choices if choices else None, near=near):
        return upcast(*inputs64)


def _floating_tensors(module: torch.nn.Module) -> list[torch.Tensor]:
    return [*module.parameters(), *(b for b in module.buffers() if b.is_floating_point())]


def _nudged(t: torch.Tensor, dtype: torch.dtype, generators: dict) -> torch.Tensor:
    """``1 + u * eps`` per element of ``t``: ``u`` uniform in [-1, 1), ``eps`` ``dtype``'s; drawn
    where ``t`` lives (a generator per device, seeded with :data:`PERTURBATION_SEED`)."""
    if t.device not in generators:
        generators[t.device] = torch.Generator(t.device).manual_seed(PERTURBATION_SEED)
    u = torch.rand(t.shape, generator=generators[t.device], dtype=torch.float64, device=t.device)
    return 1 + (2 * u - 1) * torch.finfo(dtype).eps


def run64_perturbed(
    module: torch.nn.Module,
    inputs: list[torch.Tensor],
    upcast: torch.nn.Module | None = None,
    choices: list[torch.Tensor] | None = None,
):
    """:func:`run64` with every floating input, parameter and buffer moved by up to one rounding
    step of its own dtype (relative, a seeded draw): how far rounding the module's inputs alone moves
    each output, which is what a correct kernel's different rounding (a reduction summed in another
    order, float32 kept where eager rounds, approximate exp or rsqrt) can move it by too, at the
    elements of a cancellation (a residual add, a mean subtracted, the sum of a matmul) as anywhere
    (:func:`element_bounds`). ``choices``: top-k picks replayed as they are (the nudge may break a
    near tie). ``upcast``: :func:`upcast64` of ``module``, nudged in place and put back (from
    ``module``'s own tensors) before returning. None where the module cannot run so."""
    generators: dict = {}
    made = upcast is None
    try:
        upcast = copy.deepcopy(module).to(torch.float64) if made else upcast
        pairs = list(zip(_floating_tensors(upcast), _floating_tensors(module)))
    except Exception:  # noqa: BLE001 - judged without the sensitivity then
        return None
    # put back from the module's own tensors (exact: upcasting is), or a copy where there is none
    originals = [t if (t is not t64 and t.shape == t64.shape) else t64.clone() for t64, t in pairs]
    try:
        with torch.no_grad():
            for t64, t in pairs:
                t64.mul_(_nudged(t64, t.dtype, generators))
            inputs64 = [
                x.double() * _nudged(x, x.dtype, generators) if x.is_floating_point() else x for x in inputs
            ]
            with _StayInFloat64(choices if choices else None, check=False):
                return upcast(*inputs64)
    except Exception:  # noqa: BLE001 - judged without the sensitivity then
        return None
    finally:
        if not made:
            with torch.no_grad():
                for (t64, _), original in zip(pairs, originals):
                    t64.copy_(original)


def _flat(outputs) -> tuple:
    return tuple(outputs) if isinstance(outputs, (tuple, list)) else (outputs,)


def _nonfinite_class(t: torch.Tensor) -> torch.Tensor:
    """Per element: 0 finite, 1 NaN, 2 +inf, 3 -inf."""
    return torch.isnan(t) * 1 + torch.isposinf(t) * 2 + torch.isneginf(t) * 3


def _nonfinite_difference(
    expected: torch.Tensor, actual: torch.Tensor, reference: torch.Tensor | None = None
) -> str | None:
    """Where eager has NaN the generated module must have NaN; where eager has ±inf, the same
    infinity (or NaN: an infinity times a value that one of them rounds to zero); where eager is
    finite, a finite value. Where float64 (``reference``: its outputs rounded to the outputs' dtype)
    disagrees with eager, eager is no measure: an element passes where the generated module is what
    float64 is (F.layer_norm's variance of a row holding 1e20 overflows in float32, so eager's
    output is 0, and 0 * inf NaN downstream, where float64's is finite * inf), or where eager is not
    (a row holding 1e20 and -1e20 cancels to a mean of either sign in float32)."""
    agrees = None
    if reference is not None and reference.shape == actual.shape:
        # the generated module is what float64 is, or eager is not (its error there is unbounded)
        truth = _nonfinite_class(reference)
        agrees = (truth == _nonfinite_class(actual)) | (truth != _nonfinite_class(expected))
    checks = (
        ("NaN", torch.isnan(expected), torch.isnan(actual)),
        ("+inf", torch.isposinf(expected), torch.isposinf(actual) | torch.isnan(actual)),
        ("-inf", torch.isneginf(expected), torch.isneginf(actual) | torch.isnan(actual)),
        ("a finite value", torch.isfinite(expected), torch.isfinite(actual)),
    )
    for what, eager_has, ours_has in checks:
        missing = eager_has & ~ours_has
        if agrees is not None:
            missing &= ~agrees
        if missing.any():
            where = missing.nonzero()[0].tolist()
            found = (
                f"eager has {what}"
                if what != "a finite value"
                else f"eager has {expected[tuple(where)].item()}"
            )
            return f"{found} at {where}, the generated module {actual[tuple(where)].item()}"
    return None


def _rms_error(values: torch.Tensor, reference: torch.Tensor) -> float:
    """The root mean square of ``values - reference``, in float64."""
    err = values.double() - reference
    return err.square().mean().sqrt().item() if err.numel() else 0.0


def judge_output(
    expected: torch.Tensor,
    actual: torch.Tensor,
    reference: torch.Tensor | None,
    where: str,
    reference_ours: torch.Tensor | None = None,
    expected_ours: torch.Tensor | None = None,
    perturbed: torch.Tensor | None = None,
) -> None:
    """Accept ``actual`` (the generated module's) against ``expected`` (eager's) and ``reference``
    (float64's, or None), element by element (:func:`element_bounds`; ``perturbed``: float64's
    outputs with the inputs nudged, :func:`run64_perturbed`) and in root mean square, or raise
    ExportError saying where and by how much it is off. ``reference_ours``:
    the float64 run that made the generated module's choices where they differ from eager's;
    ``expected_ours``: eager making them (:func:`run_choosing`), which then stands for eager (its
    non-finite values, its error against ``reference_ours``): only with ``reference_ours``, whose
    run checked that the picks are a top-k of float64's input."""
    if (
        expected_ours is not None
        and reference_ours is not None
        and expected_ours.shape == expected.shape
        and expected_ours.dtype == expected.dtype
    ):
        expected = expected_ours
        reference = reference_ours if reference_ours is not None else reference
    if expected.shape != actual.shape or expected.dtype != actual.dtype:
        raise ExportError(
            f"{where}: generated {tuple(actual.shape)}:{actual.dtype} "
            f"vs source {tuple(expected.shape)}:{expected.dtype}"
        )
    if not expected.is_floating_point():
        if not torch.equal(expected, actual):
            wrong = (expected != actual).nonzero()[0].tolist()
            raise ExportError(
                f"{where}: generated module differs from the source at {wrong} (an exact dtype)"
            )
        return
    dtype, eps = actual.dtype, torch.finfo(actual.dtype).eps
    expected, actual = expected.cpu(), actual.cpu()
    if actual.element_size() == 1:  # float8: judged in float32 (torch's isinf & co. do not take it)
        expected, actual = expected.float(), actual.float()
    reference = reference.cpu().double() if reference is not None else None
    if perturbed is not None:
        perturbed = perturbed.cpu().double() if perturbed.shape == expected.shape else None
    if reference_ours is not None and reference is not None and reference_ours.shape == reference.shape:
        reference_ours = reference_ours.cpu().double()
    else:
        reference_ours = reference
    rounded = reference_ours.to(dtype).to(actual.dtype) if reference_ours is not None else None
    difference = _nonfinite_difference(expected, actual, rounded)
    if difference is not None:
        raise ExportError(
            f"{where}: generated module's non-finite values differ from the source's: {difference}"
        )
    eager_alone = reference is None
    if eager_alone:
        # eager stands for the reference: the generated module may err one rounding step from it
        reference = reference_ours = expected.double()
    # eager's error where eager and float64 are finite; the generated module's where it is finite
    # too: where eager is not but float64 is, eager overflowed and is no measure, as in
    # _nonfinite_difference (a row of a float32 layer norm holding 1e20 and nothing else: eager
    # NaN, a kernel 0, float64 a finite value; its NaN would pass, so its 0 passes too)
    finite = torch.isfinite(reference) & torch.isfinite(reference_ours) & torch.isfinite(expected)
    ours = finite & torch.isfinite(actual)
    _judge_elements(
        expected, actual, reference, reference_ours, finite, ours, eager_alone, dtype, where, perturbed
    )
    ref = reference[finite]
    rms_eager = _rms_error(expected[finite], ref)
    rms_ours = _rms_error(actual[ours], reference_ours[ours])
    scale_rms = ref.square().mean().sqrt().item() if ref.numel() else 0.0
    rms_bound = ERROR_MULTIPLIER * rms_eager + RMS_ROUNDING_STEPS * eps * scale_rms
    if rms_ours > rms_bound:
        raise ExportError(
            f"{where}: generated module's error against float64 is {rms_ours:.3g} (root mean square), "
            f"eager's {rms_eager:.3g}; accepted up to {rms_bound:.3g} ({ERROR_MULTIPLIER:g}x eager's "
            f"plus {RMS_ROUNDING_STEPS:g} {actual.dtype} rounding steps of the outputs' scale)"
        )


#: how many rounding steps of an element's own magnitude (its dtype's eps times it) the generated
#: module may err there beyond its floor: kernels compute in float32 with approximate exp, rsqrt
#: and division of a few float32 steps each, which in a float32 output is a few of its own steps
ROUNDING_STEPS = 4.0
#: how many times float64's own move under a one-step nudge of the inputs (:func:`run64_perturbed`)
#: the generated module may err
SENSITIVITY_MULTIPLIER = 4.0
#: an element shows cancellation where its noise (:func:`element_bounds`) exceeds this many rounding
#: steps of its own magnitude: it is a small difference of larger values
CANCELLATION_STEPS = 16.0
#: the floor of an element is taken over the elements no larger than it, and at least over this
#: many of the smallest elements that show cancellation: at the few smallest of a cancellation,
#: eager's error and float64's move may both happen to be small, and the elements below it may be
#: small for another reason (a small weight) with noise in proportion
SMALLEST = 16
#: how many elements, neighbours in size, an element's noise is averaged over in a floor
NEIGHBOURHOOD = 32
#: how many times that mean a floor is: a mean sits below most of the noises it averages
NEIGHBOURHOOD_MULTIPLIER = 2.0
#: how many times that mean a floor is among the elements that show cancellation, in a float32 or
#: float64 output: there the noise is the rounding of the values that cancelled (a row's mean in a
#: norm, where an element is near it), which eager's error and the nudge each sample once per
#: element, and a kernel computes in the outputs' own precision as eager does, so it errs as much
#: as eager may (in a row whose float32 mean eager happens to round exactly, a kernel's is a step
#: off). A bf16 or fp16 output's kernel computes in float32, more precisely than eager's own
#: roundings: there :data:`NEIGHBOURHOOD_MULTIPLIER` holds, and more would accept a zeroed element
#: of a decoder layer
CANCELLATION_MULTIPLIER = 4.0
#: the seed of the nudge
PERTURBATION_SEED = 0


def element_bounds(
    expected: torch.Tensor,
    reference: torch.Tensor,
    reference_ours: torch.Tensor,
    finite: torch.Tensor,
    eager_alone: bool,
    dtype: torch.dtype,
    perturbed: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per element, how far from ``reference_ours`` (float64's, float64 dtype) the generated module
    may be: a floor, plus :data:`ROUNDING_STEPS` rounding steps of the element's own magnitude, plus
    the dtype's smallest subnormal step and float32's smallest normal number (float32 arithmetic may
    flush subnormals to zero).

    The floor of an element is its own *noise*, or :data:`NEIGHBOURHOOD_MULTIPLIER` times the
    largest mean noise of :data:`NEIGHBOURHOOD` neighbours in size among the elements no larger
    than it (and, among the elements that show cancellation, :data:`CANCELLATION_STEPS`, at least
    among the :data:`SMALLEST` smallest of them, :data:`CANCELLATION_MULTIPLIER` times in a float32
    or float64 output), whichever is larger. An element's noise is
    :data:`ERROR_MULTIPLIER` times eager's error there, or :data:`SENSITIVITY_MULTIPLIER` times how
    far float64 moves there when its inputs and parameters are nudged by a rounding step
    (``perturbed``: :func:`run64_perturbed`'s outputs), whichever is larger. Where an output holds
    cancellations (a residual add, a mean subtracted, a matmul's sum), the small elements' noise is
    set by the larger values that cancelled, so every element gets it, also one where eager happened
    to round exactly; where an output's noise grows with its values (a norm, a softmax), an
    element's floor stays in proportion to it, so a sign flip, a zeroed element or a swapped pair is
    refused however small the element. Means, not maxima, of the neighbours: the largest of
    thousands of noises would set the floor of every larger element.

    ``finite``: where eager's error is measured and the bounds are read (eager and float64
    finite: elsewhere eager is no measure, :func:`judge_output`). ``eager_alone``: no float64 run
    (``reference`` is eager itself): the floor is one rounding step of the outputs' scale, as
    eager's own error cannot show cancellation; ``dtype``: the outputs' (a float8 output is judged
    in float32). Returns the bounds and the floors."""
    info = torch.finfo(dtype)
    eps, tiny = info.eps, info.smallest_normal * info.eps + torch.finfo(torch.float32).smallest_normal
    own = reference_ours.abs().nan_to_num(0.0, 0.0, 0.0)
    if eager_alone:
        magnitude = expected.double().abs().where(finite, 0.0)
        floor = torch.full_like(own, eps * (magnitude.max().item() if magnitude.numel() else 0.0))
        return ROUNDING_STEPS * eps * own + tiny + floor, floor
    noise = ERROR_MULTIPLIER * (expected.double() - reference).abs().where(finite, 0.0)
    if perturbed is not None and perturbed.shape == reference.shape:
        moved = (perturbed.double() - reference).abs()
        noise = torch.maximum(noise, SENSITIVITY_MULTIPLIER * moved.where(moved.isfinite() & finite, 0.0))
    floor = noise
    magnitude = reference.abs()
    cancelled = finite & (noise > CANCELLATION_STEPS * eps * magnitude)
    # every measured element, and those that show cancellation: where a rounding of eager or a
    # nudge happened to cancel at an element, its neighbours in size do not all share that luck
    pools = (
        (finite, 0.0, NEIGHBOURHOOD_MULTIPLIER),
        (
            cancelled,
            _smallest(magnitude[cancelled]),
            CANCELLATION_MULTIPLIER if eps <= torch.finfo(torch.float32).eps else NEIGHBOURHOOD_MULTIPLIER,
        ),
    )
    for population, at_least, multiplier in pools:
        if population.any():
            sizes, order = magnitude[population].sort()
            typical = multiplier * _neighbourhood_means(noise[population][order]).cummax(0).values
            below = torch.searchsorted(sizes, own.clamp(min=at_least), right=True) - 1
            floor = torch.maximum(floor, typical[below.clamp(min=0)].where(below >= 0, 0.0))
    return ROUNDING_STEPS * eps * own + tiny + floor, floor


def _smallest(sizes: torch.Tensor) -> float:
    """The :data:`SMALLEST`-th smallest of ``sizes`` (their largest where there are fewer; 0 for none)."""
    return sizes.sort().values[:SMALLEST].max().item() if sizes.numel() else 0.0


def _neighbourhood_means(noise: torch.Tensor) -> torch.Tensor:
    """Each element's mean noise over the :data:`NEIGHBOURHOOD` elements around it (in the order
    given: by size), so that one element's outlying noise does not set the floor of all larger ones."""
    n = noise.numel()
    if n <= NEIGHBOURHOOD:
        return noise.mean().expand(n)
    sums = torch.cat([noise.new_zeros(1), noise.cumsum(0)])
    start = (torch.arange(n, device=noise.device) - NEIGHBOURHOOD // 2).clamp(0, n - NEIGHBOURHOOD)
    return (sums[start + NEIGHBOURHOOD] - sums[start]) / NEIGHBOURHOOD


def _judge_elements(
    expected, actual, reference, reference_ours, finite, ours, eager_alone, dtype, where, perturbed
) -> None:
    """Refuse the generated module's outputs where any element is outside its bound
    (:func:`element_bounds`), naming the worst one."""
    if not ours.any():
        return
    bounds, floor = element_bounds(expected, reference, reference_ours, finite, eager_alone, dtype, perturbed)
    error = (actual.double() - reference_ours).abs().where(ours, 0.0)
    off = error > bounds
    if not off.any():
        return
    ratio = (error / bounds).where(off, 0.0)
    at = tuple(divmod_index(int(ratio.argmax()), actual.shape))
    floor_text = (
        f", plus a floor of {floor[at].item():.3g} (eager's error and float64's move under a nudge of "
        "the inputs, at elements no larger)"
        if floor[at]
        else ""
    )
    raise ExportError(
        f"{where}: generated module's error against float64 at {list(at)} is {error[at].item():.3g} "
        f"(it gives {actual[at].item():.6g}, float64 {reference_ours[at].item():.6g}, eager "
        f"{expected[at].item():.6g}); accepted up to {bounds[at].item():.3g} there "
        f"({ROUNDING_STEPS:g} {dtype} rounding steps of its magnitude{floor_text}); "
        f"{int(off.sum())} of {off.numel()} elements are off"
    )


def divmod_index(flat: int, shape) -> list[int]:
    """The index of element ``flat`` of a contiguous tensor of ``shape``."""
    index = []
    for size in reversed(list(shape)):
        flat, rest = divmod(flat, size)
        index.append(rest)
    return index[::-1]


def judge(
    expected, actual, reference, where: str, reference_ours=None, expected_ours=None, perturbed=None
) -> None:
    """Every output of one call: the generated module's against eager's and float64's
    (``reference_ours`` and ``expected_ours``: float64's and eager's outputs making the generated
    module's choices, where they differ from eager's; ``perturbed``: :func:`run64_perturbed`'s)."""
    exp, act = _flat(expected), _flat(actual)
    ref = _flat(reference) if reference is not None else (None,) * len(exp)
    ours = _flat(reference_ours) if reference_ours is not None else (None,) * len(exp)
    eager_ours = _flat(expected_ours) if expected_ours is not None else (None,) * len(exp)
    nudged = _flat(perturbed) if perturbed is not None else (None,) * len(exp)
    if len(exp) != len(act):
        raise ExportError(f"{where}: the generated module returns {len(act)} tensors, the source {len(exp)}")
    for k, (e, a, r, o, eo, n) in enumerate(zip(exp, act, ref, ours, eager_ours, nudged)):
        usable = isinstance(r, torch.Tensor) and r.shape == e.shape
        judge_output(
            e,
            a,
            r if usable else None,
            f"{where}, output {k}",
            o if usable and isinstance(o, torch.Tensor) else None,
            eo if isinstance(eo, torch.Tensor) else None,
            n if usable and isinstance(n, torch.Tensor) else None,
        )


def check_outputs(
    source: torch.nn.Module, inputs: list[torch.Tensor], actual, where: str, reference: bool = True
) -> None:
    """Judge ``actual`` (what a generated module returned for ``inputs``) against the source module's
    outputs and, unless ``reference`` is False, its float64 twin's (which must run: tests use this)."""
    with torch.no_grad():
        expected = source(*inputs)
    if not reference:
        judge(expected, actual, None, where)
        return
    upcast = upcast64(source)  # one float64 copy for both float64 runs
    judge(
        expected,
        actual,
        run64(source, inputs, upcast),
        where,
        perturbed=run64_perturbed(source, inputs, upcast),
    )


def check_chosen(
    source: torch.nn.Module, inputs: list[torch.Tensor], actual, choices: list[torch.Tensor], where: str
) -> None:
    """:func:`check_outputs` for outputs whose top-k picks ``choices`` were recorded (each judged
    against the float64 run that picks as it did): where the call that made ``actual`` could not
    be watched (a CUDA graph's replay calls no ``topk``), the picks of the same module's plain call
    on the same inputs."""
    expected, eager = run_recording_choices(source, inputs)
    judge(expected, actual, where=where, **references_making(source, inputs, eager, choices))


def references_making(
    source: torch.nn.Module,
    inputs: list[torch.Tensor],
    eager_choices: list[torch.Tensor],
    choices: list[torch.Tensor],
    upcast: torch.nn.Module | None = None,
) -> dict:
    """What a call's outputs are judged against where eager picked ``eager_choices`` and the call
    ``choices`` (:func:`judge`'s keyword arguments): float64 making eager's picks (``reference``),
    float64 and eager making the call's where they differ (``reference_ours``, ``expected_ours``:
    its picks must be a top-k of float64's input within eager's error at each top-k,
    :func:`_replayed_topk`), and float64 nudged (``perturbed``). ``upcast``: :func:`upcast64` of
    ``source``, made here where not given (one float64 copy for every float64 run)."""
    upcast = upcast if upcast is not None else upcast64(source)
    seen: list[torch.Tensor] = []  # eager's inputs to each top-k, making the call's picks
    expected_ours = (
        None if same_choices(eager_choices, choices) else run_choosing(source, inputs, choices, seen)
    )
    reference, reference_ours = paired_references(
        lambda picks, fallback=True, near=None: run64_choosing(source, inputs, picks, upcast, fallback, near),
        eager_choices,
        choices,
        seen,
    )
    return {
        "reference": reference,
        "reference_ours": reference_ours,
        "expected_ours": expected_ours,
        "perturbed": run64_perturbed(source, inputs, upcast, eager_choices),
    }


def check_call(
    source: torch.nn.Module, generated, inputs: list[torch.Tensor], where: str, reference: bool = True
):
    """Call the generated module on ``inputs`` and judge its outputs (:func:`check_outputs`, each
    against the float64 run that makes its choices); returns them."""
    actual, ours = run_recording_choices(generated, inputs)
    if not reference:
        judge(run_recording_choices(source, inputs)[0], actual, None, where)
        return actual
    check_chosen(source, inputs, actual, ours, where)
    return actual
