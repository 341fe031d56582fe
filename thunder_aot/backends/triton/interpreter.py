"""Triton's interpreter (``TRITON_INTERPRET=1``), made to round as the GPU does, for checks on CPU."""

from __future__ import annotations

import os

import torch


def interpreter_rounds_like_the_gpu() -> None:
    """Triton 3.6's interpreter converts float32 to bfloat16 by truncation where the GPU rounds to
    nearest even; a kernel that rounds many intermediates (Thunder's gelu: eight) then drifts ~1%
    on CPU only. Checks on CPU (export's verification, tests) patch the interpreter's conversion to
    round as the GPU does, and quiets numpy's floating-point warnings. Only under TRITON_INTERPRET=1;
    idempotent."""
    if os.environ.get("TRITON_INTERPRET") != "1":
        return
    # optional dependencies, imported only under the interpreter: Triton (and numpy, which it needs)
    import numpy as np
    import triton.language as tl
    from triton.runtime import interpreter

    # verification feeds NaN and ±inf on purpose: numpy's warnings on them (the interpreter computes
    # with numpy) would bury what the checks say
    np.seterr(all="ignore")
    builder = interpreter.InterpreterBuilder
    if getattr(builder, "_thunder_aot_rtne", False):
        return
    truncating = builder.cast_impl

    def cast_impl(self, src, dst_type):
        if src.dtype.scalar == tl.float32 and dst_type.scalar == tl.bfloat16:
            rounded = torch.from_numpy(np.ascontiguousarray(src.data, dtype=np.float32)).to(torch.bfloat16)
            return interpreter.TensorHandle(
                rounded.view(torch.int16).numpy().view(np.uint16), dst_type.scalar
            )
        return truncating(self, src, dst_type)

    builder.cast_impl = cast_impl  # the builder's create_fp_trunc & co. call cast_impl
    builder._thunder_aot_rtne = True
