"""What every backend shares: the typed interface codegen calls, and argument values and dims as
Python text."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from thunder_aot.ir import (
    Arg,
    Const,
    DeviceArg,
    Dim,
    DimRange,
    DType,
    Ref,
    Region,
    Seq,
    SizeArg,
    SliceArg,
    SymDim,
    TorchCall,
    TorchName,
)


def render_dim(dim: Dim) -> str:
    if isinstance(dim, int):
        return str(dim)
    return dim.expr


def render_const(value: object) -> str:
    if isinstance(value, float):
        if value != value:
            return 'float("nan")'
        if value in (float("inf"), float("-inf")):
            return f'float("{"-" if value < 0 else ""}inf")'
    return repr(value)


def render_arg(arg: Arg) -> str:
    """Python text of an argument for code that runs torch (torch backend, unfused calls)."""
    if isinstance(arg, Ref):
        return arg.name
    if isinstance(arg, Const):
        return render_const(arg.value)
    if isinstance(arg, DType):
        return f"torch.{arg.name}"
    if isinstance(arg, SizeArg):
        return f"float({render_dim(arg.dim)})" if arg.real else render_dim(arg.dim)
    if isinstance(arg, DeviceArg):
        return "device"
    if isinstance(arg, TorchName):
        return arg.name
    if isinstance(arg, SliceArg):
        return f"slice({render_arg(arg.start)}, {render_arg(arg.stop)}, {render_arg(arg.step)})"
    if isinstance(arg, Seq):
        items = [render_arg(i) for i in arg.items]
        return f"[{', '.join(items)}]" if arg.is_list else tuple_text(items)
    raise TypeError(f"cannot render {arg!r}")


def tuple_text(items: list[str]) -> str:
    """Python text of a tuple of these items' texts: ``(a,)`` for one, ``(a, b)`` for more."""
    return f"({items[0]},)" if len(items) == 1 else f"({', '.join(items)})"


def arg_dims(arg: Arg) -> set[str]:
    """Names of the dynamic dims an argument mentions."""
    if isinstance(arg, SizeArg) and isinstance(arg.dim, SymDim):
        return {arg.dim.name}
    if isinstance(arg, Seq):
        return set().union(*(arg_dims(i) for i in arg.items)) if arg.items else set()
    if isinstance(arg, SliceArg):
        return arg_dims(arg.start) | arg_dims(arg.stop) | arg_dims(arg.step)
    return set()


def region_dims(region: Region) -> list[str]:
    """Dynamic dims a region's code mentions (they become extra parameters), sorted."""
    names: set[str] = set()
    for op in region.ops:
        for a in list(op.args) + [v for _, v in op.kwargs]:
            names |= arg_dims(a)
    return sorted(names)


def _mentions_device(arg: Arg) -> bool:
    return isinstance(arg, DeviceArg) or (
        isinstance(arg, Seq) and any(_mentions_device(i) for i in arg.items)
    )


def ops_use_device(ops) -> bool:
    """Whether any op (PrimOp or TorchCall) takes the run-time device as an argument."""
    return any(_mentions_device(a) for op in ops for a in (*op.args, *(v for _, v in op.kwargs)))


def uses_device(region: Region) -> bool:
    return ops_use_device(region.ops)


def torch_call_expression(call: TorchCall) -> str:
    """``target(args, kwargs)``: the call as Python."""
    args = [render_arg(a) for a in call.args] + [f"{k}={render_arg(v)}" for k, v in call.kwargs]
    return f"{call.target}({', '.join(args)})"


def torch_call_line(call: TorchCall, comment: str | None = None) -> Line:
    """``outputs = target(args, kwargs)``, commented with its source line (or ``comment``)."""
    targets = ", ".join(o.name for o in call.outputs)
    text = comment if comment is not None else (call.source.comment() if call.source else "")
    return Line(f"{targets} = {torch_call_expression(call)}", text)


def source_comments(ops) -> list[str]:
    """Per op, the user's source line it came from, or "" when it is the same as the op before's."""
    comments, previous = [], None
    for op in ops:
        comments.append(op.source.comment() if op.source is not None and op.source != previous else "")
        previous = op.source
    return comments


def assign_text(targets: tuple[str, ...]) -> str:
    """The left-hand side that unpacks a region's outputs: ``a, b`` or ``a,``."""
    return ", ".join(targets) + ("," if len(targets) == 1 else "")


@dataclass(frozen=True)
class Line:
    """One emitted statement (it may span lines, indented relative to its first) with the comment
    that ties it to the user's source."""

    code: str
    comment: str = ""


class RegionView(Protocol):
    """What a backend gives codegen for one fusion region of one program."""

    #: the partial template that renders the region's module-level definition (a kernel, a
    #: FusionDefinition), or "" for none
    template: str
    #: the name of that definition (regions with equal ``definition_key`` share the first's)
    name: str
    #: the statements, inside the program's branch of ``forward``, that compute the region's outputs
    steps: tuple[Line, ...]
    #: whether the region runs a kernel that reads its inputs as raw memory (it then needs the
    #: module's per-call checks, and contiguous inputs)
    runs_kernel: bool
    #: its outputs that may not be contiguous (a kernel region reading one makes it contiguous
    #: first): none where a kernel writes outputs it allocated
    strided_outputs: tuple[str, ...]
    #: of those, the ones laid out permuted where eager returns them contiguous (a fusion that
    #: transposes): made contiguous when the program returns them
    permuted_outputs: tuple[str, ...]

    @property
    def definition_key(self) -> tuple | None:
        """What makes the definition: regions with the same key share one (None: nothing to share)."""

    def sharing(self, name: str) -> RegionView:
        """This region using the definition another region named ``name`` already emits."""


class Backend(ABC):
    """A code generator for fusion regions; subclasses fill in the tables and the region view."""

    name: str = ""
    #: prim names (PrimIDs member names, lower case) this backend can put inside a region
    prims: frozenset[str] = frozenset()
    #: import lines of the backend's library and runtime part (only where a region runs a kernel)
    imports: tuple[str, ...] = ()
    #: statements right after the imports (where kernels run): e.g. binding the backend library's names
    preamble: tuple[str, ...] = ()
    #: what every user input a kernel reads must satisfy (a Python test on ``{name}``), and its wording
    input_requirement: str = ""
    input_requirement_text: str = ""
    #: whether gradients flow through the generated code (torch ops do; kernels do not)
    supports_autograd: bool = True
    #: whether the regions' statements read ``_device``, which forward sets once per call: the CUDA
    #: device index where kernels launch directly (eager, on the current device), else -1
    device_per_call: bool = False
    #: whether a region may read part of an input's innermost dim (a ``slice`` prim of a region
    #: input): what merged projections hand their readers (``passes.merge_projections``)
    slices_region_inputs: bool = False
    #: whether a region's kernel may load an input at indices another input holds (a ``take`` prim:
    #: what ``passes.move_gathers_into_kernels`` moves ``x[idx]`` into its readers as)
    gathers_region_inputs: bool = False
    #: whether a region may take in the region that makes its inputs where one kernel does both
    #: (``passes.join_regions``: the backend's kernels, not Thunder's fusion pass, decide)
    joins_regions: bool = False
    #: whether a copy of a permuted view (``y.transpose(1, 2).contiguous()``) may be a region of one
    #: ``transpose`` prim (``passes.copies_as_kernels``): the backend's kernels write the outputs they
    #: allocate
    copies_as_kernels: bool = False
    #: whether a mixture of experts' routing bookkeeping (the sort of its expert ids, the counts,
    #: offsets and inverse permutation from it) may be one region of one program (``passes.fuse_moe_routing``)
    fuses_routing: bool = False
    #: whether a region's transposed output that only matmuls read may be written untransposed and
    #: read through a ``torch.permute`` view (``passes.transposed_outputs_as_views``): what its kernels
    #: store is its own choice
    views_for_strided_readers: bool = False
    #: whether ``torch.topk`` over a static last dim may be a region of one ``topk`` prim
    #: (``passes.topk_as_regions``)
    fuses_topk: bool = False

    def imports_for(self, definitions: Sequence[RegionView]) -> tuple[str, ...]:
        """The import lines of a module whose regions emit ``definitions`` (where a region runs a
        kernel): all of :attr:`imports` unless the backend picks by what its kernels call."""
        return self.imports

    @property
    def verify_device(self) -> str:
        """The device export's verification runs generated modules on."""
        return "cpu"

    def unavailable_reason(self) -> str | None:
        """None when generated modules of this backend can run here, else why not."""
        return None

    @abstractmethod
    def region_view(
        self, region: Region, dims: tuple[DimRange, ...] = (), known_sizes: tuple[dict[str, int], ...] = ()
    ) -> RegionView:
        """The region's definition and statements. ``dims``: the program's dynamic dims;
        ``known_sizes``: sizes of them the program is known to run at (its exact buckets)."""


def nested(header: str, body: list[Line] | tuple[Line, ...], comment: str = "") -> Line:
    """One compound statement: ``header`` (``for ...:``, ``if ...:``) with ``body`` indented under it
    (each body line's comment above it)."""
    lines = [header]
    for line in body:
        text = "\n".join(f"    {part}" for part in line.code.split("\n"))
        lines += ([f"    # {line.comment}"] if line.comment else []) + [text]
    return Line("\n".join(lines), comment)
