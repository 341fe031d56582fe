"""Run-time support of generated Triton modules: compile once per device and alignment, launch
through the compiled kernel's C launch function on the current stream.

A generated module holds each kernel as a :class:`Kernel` (a dict of its compiled binaries) and
writes the launch out in its ``forward``: where ``kernel.get(key)`` finds the binary compiled for
the call's device and pointer alignment, its C launch function alone; otherwise
:meth:`Kernel.launch` (it compiles, or runs the kernel as Triton's interpreter or torch.compile
needs, or switches to another device). On a torch or Triton release the C launch was not tested
with (:mod:`thunder_aot.runtime.versions`), every launch is :meth:`Kernel.launch`'s public one.
"""

from __future__ import annotations

import contextlib
import os
import threading

import torch

from thunder_aot.runtime import TRACING_DEVICE, versions

try:
    import triton  # noqa: F401  (the generated module's kernels are @triton.jit functions)
except ImportError as e:
    raise ImportError(
        f"this thunder-aot module runs on Triton, which cannot be imported here ({e}); Triton ships with "
        "torch's CUDA builds (or: pip install triton), or export the module with --backend torch"
    ) from None

__all__ = [
    "FAST_LAUNCH",
    "INTERPRET",
    "Kernel",
    "current_device",
    "eager_device",
    "TRACING",
    "empty_strided_cuda",
    "math_expm1",
    "math_log1p",
    "math_round",
    "math_sign",
    "math_tanh",
    "math_trunc",
    "nan_max",
    "nan_min",
    "raw_stream",
    "width_unit",
]

import triton.language as tl  # noqa: E402

#: Triton's interpreter runs the kernels on CPU tensors (for checking them without a GPU)
INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"


@triton.jit
def _maximum_nan(a, b):
    return tl.maximum(a, b, propagate_nan=tl.PropagateNan.ALL)


@triton.jit
def _minimum_nan(a, b):
    return tl.minimum(a, b, propagate_nan=tl.PropagateNan.ALL)


@triton.jit
def _wide(x):
    """``x`` as ``tl.max`` reduces it: 16-bit floats as float32, narrow integers as int32."""
    if tl.constexpr(x.dtype.primitive_bitwidth) < tl.constexpr(32):
        if tl.constexpr(x.dtype.is_floating()):
            x = x.to(tl.float32)
        else:
            x = x.to(tl.int32)
    return x


# torch.amax / amin in a kernel: a NaN anywhere in the reduced lanes is the result. Each is defined
# under the name kernels call it by: torch.compile (inductor) copies a user kernel's helpers by
# their source, so a helper bound to another name (nan_max = _nan_max_compiled) is undefined there.
if INTERPRET:

    @triton.jit
    def nan_max(x, axis: tl.constexpr, keep_dims: tl.constexpr = False):
        """torch.amax for Triton's interpreter: ``tl.max`` skips NaNs, so a second, integer
        reduction finds them (a ``tl.reduce`` with its own combine runs ten times slower there)."""
        found = tl.max((x != x).to(tl.int32), axis, keep_dims=keep_dims)
        return tl.where(found > 0, float("nan"), tl.max(x, axis, keep_dims=keep_dims))

    @triton.jit
    def nan_min(x, axis: tl.constexpr, keep_dims: tl.constexpr = False):
        """torch.amin for Triton's interpreter (as nan_max)."""
        found = tl.max((x != x).to(tl.int32), axis, keep_dims=keep_dims)
        return tl.where(found > 0, float("nan"), tl.min(x, axis, keep_dims=keep_dims))

else:

    @triton.jit
    def nan_max(x, axis: tl.constexpr, keep_dims: tl.constexpr = False):
        """torch.amax in a compiled kernel: one reduction whose combine keeps NaNs (max.NaN on the GPU)."""
        return tl.reduce(_wide(x), axis, _maximum_nan, keep_dims=keep_dims)

    @triton.jit
    def nan_min(x, axis: tl.constexpr, keep_dims: tl.constexpr = False):
        """torch.amin in a compiled kernel (as nan_max)."""
        return tl.reduce(_wide(x), axis, _minimum_nan, keep_dims=keep_dims)


# Math that Triton's core language lacks, from its own ops (no libdevice: the interpreter runs these
# too), accurate to a few ulps where the plain formula is not. Named as kernels call them (as nan_max).


@triton.jit
def math_expm1(x):
    """torch.expm1: ``exp(x) - 1`` without cancellation near 0 (Kahan: ``(u - 1) * x / log(u)``)."""
    u = tl.exp(x)
    um1 = u - 1.0
    exact = tl.where(u == float("inf"), u, um1 * x / tl.log(u))
    return tl.where(u == 1.0, x, tl.where(um1 == -1.0, -1.0, exact))


@triton.jit
def math_log1p(x):
    """torch.log1p: ``log(1 + x)`` without losing ``x`` below 1's resolution (Goldberg:
    ``log(u) * x / (u - 1)``)."""
    u = 1.0 + x
    d = u - 1.0
    return tl.where(d == 0.0, x, tl.where(u == float("inf"), u, tl.log(u) * (x / d)))


@triton.jit
def math_tanh(x):
    """torch.tanh: ``expm1(2|x|) / (expm1(2|x|) + 2)`` with x's sign, accurate near 0 (where
    ``2 sigmoid(2x) - 1`` cancels to an absolute error, as softcapping's ``tanh(x / c) * c`` shows);
    1 from |x| = 20 on, where float32's tanh is 1."""
    a = tl.abs(x)
    e = math_expm1(2.0 * a)
    t = tl.where(a >= 20.0, 1.0, e / (e + 2.0))
    return tl.where(x < 0, -t, tl.where(x == 0, x, t))


@triton.jit
def math_round(x):
    """torch.round: to the nearest integer, halves to the even one (``floor(x + 0.5)`` would round
    0.49999997 up). ``x - floor(x)`` is exact, except for a tiny negative x, where it is near 1 and
    rounds up to 0 as it should."""
    r = tl.floor(x)
    d = x - r
    half = r * 0.5
    up = (d > 0.5) | ((d == 0.5) & (half != tl.floor(half)))
    return tl.where(up, r + 1.0, r)


@triton.jit
def math_trunc(x):
    """torch.trunc: towards zero."""
    return tl.where(x < 0, tl.ceil(x), tl.floor(x))


@triton.jit
def math_sign(x):
    """torch.sign: 1, -1, or ``x`` itself (zeros keep their sign, NaN stays NaN)."""
    return tl.where(x > 0, 1, tl.where(x < 0, -1, x))


_compiling = torch.compiler.is_compiling
_COMPILE_LOCK = threading.Lock()
#: launch through the compiled kernel's C launch function (and allocate and query the device and
#: stream as torch.compile's generated code does) only on the torch and Triton releases this was
#: tested with; otherwise every launch is the public ``kernel[grid](...)`` (runtime.versions warns once)
FAST_LAUNCH = versions.allowed("triton-launch")


def _public_empty_strided(sizes: tuple, strides: tuple, dtype: torch.dtype) -> torch.Tensor:
    return torch.empty_strided(sizes, strides, dtype=dtype, device="cuda")


#: the current device and its raw current stream, as torch.compile's generated code reads them
current_device = torch.cuda.current_device
raw_stream = None
#: an empty tensor on the current CUDA device; generated modules allocate outputs through it where
#: the call's ``_device`` >= 0 (their inputs are on the current device)
empty_strided_cuda = _public_empty_strided
if FAST_LAUNCH:
    current_device = getattr(torch._C, "_cuda_getDevice", current_device)
    raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    try:  # torch.compile's allocation: no argument parser, no dispatcher
        from torch._C._dynamo.guards import _empty_strided_cuda as empty_strided_cuda
    except ImportError:  # pragma: no cover
        pass
if raw_stream is None:

    def raw_stream(index: int) -> int:
        return torch.cuda.current_stream(index).cuda_stream


def width_unit(n: int) -> int:
    """The largest power of two, at most 16, that divides a row width ``n`` (16 for 0). A kernel
    of ``Kernel(width_units=True)`` takes its run-time row width as ``N_units = n // unit`` and the
    constant ``N_UNIT = unit``, and computes ``N = N_units * N_UNIT``: the compiler then knows N's
    divisibility, so rows start aligned and load and store in vectors (bf16: 8 lanes at a unit of
    8 or 16, 1 at an odd width). Branch-free (generated modules write it out, also for torch.compile's
    symbolic sizes)."""
    return (n | 16) & -(n | 16)


#: ``_device`` under Triton's interpreter and torch.compile's tracing, where a tensor's pointer is no
#: int to test (dynamo traces ``data_ptr()`` as a value it cannot ``|``): forward skips the alignment
#: test and ``Kernel.launch`` launches as the interpreter or dynamo needs (generated code spells it
#: as a literal: thunder_aot.backends.triton.launch)
TRACING = TRACING_DEVICE


def eager_device(t: torch.Tensor) -> int:
    """A call's ``_device`` on the checked path: ``t``'s CUDA device index where kernels can launch
    directly (eager CUDA and ``t`` on the current device), ``TRACING`` under Triton's interpreter or
    torch.compile's tracing, else -1."""
    if INTERPRET or _compiling():
        return TRACING
    index = t.get_device()
    return index if index == current_device() else -1


#: a function torch.compile's tracing calls once and takes the result of as a constant
_assume_constant = getattr(torch.compiler, "assume_constant_result", lambda f: f)


class Kernel:
    """A ``@triton.jit`` kernel, its compile-time constants (``BLOCK``, ``num_warps``), and its
    compiled binaries (a plain dict, for the hot path's lookup) by ``device index * 2 + inputs
    misaligned``: each entry is (compiled kernel, launch function, the launch's leading
    arguments). Triton specialises pointers on 16-byte alignment, so a binary compiled for
    aligned tensors never sees an unaligned one."""

    __slots__ = ("fn", "block", "num_warps", "binaries", "width_units", "constants")

    def __init__(self, fn, block: int, num_warps: int, width_units: bool = False) -> None:
        self.binaries: dict[int, tuple] = {}
        self.fn = fn
        self.block = block
        self.num_warps = num_warps
        #: the row width N is a run-time size passed as ``N_units`` and ``N_UNIT`` (:func:`width_unit`):
        #: binaries are keyed ``(device index * 2 + misaligned) * 32 + width_unit(N)``
        self.width_units = width_units
        #: () -> (BLOCK, num_warps), read as constants under torch.compile (dynamic=True would make
        #: an int attribute a symbolic size, which a Triton launch's num_warps cannot be)
        self.constants = _assume_constant(lambda: (block, num_warps))

    def widths(self, n: int, compiling: bool = False) -> dict:
        """The kernel's row-width arguments for a row width ``n``: ``N``, or ``N_units`` and
        ``N_UNIT`` (a unit of 1 under torch.compile's tracing: no divisibility claimed of a
        symbolic size)."""
        if not self.width_units:
            return {"N": n}
        unit = 1 if compiling else width_unit(n)
        return {"N_units": n // unit, "N_UNIT": unit}

    def compile(self, key: int, args: tuple, n: int) -> tuple:
        """Compile for these arguments' device and alignment, once (thread-safe). The launch
        function is the C launch of the kernel's launcher where the kernel needs no scratch memory
        (skipping the launcher's Python wrapper), else ``CompiledKernel.run`` itself."""
        with _COMPILE_LOCK:
            if key not in self.binaries:
                with torch.cuda.device(args[0].device):
                    binary = self.fn.warmup(
                        *args, **self.widths(n), BLOCK=self.block, num_warps=self.num_warps, grid=(1,)
                    )
                    binary._init_handles()
                run = binary.run
                launch = getattr(run, "launch", None)
                if (
                    launch is not None
                    and not getattr(run, "global_scratch_size", 1)
                    and not getattr(run, "profile_scratch_size", 1)
                ):
                    head = (
                        binary.function,
                        run.launch_cooperative_grid,
                        run.launch_pdl,
                        None,
                        None,
                        binary.packed_metadata,
                        None,
                        None,
                        None,
                    )
                else:
                    launch, head = run, (binary.function, binary.packed_metadata, None, None, None)
                self.binaries[key] = (binary, launch, head)
        return self.binaries[key]

    def launch(self, programs: int, args: tuple, raw: tuple, misaligned: bool, n: int) -> None:
        """Launch ``programs`` programs where ``forward``'s direct launch cannot: the first call for
        a device and alignment (it compiles), a device other than the current one, Triton's
        interpreter, torch.compile's tracing. ``args``: the tensors and run-time sizes; ``raw``: the
        same with each tensor as its ``data_ptr()`` (the launcher then neither calls ``data_ptr()``
        nor asks the driver about the pointer: the module's checks already ensured CUDA tensors on
        one device)."""
        compiling = _compiling()
        if INTERPRET or compiling:
            # Triton's interpreter on CPU; under torch.compile, the launch that dynamo understands
            # (inductor then compiles the kernel into its own graph as a user-defined Triton kernel)
            block, num_warps = self.constants()
            if self.width_units:
                unit = 1 if compiling else width_unit(n)
                self.fn[(programs,)](*args, N_units=n // unit, N_UNIT=unit, BLOCK=block, num_warps=num_warps)
            else:
                self.fn[(programs,)](*args, N=n, BLOCK=block, num_warps=num_warps)
            return
        index = args[0].get_device()
        if not FAST_LAUNCH:
            # an untested torch or Triton: the public launch, always (``binaries`` stays empty, so
            # ``forward`` never takes the C launch either)
            with torch.cuda.device(index) if index != current_device() else contextlib.nullcontext():
                self.fn[(programs,)](*args, **self.widths(n), BLOCK=self.block, num_warps=self.num_warps)
            return
        key = index + index + misaligned
        # the launcher's trailing arguments, in the kernel's order: (N, BLOCK) or (N_units, BLOCK, N_UNIT)
        tail = (n, self.block)
        if self.width_units:
            unit = width_unit(n)
            key, tail = key * 32 + unit, (n // unit, self.block, unit)
        entry = self.binaries.get(key)
        if entry is None:
            entry = self.compile(key, args, n)
        # the launch runs in the current device's context
        with torch.cuda.device(index) if index != current_device() else contextlib.nullcontext():
            entry[1](programs, 1, 1, raw_stream(index), *entry[2], *raw, *tail)
