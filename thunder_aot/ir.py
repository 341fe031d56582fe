"""The typed model of an exported program: everything the templates print is decided here.

A traced bucket becomes a :class:`BucketProgram`: a straight-line list of steps, each either a
fusion :class:`Region` (a list of Thunder prims a backend lowers into one kernel) or a
:class:`TorchCall` (an op no fusion claimed, such as a matmul, kept as a plain torch call).
Sizes are :data:`Dim` values: an ``int`` or a :class:`SymDim` standing for a bucket's dynamic
dimension (times a constant), so that one program serves every shape in its bucket.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

#: the name prefix of the regions Thunder's fusion pass makes (and of those passes make)
FUSION_PREFIX = "aotFusion"
#: the torch call of a linear layer (merged projections and their slices)
LINEAR = "torch.nn.functional.linear"


@dataclass(frozen=True, order=True)
class SymDim:
    """``coeff * name + offset``: a size that depends on one dynamic dimension of the bucket (a KV
    cache's keys after a step: ``past + 1``)."""

    name: str
    coeff: int = 1
    offset: int = 0

    def at(self, env: dict[str, int]) -> int:
        return self.coeff * env[self.name] + self.offset

    def solve(self, size: int) -> int | None:
        """The dim's value at which this size is ``size`` (None: no integer value)."""
        scaled = size - self.offset
        return scaled // self.coeff if scaled % self.coeff == 0 else None

    @property
    def expr(self) -> str:
        """The size as a Python expression over the dim's name, parenthesized when compound."""
        text = self.name if self.coeff == 1 else f"{self.coeff} * {self.name}"
        if self.offset:
            text += f" + {self.offset}" if self.offset > 0 else f" - {-self.offset}"
        return text if text == self.name else f"({text})"


Dim = int | SymDim


def dim_value(dim: Dim, env: dict[str, int]) -> int:
    return dim if isinstance(dim, int) else dim.at(env)


@dataclass(frozen=True)
class DimRange:
    """A dynamic dimension of a bucket: every integer size in [lo, hi]."""

    name: str
    lo: int
    hi: int


@dataclass(frozen=True)
class TensorSpec:
    shape: tuple[Dim, ...]
    dtype: str  # torch dtype attribute name, e.g. "bfloat16"


# --- argument values of an op --------------------------------------------------------------


@dataclass(frozen=True)
class Ref:
    """A tensor produced earlier in the program (or one of its inputs)."""

    name: str


@dataclass(frozen=True)
class Const:
    """A Python literal: int, float, bool, str or None."""

    value: object


@dataclass(frozen=True)
class DType:
    name: str  # torch dtype attribute name


@dataclass(frozen=True)
class SizeArg:
    """A size that may be dynamic (an element of a shape argument). ``real``: the size as a float,
    where the traces held a float constant that moved with it (a mean over a dynamic dim divides by
    its size)."""

    dim: Dim
    real: bool = False


@dataclass(frozen=True)
class Seq:
    items: tuple[Arg, ...]
    is_list: bool = False


@dataclass(frozen=True)
class TorchName:
    """A torch constant spelled by its qualified name, e.g. ``torch.contiguous_format``."""

    name: str


@dataclass(frozen=True)
class SliceArg:
    """A Python ``slice`` argument (``x[:, :k]`` left to torch): its bounds as arguments."""

    start: Arg
    stop: Arg
    step: Arg


@dataclass(frozen=True)
class DeviceArg:
    """The device the program runs on (taken from its first tensor input at run time)."""


Arg = Ref | Const | DType | SizeArg | Seq | SliceArg | DeviceArg | TorchName


@dataclass(frozen=True)
class SourceRef:
    """The user's source line an op came from (file name relative to its package, line, text)."""

    file: str
    line: int
    text: str

    def comment(self) -> str:
        return f"{self.file}:{self.line}: {self.text}"


@dataclass(frozen=True)
class Value:
    name: str
    spec: TensorSpec


@dataclass(frozen=True)
class PrimOp:
    """One Thunder prim inside a fusion region: ``outputs = prim(*args, **kwargs)``."""

    prim: str  # thunder.core.prims.PrimIDs member name, lower case (e.g. "broadcast_in_dim")
    outputs: tuple[Value, ...]
    args: tuple[Arg, ...]
    kwargs: tuple[tuple[str, Arg], ...] = ()
    source: SourceRef | None = None


@dataclass(frozen=True)
class Region:
    """A fusion region: inputs and outputs in Thunder's order, ops in program order."""

    name: str
    inputs: tuple[Value, ...]
    outputs: tuple[Value, ...]
    ops: tuple[PrimOp, ...]
    #: the torch calls the region came from (the user's calls as Thunder recorded them before
    #: decomposing them into ``ops``): what it runs as where a backend cannot make it a kernel;
    #: empty where Thunder's torch executor could not take them whole
    source_calls: tuple[TorchCall, ...] = ()


@dataclass(frozen=True)
class TorchCall:
    """An op no fusion claimed, called as ``target(*args, **kwargs)`` (e.g. torch.nn.functional.linear)."""

    target: str
    outputs: tuple[Value, ...]
    args: tuple[Arg, ...]
    kwargs: tuple[tuple[str, Arg], ...] = ()
    source: SourceRef | None = None


Step = Region | TorchCall


#: prims whose output may share its input's memory (a view of it, as torch ops render them and as
#: nvFuser may return them)
VIEW_PRIMS = frozenset({"broadcast_in_dim", "reshape", "squeeze", "slice", "shallow_copy", "transpose"})


def dim_arg(dim: Dim) -> Const | SizeArg:
    """A dim as a shape argument's element: a constant, or the size a dynamic dim has at run time."""
    return Const(dim) if isinstance(dim, int) else SizeArg(dim)


def arg_refs(arg: Arg) -> list[str]:
    """The names of the tensors an argument refers to (itself, or the items of a sequence)."""
    if isinstance(arg, Ref):
        return [arg.name]
    if isinstance(arg, Seq):
        return [n for a in arg.items for n in arg_refs(a)]
    if isinstance(arg, SliceArg):
        return [n for a in (arg.start, arg.stop, arg.step) for n in arg_refs(a)]
    return []


def bound_args(call: TorchCall, params: tuple[str, ...]) -> dict[str, Arg] | None:
    """A torch call's arguments by the parameter names ``params`` (its signature's, in order), or
    None where it passes more arguments, an unknown keyword or one parameter twice."""
    if len(call.args) > len(params):
        return None
    bound = dict(zip(params, call.args))
    for name, value in call.kwargs:
        if name not in params or name in bound:
            return None
        bound[name] = value
    return bound


def writes_in_place(step: Step) -> bool:
    """Whether a step may write a tensor in place: a torch call of an in-place method or function
    (``copy_``, ``index_put_``, ``add_``; not dunders such as ``__getitem__``)."""
    if not isinstance(step, TorchCall):
        return False
    leaf = step.target.rsplit(".", 1)[-1]
    return leaf.endswith("_") and not leaf.startswith("__")


def op_reads(op: PrimOp | TorchCall) -> list[str]:
    """The names of the tensors a prim or a torch call reads (its arguments and keyword arguments)."""
    return [n for a in (*op.args, *(v for _, v in op.kwargs)) for n in arg_refs(a)]


def step_reads(step: Step) -> list[str]:
    """The names of the tensors a step reads: a region's inputs, a call's tensor arguments."""
    if isinstance(step, Region):
        return [v.name for v in step.inputs]
    return op_reads(step)


@dataclass(frozen=True)
class ProgramInput:
    """A tensor argument of the traced computation: a user input or a module parameter/buffer."""

    name: str  # Python identifier used in the generated code
    kind: str  # "input" | "parameter" | "buffer" | "merged" (a :class:`MergedWeight`)
    source_name: str  # the argument name, or the state_dict key ("norm.weight")
    persistent: bool = True  # buffers only


@dataclass(frozen=True)
class MergedWeight:
    """Parameters concatenated along their first dim into one tensor that one matmul reads (the
    q/k/v projections, gate/up): the generated module holds it as the non-persistent buffer
    ``key`` and keeps each member parameter as a view of it (see ``passes.merge_projections``)."""

    key: str  # the buffer's state key ("self_attn.merged_q_proj_k_proj_v_proj_weight")
    members: tuple[str, ...]  # the parameters' state keys, in the order they are concatenated


@dataclass(frozen=True)
class Bucket:
    """The shapes one trace serves: per user input, its shape (ints and dynamic dims) and dtype."""

    inputs: tuple[TensorSpec, ...]
    dims: tuple[DimRange, ...] = ()
    #: per input, the values an integer input holds (lo, hi: inclusive), or None: what export traces
    #: and verifies with (token ids an embedding looks up); dispatch does not read them
    values: tuple[tuple[int, int] | None, ...] = ()

    def value_range(self, i: int) -> tuple[int, int] | None:
        return self.values[i] if i < len(self.values) else None

    @property
    def is_exact(self) -> bool:
        return not self.dims

    def size_count(self) -> int:
        count = 1
        for d in self.dims:
            count *= d.hi - d.lo + 1
        return count


@dataclass(frozen=True)
class BucketProgram:
    """One program: its steps, the names it returns, and the specs of every input.

    It serves the buckets that dispatch to it (:attr:`Program.dispatch`): the one it was traced
    for, and exact buckets whose own traces it reproduces at their sizes. ``bucket`` gives its
    inputs' shapes in its dynamic dims and those dims' ranges."""

    index: int
    bucket: Bucket
    inputs: tuple[Value, ...]  # user inputs then parameters/buffers, matching Program.inputs
    steps: tuple[Step, ...]
    outputs: tuple[str, ...]

    def regions(self) -> tuple[Region, ...]:
        return tuple(s for s in self.steps if isinstance(s, Region))


@dataclass(frozen=True)
class Program:
    """Everything needed to render one generated module."""

    source: str  # the import path given to export
    class_name: str  # the source module's class name
    inputs: tuple[ProgramInput, ...]
    programs: tuple[BucketProgram, ...]  # numbered in the order dispatch first reaches them
    dispatch: tuple[tuple[Bucket, int], ...]  # every bucket, most specific first, with its program's index
    returns_tuple: bool
    fallback: bool = False  # a shape outside every bucket runs the source module's eager code path
    attributes: tuple[tuple[str, object], ...] = ()  # settings baked in at export, checked by from_module
    merged: tuple[MergedWeight, ...] = ()  # the concatenated parameters (inputs of kind "merged")


def value_names(obj: object, out: list[str]) -> list[str]:
    """Every value name ``obj`` mentions (definitions and references), in traversal order."""
    if isinstance(obj, (Value, Ref)):
        out.append(obj.name)
    elif isinstance(obj, BucketProgram):
        value_names((obj.inputs, obj.steps), out)
        out.extend(obj.outputs)
    elif dataclasses.is_dataclass(obj) and not isinstance(obj, Bucket):
        for f in dataclasses.fields(obj):
            value_names(getattr(obj, f.name), out)
    elif isinstance(obj, tuple):
        for item in obj:
            value_names(item, out)
    return out


def renamed(obj: object, names: dict[str, str]) -> object:
    """``obj`` (a program, step, value or a tuple of them) with each value named ``n`` in ``names``
    renamed ``names[n]``."""
    if isinstance(obj, (Value, Ref)):
        return dataclasses.replace(obj, name=names.get(obj.name, obj.name))
    if isinstance(obj, BucketProgram):
        return dataclasses.replace(
            obj,
            inputs=renamed(obj.inputs, names),
            steps=renamed(obj.steps, names),
            outputs=tuple(names.get(n, n) for n in obj.outputs),
        )
    if dataclasses.is_dataclass(obj) and not isinstance(obj, Bucket):
        return dataclasses.replace(
            obj, **{f.name: renamed(getattr(obj, f.name), names) for f in dataclasses.fields(obj)}
        )
    if isinstance(obj, tuple):
        return tuple(renamed(item, names) for item in obj)
    return obj


def value_specs(program: BucketProgram) -> dict[str, TensorSpec]:
    """Every value's spec in ``program``: its inputs' and every step's outputs'."""
    specs = {v.name: v.spec for v in program.inputs}
    for step in program.steps:
        specs.update({o.name: o.spec for o in step.outputs})
    return specs
