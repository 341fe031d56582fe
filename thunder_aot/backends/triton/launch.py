"""The Triton region as codegen sees it: its kernel's definition and the statements that launch it."""

from __future__ import annotations

from dataclasses import dataclass, replace

from thunder_aot.backends.base import Line, nested, render_dim, tuple_text
from thunder_aot.runtime import TRACING_DEVICE


@dataclass(frozen=True)
class TritonRegionView:
    runs_kernel = True
    strided_outputs = ()  # allocated by the module, contiguous
    permuted_outputs = ()
    name: str  # the kernel's name: <name>_kernel (the @triton.jit function) and <name> (its runtime Kernel)
    decorator: str
    params: tuple[str, ...]
    kernel_params: tuple[str, ...]
    n_param: str  # "N: tl.constexpr"; "N" or "N_units" (width_units) for a row width known only at run time
    body: tuple[Line, ...]  # the kernel's statements
    schedule_note: str
    programs: str  # the grid: how many programs one call launches
    row_count: tuple[Line, ...]  # `_rows = ...` where a program takes several rows, else empty
    allocations: tuple[Line, ...]
    launch_args: tuple[str, ...]
    n: str
    block: int
    num_warps: int
    #: the partial template of its definition ("" where it uses another region's: :meth:`sharing`)
    template: str = "triton_region.py.jinja"
    #: outputs holding a selection's picks (a top-k's indices), handed to export's verification
    #: while it watches a call (``runtime.CHOICES``), as it sees torch.topk's
    recorded: tuple[str, ...] = ()
    #: the run-time row width N is passed as N_units and the constant N_UNIT, its largest
    #: power-of-two divisor up to 16 (runtime.triton.width_unit): one compiled kernel per unit,
    #: device and alignment
    width_units: bool = False

    @property
    def definition_key(self) -> tuple:
        """What makes the compiled kernel: its text and its compile-time arguments. Regions with the
        same key share one kernel and one compile."""
        return (
            self.decorator,
            self.kernel_params,
            self.n_param,
            self.schedule_note,
            self.body,
            self.n,
            self.block,
            self.num_warps,
            self.width_units,
        )

    def sharing(self, name: str) -> TritonRegionView:
        return replace(self, name=name, template="")

    @property
    def tensor_names(self) -> tuple[str, ...]:
        """The kernel's tensor arguments (inputs, then outputs); the rest of launch_args are sizes."""
        return tuple(a for a in self.launch_args if a not in self.size_names)

    @property
    def size_names(self) -> tuple[str, ...]:
        return tuple(p for p in self.kernel_params if not p.endswith("_ptr"))

    @property
    def steps(self) -> tuple[Line, ...]:
        """Run-time sizes, output allocations, the kernel's arguments as the launcher takes them
        (pointers as ints, then sizes), then the launch: where the kernel is compiled for ``_device``
        (forward's direct-launch device, -1 for none) and the inputs' alignment, its C launch
        function alone, on the current stream; otherwise ``Kernel.launch`` (compiles, or runs it as
        the interpreter or torch.compile needs). An input off a 16-byte boundary gets its own
        compiled kernel (outputs come from torch's allocator, which aligns far more)."""
        tensors = self.tensor_names
        # an input's pointer is read once, for the alignment test and the launch (no tuple of them
        # is built and unpacked on the direct path)
        pointers = {t: f"_{t}_ptr" for t in tensors if t in self.params}
        raw = [pointers.get(t, f"{t}.data_ptr()") for t in tensors] + list(self.size_names)
        # (not tested while tracing: _device is runtime.triton.TRACING, and Kernel.launch ignores it)
        misaligned = (
            f"_device != {TRACING_DEVICE} and (" + " | ".join(pointers.values()) + ") & 15 != 0"
            if pointers
            else "False"
        )
        key, tail, unit = "_device + _device + _misaligned", f"{self.n}, {self.block}", ()
        if self.width_units:  # runtime.triton.width_unit, written out
            n = self.n if self.n.isidentifier() else f"({self.n})"
            unit = (
                Line(
                    f"_unit = ({n} | 16) & -({n} | 16)",
                    "the largest power of two dividing the row width, at most 16",
                ),
            )
            key, tail = f"({key}) * 32 + _unit", f"{n} // _unit, {self.block}, _unit"
        direct = (
            f"_kernel[1]({self.programs}, 1, 1, raw_stream(_device), *_kernel[2], {', '.join(raw)}, {tail})"
        )
        general = (
            f"{self.name}.launch({self.programs}, {tuple_text(list(self.launch_args))}, "
            f"{tuple_text(raw)}, _misaligned, {self.n})"
        )
        return (
            *self.row_count,
            *self.allocations,
            *(Line(f"{name} = {t}.data_ptr()") for t, name in pointers.items()),
            Line(f"_misaligned = {misaligned}"),
            *unit,
            Line(f"_kernel = {self.name}.binaries.get({key})"),
            Line(
                "\n".join(
                    (
                        nested("if _kernel is not None:", (Line(direct),)).code,
                        nested("else:", (Line(general),)).code,
                    )
                ),
                "the C launch where the kernel is compiled for _device and this alignment; "
                "else Kernel.launch",
            ),
            *(
                Line(
                    f"if CHOICES:\n    CHOICES[-1].append({name})",
                    "the picks, for a verification watching this call",
                )
                for name in self.recorded
            ),
        )


def contiguous_strides(sizes: list[str]) -> list[str]:
    """Python text of a contiguous tensor's strides from its sizes' text (products of ints folded)."""
    strides, step = [], "1"
    for size in reversed(sizes):
        strides.append(step)
        if step.isdigit() and size.isdigit():
            step = str(int(step) * int(size))
        else:
            step = size if step == "1" else step if size == "1" else f"{step} * {size}"
    return strides[::-1]


def numel_text(shape: tuple) -> str:
    """Python text of a shape's number of elements, in the bucket branch's size names."""
    static, symbolic = 1, []
    for d in shape:
        if isinstance(d, int):
            static *= d
        else:
            symbolic.append(render_dim(d))
    return " * ".join(([str(static)] if static != 1 or not symbolic else []) + symbolic)
