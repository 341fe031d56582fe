"""Lower a Thunder execution trace into the typed model (:mod:`thunder_aot.ir`)."""

from __future__ import annotations

import builtins
import dataclasses
import keyword
import linecache
import re
import sys
import warnings
from pathlib import Path

import torch

from thunder_aot.errors import ExportError
from thunder_aot.frontend.trace import TracedBucket
from thunder_aot.ir import (
    FUSION_PREFIX,
    Arg,
    Bucket,
    BucketProgram,
    Const,
    DeviceArg,
    DType,
    PrimOp,
    ProgramInput,
    Ref,
    Region,
    Seq,
    SliceArg,
    SourceRef,
    TensorSpec,
    TorchCall,
    TorchName,
    Value,
    step_reads,
)

with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # Thunder warns about optional executors it cannot find
    from thunder.core import devices, dtypes, prims
    from thunder.core.proxies import NumberProxy, TensorProxy

# Names the generated code uses at module level; a traced value with one of these names is renamed.
RESERVED_NAMES = frozenset(
    {
        "torch",
        "nvfuser",
        "nvfuser_direct",
        "triton",
        "tl",
        "fd",
        "FusionDefinition",
        "DataType",
        "forward",
        "math",
    }
    | {
        "device",
        "os",
        "threading",
        "row",
        "rows",
        "cols",
        "mask",
        "N",
        "BLOCK",
    }  # generated code's own locals
    | set(dir(builtins))
    | set(keyword.kwlist)
)

#: torch ops whose Thunder decomposition drops NaN (relu's where(x > 0, x, 0)) that eager propagates
NAN_PROPAGATING = frozenset({"relu"})

_SKIPPED_PRIMS = {
    prims.PrimIDs.UNPACK_TRIVIAL,
    prims.PrimIDs.DEL,
    prims.PrimIDs.COMMENT,
    prims.PrimIDs.UNPACK_SEQUENCE,
}


#: ops of Thunder's torch executor that are not torch functions, by name: how each becomes one
_THUNDER_OPS_AS_TORCH = {
    "copy_with_setitem_impl": lambda lowering, bsym: lowering._copy_with_setitem(bsym),
    "copy_": lambda lowering, bsym: lowering._copy_into(bsym),
}


def _relative_source(filename: str) -> str:
    """A file name that does not depend on where things are installed (for stable output)."""
    path = Path(filename).resolve()
    best = None
    for entry in sys.path:
        if not entry:
            continue
        try:
            rel = path.relative_to(Path(entry).resolve())
        except (ValueError, OSError):
            continue
        if best is None or len(rel.parts) < len(best.parts):
            best = rel
    return (best or Path(path.name)).as_posix()


def source_ref(bsym) -> SourceRef | None:
    if not bsym.source_filename or not bsym.source_positions:
        return None
    line = bsym.source_positions.lineno
    text = linecache.getline(bsym.source_filename, line).strip()
    return SourceRef(_relative_source(bsym.source_filename), line, text)


def state_name(key: str) -> str:
    """The generated code's name of a parameter or buffer: ``t_`` and its state_dict key, each
    character that cannot stand in an identifier an underscore (``layer.mlp.experts.down_proj`` ->
    ``t_layer_mlp_experts_down_proj``)."""
    return "t_" + re.sub(r"\W", "_", key)


class Lowerer:
    def __init__(self, traced: TracedBucket, input_names: list[str]) -> None:
        self.traced = traced
        self.input_names = input_names
        self.renames: dict[str, str] = {}

    def name(self, proxy_name: str) -> str:
        if proxy_name in self.renames:
            return self.renames[proxy_name]
        new = proxy_name
        while new in RESERVED_NAMES:
            new = new + "_"
        self.renames[proxy_name] = new
        return new

    def value(self, p: TensorProxy) -> Value:
        return Value(
            self.name(p.name),
            TensorSpec(
                tuple(int(s) for s in p.shape),
                dtypes.to_torch_dtype(p.dtype).__repr__().removeprefix("torch."),
            ),
        )

    def arg(self, x: object, where: str) -> Arg:
        if isinstance(x, TensorProxy):
            return Ref(self.name(x.name))
        if isinstance(x, NumberProxy):
            return Const(x.value)
        if x is None or isinstance(x, (bool, int, float, str)):
            return Const(x)
        if isinstance(x, dtypes.dtype):
            return DType(repr(dtypes.to_torch_dtype(x)).removeprefix("torch."))
        if isinstance(x, torch.dtype):
            return DType(repr(x).removeprefix("torch."))
        if isinstance(x, (devices.Device, torch.device)):
            return DeviceArg()
        if isinstance(x, torch.memory_format):
            return TorchName(str(x))  # "torch.contiguous_format"
        if isinstance(x, (list, tuple)):
            return Seq(tuple(self.arg(i, where) for i in x), is_list=isinstance(x, list))
        if isinstance(x, slice):  # x[:, :k] that no fusion claimed
            return SliceArg(self.arg(x.start, where), self.arg(x.stop, where), self.arg(x.step, where))
        if x is Ellipsis:
            return TorchName("...")
        raise ExportError(f"{where}: cannot export an argument of type {type(x).__name__} ({x!r})")

    def outputs(self, bsym, where: str) -> tuple[Value, ...]:
        outs = []
        for o in bsym.flat_outs:
            if not isinstance(o, TensorProxy):
                raise ExportError(
                    f"{where} produces a {type(o).__name__}; only tensor results can be exported"
                )
            outs.append(self.value(o))
        return tuple(outs)

    def region(self, bsym) -> Region:
        fused = self.traced.regions[bsym.sym.name]
        # Thunder passes that run after the fusion pass may rename the values a region reads or
        # writes (e.g. a view left to the torch executor gets a new output name): the call in the
        # execution trace has the final names, the recorded prims the earlier ones.
        for recorded, final in zip([*fused.inputs, *fused.outputs], [*bsym.args, *bsym.flat_outs]):
            if (
                isinstance(recorded, TensorProxy)
                and isinstance(final, TensorProxy)
                and recorded.name != final.name
            ):
                self.renames[recorded.name] = self.name(final.name)
        ops = []
        for prim_bsym, top in fused.prims:
            where = f"prims.{prim_bsym.sym.name}"
            op = PrimOp(
                prim=prim_bsym.sym.id.name.lower(),
                outputs=self.outputs(prim_bsym, where),
                args=tuple(self.arg(a, where) for a in prim_bsym.args),
                kwargs=tuple(sorted((k, self.arg(v, where)) for k, v in prim_bsym.kwargs.items())),
                source=source_ref(top),
            )
            ops += self.nan_propagating(op, ops) if top.sym.name in NAN_PROPAGATING else [op]
        inputs = tuple(self.value(p) for p in fused.inputs)
        outputs = tuple(self.value(p) for p in fused.outputs)
        return Region(
            name=bsym.sym.name,
            inputs=inputs,
            outputs=outputs,
            ops=tuple(ops),
            source_calls=self.source_calls(fused, bsym.sym.name, inputs, outputs),
        )

    def source_calls(
        self, fused, region: str, inputs: tuple[Value, ...], outputs: tuple[Value, ...]
    ) -> tuple[TorchCall, ...]:
        """The region's source-level torch calls, their intermediate values named apart from the
        program's (``<region>_<name>``); () where any is not a torch call or they do not compute
        exactly the region's outputs from its inputs."""
        if not fused.source_calls:
            return ()
        boundary = {v.name for v in (*inputs, *outputs)}
        own = Lowerer(self.traced, self.input_names)
        own.renames = {p.name: self.name(p.name) for p in (*fused.inputs, *fused.outputs)}
        own.renames.update({made: self.name(output) for made, output in fused.source_calls.outputs.items()})
        calls = []
        try:
            for b in fused.source_calls.calls:
                for proxy in (*b.flat_args, *b.flat_outs):
                    if isinstance(proxy, TensorProxy) and proxy.name not in own.renames:
                        own.renames[proxy.name] = f"{region}_{proxy.name}"
                calls.append(own.torch_call(b))
        except ExportError:
            return ()
        defined = {v.name for v in inputs}
        for call in calls:
            if any(name not in defined for name in step_reads(call)):
                return ()
            defined.update(o.name for o in call.outputs)
        return tuple(calls) if boundary - {v.name for v in inputs} <= defined else ()

    def nan_propagating(self, op: PrimOp, before: list[PrimOp]) -> list[PrimOp]:
        """``where(x > 0, x, 0)`` (Thunder's relu) gives 0 for NaN where eager's relu gives NaN: its
        condition becomes ``(x > 0) | (x != x)``, true for NaN, so the NaN passes through."""
        if op.prim != "where" or not isinstance(op.args[0], Ref):
            return [op]
        cond = next((o for o in before for v in o.outputs if v.name == op.args[0].name), None)
        if cond is None or cond.prim not in ("gt", "ge") or cond.args[0] != op.args[1]:
            return [op]
        x, test = cond.args[0], cond.outputs[0]
        is_nan = Value(self.name(f"{test.name}_nan"), test.spec)
        either = Value(self.name(f"{test.name}_or_nan"), test.spec)
        return [
            PrimOp("ne", (is_nan,), (x, x), source=op.source),
            PrimOp("bitwise_or", (either,), (Ref(test.name), Ref(is_nan.name)), source=op.source),
            dataclasses.replace(op, args=(Ref(either.name), *op.args[1:])),
        ]

    def _copy_with_setitem(self, bsym) -> TorchCall:
        """Thunder's ``copy_with_setitem(a, key, value)`` (``a[key] = value`` on a copy), for keys of
        index tensors: ``torch.index_put(a, key, value)``."""
        a, key, value = bsym.args
        keys = key if isinstance(key, (tuple, list)) else (key,)
        if not all(isinstance(k, TensorProxy) for k in keys):
            raise ExportError(
                f"cannot export an assignment through a {type(key).__name__} key (x[key] = value): "
                "expected an index tensor or a tuple of them"
            )
        where = "setitem"
        return TorchCall(
            target="torch.index_put",
            outputs=self.outputs(bsym, where),
            args=(
                self.arg(a, where),
                Seq(tuple(self.arg(k, where) for k in keys), is_list=False),
                self.arg(value, where),
            ),
            kwargs=(),
            source=source_ref(bsym),
        )

    def _copy_into(self, bsym) -> TorchCall:
        """Thunder's ``copy_(copy_from, copy_to, grad_enabled=...)`` (an in-place op's write-back):
        ``torch.Tensor.copy_(copy_to, copy_from)``."""
        copy_from, copy_to = bsym.args[:2]
        where = "copy_"
        return TorchCall(
            target="torch.Tensor.copy_",
            outputs=self.outputs(bsym, where),
            args=(self.arg(copy_to, where), self.arg(copy_from, where)),
            kwargs=(),
            source=source_ref(bsym),
        )

    def torch_call(self, bsym) -> TorchCall:
        if bsym.sym.name in _THUNDER_OPS_AS_TORCH:
            return _THUNDER_OPS_AS_TORCH[bsym.sym.name](self, bsym)
        module = getattr(bsym.sym, "module", None)
        module_name = "torch.Tensor" if module is torch.Tensor else getattr(module, "__name__", "")
        target = f"{module_name}.{bsym.sym.name}"
        if not (module_name == "torch" or module_name.startswith("torch.")):
            raise ExportError(
                f"cannot export op {bsym.sym.name!r} (executor {bsym.sym.executor}, "
                f"module {module_name or '?'}): it is neither fused nor a torch function"
            )
        where = target
        return TorchCall(
            target=target,
            outputs=self.outputs(bsym, where),
            args=tuple(self.arg(a, where) for a in bsym.args),
            kwargs=tuple(sorted((k, self.arg(v, where)) for k, v in bsym.kwargs.items())),
            source=source_ref(bsym),
        )

    def lower(self, index: int, bucket: Bucket) -> tuple[BucketProgram, list[ProgramInput]]:
        trace = self.traced.execution_trace
        program_inputs = []
        kinds = [self.traced.arg_kinds.get(a.name, (None, None)) for a in trace.args]
        taken = {a.name for a in trace.args} | set(self.renames.values())
        for a, (kind, source_name) in zip(trace.args, kinds):
            if kind is None:
                raise ExportError(
                    f"traced argument {a.name!r} is neither an input nor a parameter/buffer of the module"
                )
            named = state_name(source_name) if kind != "input" else a.name
            if a.name not in self.renames and named not in taken and named not in RESERVED_NAMES:
                # named for its state_dict key, as Thunder names most (it names some after the local
                # variable that first held them: GPT-OSS's experts gave "weight", "selected_weights")
                self.renames[a.name] = named
                taken.add(named)
            program_inputs.append(ProgramInput(self.name(a.name), kind, source_name))
        inputs = [self.value(a) for a in trace.args]
        steps = []
        outputs: tuple[str, ...] = ()
        for bsym in trace.bound_symbols:
            sym_id = bsym.sym.id
            if sym_id in _SKIPPED_PRIMS:
                continue
            if sym_id == prims.PrimIDs.RETURN:
                result = bsym.args[0]
                if isinstance(result, dict):
                    result = result["output"]
                flat = result if isinstance(result, (tuple, list)) else (result,)
                if isinstance(flat, (tuple, list)) and len(flat) == 1 and isinstance(flat[0], (tuple, list)):
                    flat = flat[0]
                for o in flat:
                    if not isinstance(o, TensorProxy):
                        raise ExportError(
                            f"the module returns a {type(o).__name__}; "
                            "expected a tensor or a tuple of tensors"
                        )
                outputs = tuple(self.name(o.name) for o in flat)
                continue
            if bsym.sym.name == "update_aliases":  # Thunder's note after an in-place op: the same tensors
                for out, alias in zip(bsym.flat_proxy_outs, bsym.flat_proxy_args):
                    self.renames[out.name] = self.name(alias.name)
                continue
            if bsym.sym.name.startswith(FUSION_PREFIX) and bsym.sym.name in self.traced.regions:
                steps.append(self.region(bsym))
            else:
                steps.append(self.torch_call(bsym))
        by_name = {v.name: v for v in inputs}
        ordered = [p for p in program_inputs if p.kind == "input"] + sorted(
            (p for p in program_inputs if p.kind != "input"), key=lambda p: p.source_name
        )
        program = BucketProgram(
            index=index,
            bucket=bucket,
            inputs=tuple(by_name[p.name] for p in ordered),
            steps=tuple(steps),
            outputs=outputs,
        )
        return program, ordered
