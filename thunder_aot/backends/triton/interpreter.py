"""Triton's interpreter (``TRITON_INTERPRET=1``), made to round as the GPU does and to patch its
language once per launch, for checks on CPU."""

from __future__ import annotations

import inspect
import os


def interpreter_rounds_like_the_gpu() -> None:
    """Triton 3.6's interpreter converts float32 to bfloat16 by truncation where the GPU rounds to
    nearest even; a kernel that rounds many intermediates (Thunder's gelu: eight) then drifts ~1%
    on CPU only. Checks on CPU (export's verification, tests) patch the interpreter's conversion to
    round as the GPU does, quiet numpy's floating-point warnings, and call a kernel's helper
    functions without patching the language again (:func:`_language_patched_once_per_launch`). Only
    under TRITON_INTERPRET=1; idempotent."""
    if os.environ.get("TRITON_INTERPRET") != "1":
        return
    # optional dependencies, imported only under the interpreter: Triton (and numpy, which it needs)
    import numpy as np
    import triton.language as tl
    from triton.runtime import interpreter

    # verification feeds NaN and ±inf on purpose: numpy's warnings on them (the interpreter computes
    # with numpy) would bury what the checks say
    np.seterr(all="ignore")
    _language_patched_once_per_launch(interpreter, tl)
    builder = interpreter.InterpreterBuilder
    if getattr(builder, "_thunder_aot_rtne", False):
        return
    truncating = builder.cast_impl

    def cast_impl(self, src, dst_type):
        if src.dtype.scalar == tl.float32 and dst_type.scalar == tl.bfloat16:
            return interpreter.TensorHandle(bfloat16_bits(src.data), dst_type.scalar)
        return truncating(self, src, dst_type)

    builder.cast_impl = cast_impl  # the builder's create_fp_trunc & co. call cast_impl
    builder._thunder_aot_rtne = True


def bfloat16_bits(values):
    """float32 values rounded to the nearest bfloat16, ties to even, as bfloat16 bit patterns
    (uint16): the same bits as torch's conversion on the CPU (every NaN becomes 0xFFFF there), in
    numpy (the interpreter's arrays; a round trip through torch cost a tenth of an interpreted
    check)."""
    import numpy as np  # (Triton's interpreter, the only caller, needs numpy)

    floats = np.ascontiguousarray(values, dtype=np.float32)
    bits = floats.view(np.uint32)
    rounded = ((bits + (((bits >> 16) & 1) + 0x7FFF)) >> 16).astype(np.uint16)
    return np.where(np.isnan(floats), np.uint16(0xFFFF), rounded)


def _language_patched_once_per_launch(interpreter, tl) -> None:
    """Triton 3.6's interpreter patches the language modules a kernel sees for its launch (every
    builtin wrapped, found by ``inspect.getmembers``), and again at every call of a ``@triton.jit``
    helper inside it (``tl.sum``, ``tl.max``: Triton's standard library sees ``triton.language.core``),
    once per program instance: a fifth of an interpreted check's time. Here a helper whose language
    modules this launch has patched already (itself, or an earlier helper) is called as it is. What is
    patched, and when the launch undoes it, stays as Triton does it (a helper's patch is not undone
    there either). A helper called outside a launch is patched as before. Only where the interpreter
    has these internals."""
    executor = getattr(interpreter, "GridExecutor", None)
    patch = getattr(interpreter, "_patch_lang", None)
    if executor is None or patch is None or getattr(executor.__call__, "_thunder_aot_once", False):
        return
    launch = executor.__call__
    languages = (tl, tl.core)
    #: per running launch (innermost last): the ids of the language modules patched in it so far
    running: list[set[int]] = []

    def language_modules(fn) -> set[int]:
        return {id(v) for v in fn.__globals__.values() if inspect.ismodule(v) and v in languages}

    def patch_lang(fn):
        modules = language_modules(fn)
        if running and modules and modules <= running[-1]:
            return interpreter._LangPatchScope()  # patched in this launch already: nothing to undo
        if running:
            running[-1] |= modules
        return patch(fn)

    def call(self, *args, **kwargs):
        running.append(set())
        try:
            return launch(self, *args, **kwargs)
        finally:
            running.pop()

    call._thunder_aot_once = True
    interpreter._patch_lang = patch_lang
    interpreter.GridExecutor.__call__ = call
