"""Trace a module with Thunder for one concrete set of input shapes.

Fusion regions are formed by Thunder itself: :class:`AotFusionExecutor` is a
``thunder.extend.FusionExecutor`` that claims the prims a backend can lower, and its fusion pass
groups them with Thunder's data-dependent partitioner (``fuse_bound_symbols``), as Thunder's
torch.compile executor does. Everything it does not claim is executed by Thunder's torch
executor and ends up in the execution trace as a plain torch call.

This module imports Thunder first, with its warnings silenced; :mod:`.lower` and :mod:`.torch_ops`
import it after (the package imports this module first).
"""

from __future__ import annotations

import linecache
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import torch

from thunder_aot.errors import ExportError
from thunder_aot.ir import FUSION_PREFIX

with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # thunder warns about optional executors it cannot find
    import thunder
    from thunder.core import prims, utils
    from thunder.core.proxies import NumberProxy, Proxy, unvariableify
    from thunder.core.symbol import BoundSymbol
    from thunder.core.trace import TraceCtx, from_trace, tracectx
    from thunder.core.transform_common import dce
    from thunder.executors.data_dependent_partition import Node, fuse_bound_symbols
    from thunder.executors.passes import transform_for_execution
    from thunder.executors.torchex import ex as torch_executor
    from thunder.executors.utils import Region as ThunderRegion
    from thunder.extend import FusionExecutor

from thunder_aot.frontend import torch_ops  # noqa: E402  (after the quiet import of Thunder above)
from thunder_aot.frontend.tracing_as_torch_runs import tracing_as_torch_runs  # noqa: E402


@dataclass
class SourceCalls:
    """A region's top-level symbols as the torch executor runs them, and which of the values they
    make are the region's outputs (by the executor's name -> the region's name)."""

    calls: list[BoundSymbol]
    outputs: dict[str, str]


@dataclass
class FusedRegion:
    """What the fusion pass recorded about one region: flattened prims with their source bsym."""

    name: str
    inputs: list[Proxy]
    outputs: list[Proxy]
    prims: list[tuple[BoundSymbol, BoundSymbol]]  # (prim bsym, the top-level bsym it came from)
    #: the top-level symbols as torch calls (None: the torch executor could not take them whole)
    source_calls: SourceCalls | None = None


def _region_trace(bsyms: list[BoundSymbol], inputs: list[Proxy], outputs: list[Proxy]) -> TraceCtx:
    """The region's bound symbols as a trace of their own, for Thunder's torch executor."""
    from thunder.core.codeutils import SigInfo

    region_trace = TraceCtx(None)
    region_trace.args = inputs
    region_trace.kwargs = {}
    region_trace.names = {a.name for a in inputs}
    with tracectx(region_trace):
        for a in inputs:
            prims.unpack_trivial(a, name=a.name)
    region_trace.bound_symbols += list(bsyms)
    region_trace.bound_symbols.append(prims.python_return.bind(outputs, output=None))
    for bsym in bsyms:
        for o in bsym.flat_outs:
            if o is not None:
                region_trace.add_name(o.name)
    region_trace._siginfo = SigInfo("region")
    region_trace._siginfo.args = [(a.name, None) for a in inputs]
    return region_trace


def _region_callable(bsyms: list[BoundSymbol], inputs: list[Proxy], outputs: list[Proxy]) -> Callable:
    """Execute a region's prims with Thunder's torch executor (only used while tracing)."""
    return transform_for_execution(
        _region_trace(bsyms, inputs, outputs), executors_list=(torch_executor,)
    ).python_callable(include_decorators=False)


#: bound symbols of a torch-executor trace that are bookkeeping, not calls
_BOOKKEEPING = ("UNPACK_TRIVIAL", "RETURN", "DEL", "COMMENT", "UNPACK_SEQUENCE")


def _source_calls(group: list[BoundSymbol], inputs: list[Proxy], outputs: list[Proxy]) -> SourceCalls | None:
    """The region's top-level symbols (the user's torch calls as Thunder recorded them, before
    decomposition into prims) as Thunder's torch executor runs them: what the region runs as where a
    backend cannot make it a kernel. None where the torch executor cannot take them whole."""
    try:
        executed = transform_for_execution(
            _region_trace(group, inputs, outputs), executors_list=(torch_executor,)
        )
    except Exception:  # noqa: BLE001 - the region then runs as its prims, one torch call each
        return None
    calls = [
        b
        for b in executed.bound_symbols
        if not (isinstance(b.sym.id, prims.PrimIDs) and b.sym.id.name in _BOOKKEEPING)
    ]
    returned = next((b for b in executed.bound_symbols if b.sym.id == prims.PrimIDs.RETURN), None)
    if returned is None:
        return None
    results = returned.args[0]
    results = list(results) if isinstance(results, (list, tuple)) else [results]
    if len(results) != len(outputs):
        return None
    # the executor may re-trace a call and name its result anew: the region's output, in order
    return SourceCalls(calls, {r.name: o.name for r, o in zip(results, outputs) if hasattr(r, "name")})


class AotFusionExecutor(FusionExecutor):
    """Claims the prims in ``claimable`` (PrimIDs) and fuses maximal groups of them into regions."""

    def __init__(self, claimable: Iterable[prims.PrimIDs]) -> None:
        super().__init__("thunder_aot", version="1")
        for prim_id in claimable:
            self.register_supported(prim_id)
        self.regions: list[FusedRegion] = []

    def _flatten(
        self, bsym: BoundSymbol, top: BoundSymbol, out: list[tuple[BoundSymbol, BoundSymbol]]
    ) -> None:
        if self.can_execute(bsym):
            out.append((bsym, top))
            return
        for sub in bsym.subsymbols:
            self._flatten(sub, top, out)

    def _fusible_group(self, group: list[BoundSymbol]) -> bool:
        return len(group) > 1 or self.can_fuse(group[0])

    def _has_reduction(self, group: list[BoundSymbol]) -> bool:
        flat: list[tuple[BoundSymbol, BoundSymbol]] = []
        for bsym in group:
            self._flatten(bsym, bsym, flat)
        return any(prims.OpTags.REDUCTION_OP in (b.sym.tags or ()) for b, _ in flat)

    def _sink_into_consumers(self, groups: list[list[BoundSymbol]], consumers) -> list[list[BoundSymbol]]:
        """Merge a fusible group into the first later group that reads it, when that group is
        fusible too and nothing in between reads it: Thunder's partitioner keeps them apart when an
        unrelated op (a linear) stands between, as with ``silu(gate(x)) * up(x)`` or the views of
        ``q_proj(x).view(...).transpose(1, 2)`` before a rotary region. Deferring the earlier group
        to the later one's place is always legal (its inputs already exist) and saves a kernel and
        a round trip through memory (or, for views, the copy a kernel's contiguous input costs).
        Only groups without reductions merge: every backend then still makes one kernel of them."""
        groups = [list(g) for g in groups]
        changed = True
        while changed:
            changed = False
            position = {id(b): i for i, g in enumerate(groups) for b in g}
            for i, group in enumerate(groups):
                if not group or not self._fusible_group(group) or self._has_reduction(group):
                    continue
                members = {id(b) for b in group}
                readers = {
                    position[id(c)]
                    for b in group
                    for out in b.flat_proxy_outs
                    for c in consumers.get(out, [])
                    if id(c) not in members and id(c) in position
                }
                if not readers:
                    continue
                first = min(readers)
                target = groups[first]
                if first > i and self._fusible_group(target) and not self._has_reduction(target):
                    groups[first] = group + target
                    groups[i] = []
                    changed = True
                    break
        return [g for g in groups if g]

    def fusion_pass(self, trace: TraceCtx) -> TraceCtx:
        fused_trace = from_trace(trace)
        producers, consumers = utils.producers_and_consumers(trace)

        def fusible(node: Node) -> bool:
            return self._fusible_group(node.group_bsyms)

        groups = fuse_bound_symbols(trace, lambda a, b: fusible(a) and fusible(b))
        groups = self._sink_into_consumers(groups, consumers)
        bsyms_out: list[BoundSymbol] = []
        for group in groups:
            if len(group) == 1 and not self.can_fuse(group[0]):
                bsyms_out.append(group[0])
                continue
            flat: list[tuple[BoundSymbol, BoundSymbol]] = []
            for bsym in group:
                self._flatten(bsym, bsym, flat)
            if all(prims.OpTags.SHAPE_OP in (b.sym.tags or ()) for b, _ in flat):
                # a region of only views would launch a kernel just to copy: leave it to torch
                bsyms_out.extend(group)
                continue
            region = ThunderRegion(producers, consumers, group)
            inputs = [unvariableify(x) for x in region.inputs]
            outputs = [unvariableify(x) for x in region.outputs]
            name = f"{FUSION_PREFIX}{len(self.regions)}"
            self.regions.append(
                FusedRegion(name, inputs, outputs, flat, _source_calls(group, inputs, outputs))
            )
            fn = _region_callable([b for b, _ in flat], inputs, outputs)
            bsyms_out.append(
                self.register_temporary_operation(
                    name, fn, inputs=inputs, outputs=outputs, bsyms=[b for b, _ in flat]
                )
            )
        fused_trace.bound_symbols = bsyms_out
        return dce(fused_trace)


@dataclass
class TracedBucket:
    """Thunder's execution trace for one concrete shape set, plus what lowering needs beside it."""

    execution_trace: TraceCtx
    regions: dict[str, FusedRegion]
    arg_kinds: dict[str, tuple[str, str]]  # computation arg name -> (kind, source name)
    outputs: object  # what the traced module returned (tensors), for checking
    attributes: dict[str, object]  # module settings the trace read and baked in ("norm.eps": 1e-6)


def _caused_by_interrupt(error: BaseException) -> bool:
    """Whether a KeyboardInterrupt is in ``error``'s chain of causes and contexts."""
    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        if isinstance(error, KeyboardInterrupt):
            return True
        seen.add(id(error))
        error = error.__cause__ or error.__context__
    return False


#: what a user can do about a known cause of a failed trace, by a text of Thunder's error
TRACE_HINTS = {
    "grouped_mm_fallback": (
        "transformers' grouped-mm experts run their fallback custom op for weights other than "
        "bfloat16 while a tracer runs: export the mixture of experts in bfloat16"
    ),
    "index out of range": (
        "integer inputs are drawn from -100..99 unless their spec gives their values: token ids of "
        "a 32000-word vocabulary are 1x[1..64]:i64[0..31999]"
    ),
}


def trace_module(
    module: torch.nn.Module,
    args: list[torch.Tensor],
    input_names: list[str],
    claimable: Iterable[prims.PrimIDs],
) -> TracedBucket:
    """Trace ``module(*args)`` with Thunder (no grad) and return its execution trace."""
    executor = AotFusionExecutor(claimable)
    jitted = thunder.jit(module, executors=[executor, torch_ops.executor])
    try:
        with torch.no_grad(), warnings.catch_warnings(), tracing_as_torch_runs():
            warnings.simplefilter("ignore")
            result = jitted(*args)
    except ExportError:
        raise
    except Exception as e:
        if _caused_by_interrupt(e):  # Thunder's interpreter wraps a Ctrl-C in its own error
            raise KeyboardInterrupt from e
        message = str(e).strip().splitlines()[0] if str(e).strip() else ""
        shapes = ", ".join(f"{tuple(a.shape)}:{str(a.dtype).removeprefix('torch.')}" for a in args)
        hint = next((f" ({h})" for cause, h in TRACE_HINTS.items() if cause in message), "")
        raise ExportError(
            f"Thunder could not trace {type(module).__name__} for inputs {shapes}: "
            f"{type(e).__name__}: {message}{hint}"
        ) from e
    _refuse_value_reads(module, thunder.last_traces(jitted)[0])
    execution_trace = thunder.last_traces(jitted)[-1]
    prologue = thunder.last_prologue_traces(jitted)[-1]
    arg_kinds: dict[str, tuple[str, str]] = {}
    attributes: dict[str, object] = {}
    # prologue proxy name -> where it was read from the module: "" for the module itself, then
    # attributes and items at any depth ("norm", "config.rope", "opts['bias']")
    paths: dict[str, str] = {}
    for bsym in prologue.bound_symbols:
        out = bsym.output
        if not isinstance(out, Proxy):
            continue
        parent = paths.get(getattr(bsym.args[0], "name", None)) if bsym.args else None
        step = None
        if bsym.sym.id == prims.PrimIDs.UNPACK_THUNDER_MODULE:
            paths[out.name] = ""
        elif parent is not None and bsym.sym.id in (
            prims.PrimIDs.UNPACK_SUBMODULE,
            prims.PrimIDs.UNPACK_ATTR,
        ):
            step = f".{bsym.args[1]}" if parent else str(bsym.args[1])
        elif parent is not None and bsym.sym.id == prims.PrimIDs.UNPACK_GETITEM:
            step = f"[{bsym.args[1]!r}]"
        if step is not None:
            path = paths[out.name] = parent + step
            # a setting the trace baked in (eps, a scale, a config flag): record its value
            value = getattr(out, "value", None)
            if bsym.args[1] != "training" and isinstance(value, (bool, int, float, str)):
                attributes[path] = value
        if bsym.sym.id == prims.PrimIDs.UNPACK_GETITEM and getattr(bsym.args[0], "name", None) == "args":
            index = bsym.args[1]
            arg_kinds[out.name] = ("input", input_names[index])
        elif bsym.sym.id == prims.PrimIDs.UNPACK_PARAMETER:
            arg_kinds[out.name] = ("parameter", bsym.args[1])
        elif bsym.sym.id == prims.PrimIDs.UNPACK_BUFFER:
            arg_kinds[out.name] = ("buffer", bsym.args[1])
    return TracedBucket(execution_trace, {r.name: r for r in executor.regions}, arg_kinds, result, attributes)


#: comparison prims whose result a forward can branch on, with the same test seen from the other side
_COMPARISON_FLIPS = {"eq": "eq", "ne": "ne", "lt": "gt", "le": "ge", "gt": "lt", "ge": "le"}


@dataclass(frozen=True)
class SizeCondition:
    """A test on input sizes that the module's forward evaluated (and may branch on): ``size OP
    value`` for one input's dim, or (``input`` None) a test on a value computed from sizes."""

    sizes: frozenset[tuple[int, int]]  # the (input index, axis) sizes it depends on
    op: str
    input: int | None = None
    axis: int | None = None
    value: int | None = None
    where: str = ""  # the user's source line


def size_conditions(
    module: torch.nn.Module, args: list[torch.Tensor], input_names: list[str]
) -> list[SizeCondition] | None:
    """The tests on input sizes in ``module``'s forward, found by tracing it once with Thunder's
    symbolic sizes (``cache="symbolic values"``): Thunder records each comparison of a size as a
    top-level prim of the first computation trace; one whose result no later op reads went to
    Python's control flow. None where Thunder cannot trace the module so."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Thunder calls its symbolic sizes experimental
        jitted = thunder.jit(module, cache="symbolic values", executors=[torch_ops.executor])
    try:
        with torch.no_grad(), warnings.catch_warnings(), tracing_as_torch_runs():
            warnings.simplefilter("ignore")
            jitted(*args)
    except Exception as e:  # noqa: BLE001 - the constant-size traces decide then
        if _caused_by_interrupt(e):
            raise KeyboardInterrupt from e
        return None
    trace = thunder.last_traces(jitted)[0]
    inputs = {a.name: k for k, a in enumerate(trace.args[: len(input_names)]) if isinstance(a, Proxy)}
    derived: dict[str, frozenset[tuple[int, int]]] = {}  # size proxy -> the sizes it is computed from
    # a test whose result some later op reads is arithmetic (Thunder's floor division tests signs);
    # one that nothing reads went to Python's control flow: a branch
    read = {a.name for bsym in trace.bound_symbols for a in bsym.flat_args if isinstance(a, NumberProxy)}
    found = []
    for bsym in trace.bound_symbols:
        arg_names = [a.name for a in bsym.flat_args if isinstance(a, NumberProxy)]
        if bsym.sym.id == prims.PrimIDs.SHAPE and getattr(bsym.args[0], "name", None) in inputs:
            for axis, out in enumerate(bsym.flat_outs):
                if isinstance(out, NumberProxy):
                    derived[out.name] = frozenset({(inputs[bsym.args[0].name], axis)})
            continue
        sizes = (
            frozenset().union(*(derived.get(n, frozenset()) for n in arg_names)) if arg_names else frozenset()
        )
        if not sizes:
            continue
        for out in bsym.flat_outs:
            if isinstance(out, NumberProxy):
                derived[out.name] = sizes
        if not isinstance(bsym.sym.id, prims.PrimIDs) or bsym.sym.id.name.lower() not in _COMPARISON_FLIPS:
            continue
        op = bsym.sym.id.name.lower()
        if any(isinstance(out, NumberProxy) and out.name in read for out in bsym.flat_outs):
            continue
        ref = source_line(bsym)
        a, b = bsym.args[:2]
        if (
            isinstance(a, NumberProxy)
            and len(derived.get(a.name, ())) == 1
            and a.name in _plain(derived, trace)
            and isinstance(b, int)
        ):
            ((index, axis),) = derived[a.name]
            found.append(SizeCondition(sizes, op, index, axis, b, ref))
        elif isinstance(b, NumberProxy) and b.name in _plain(derived, trace) and isinstance(a, int):
            ((index, axis),) = derived[b.name]
            found.append(SizeCondition(sizes, _COMPARISON_FLIPS[op], index, axis, a, ref))
        else:
            found.append(SizeCondition(sizes, op, where=ref))
    return found


def _plain(derived: dict, trace: TraceCtx) -> set[str]:
    """Size proxies that are an input's dim itself (outputs of ``prims.shape``), not computed from one."""
    return {
        out.name
        for bsym in trace.bound_symbols
        if bsym.sym.id == prims.PrimIDs.SHAPE
        for out in bsym.flat_outs
        if isinstance(getattr(out, "name", None), str) and out.name in derived
    }


#: torch calls that read a tensor's values into Python: what they return is a Python number (or
#: list) the trace holds as it was while tracing, and what forward does with it (a branch) too
VALUE_READS = frozenset({"torch.Tensor.item", "torch.Tensor.tolist"})


def _refuse_value_reads(module: torch.nn.Module, first: TraceCtx) -> None:
    """Refuse a forward that reads a tensor's values into Python (``.item()``, ``.tolist()``): one
    trace holds the branch it took, or the number it read, for every input."""
    for bsym in first.bound_symbols:
        if str(bsym.sym.id) in VALUE_READS:
            where = source_line(bsym) or "a line Thunder did not record"
            raise ExportError(
                f"{type(module).__name__}.forward reads a tensor's value into Python "
                f"({str(bsym.sym.id).removeprefix('torch.Tensor.')}() at {where}): the exported module "
                "would hold the branch taken, or the number read, while tracing; compute it with tensor "
                "ops (torch.where, tensor arithmetic) instead"
            )


def source_line(bsym: BoundSymbol) -> str:
    if not bsym.source_filename or not bsym.source_positions:
        return ""
    line = bsym.source_positions.lineno
    return (
        f"{bsym.source_filename.rsplit('/', 1)[-1]}:{line}: "
        f"{linecache.getline(bsym.source_filename, line).strip()}"
    )
