"""Bounds checks for Triton's interpreter: every lane a kernel loads or stores under its mask must
address an element of one of the kernel's tensor arguments (their storages), else the access
raises. A CPU stand-in for compute-sanitizer's memcheck on the GPU (which the GPU tests run): the
interpreter itself reads and writes wherever a pointer points, so an out-of-bounds load would
only show as a wrong value, or not at all where the mask hid it from the output.

Installed by tests/triton_interpreted_check.py before any kernel runs."""

from __future__ import annotations

import numpy as np
import torch


class OutOfBounds(AssertionError):
    """A kernel's masked lane addressed memory outside every tensor argument."""


def install() -> None:
    from triton.runtime import interpreter as it

    spans: list[list[tuple[int, int]]] = []
    init_args = it.GridExecutor._init_args_hst
    call = it.GridExecutor.__call__

    def _init_args_hst(self, args_dev, kwargs):
        args_hst, kwargs_hst = init_args(self, args_dev, kwargs)
        tensors = [a for a in (*args_hst, *kwargs_hst.values()) if isinstance(a, torch.Tensor)]
        spans[-1] = [
            (t.untyped_storage().data_ptr(), t.untyped_storage().data_ptr() + t.untyped_storage().nbytes())
            for t in tensors
        ]
        return args_hst, kwargs_hst

    def __call__(self, *args, **kwargs):
        spans.append([])
        try:
            return call(self, *args, **kwargs)
        finally:
            spans.pop()

    def check(ptrs, mask, what: str) -> None:
        addresses = np.asarray(ptrs.data, dtype=np.uint64)
        active = np.broadcast_to(np.asarray(mask.data, dtype=bool), addresses.shape)
        wanted = addresses[active]
        if wanted.size == 0 or not spans:
            return
        size = np.uint64(max(1, ptrs.get_element_ty().primitive_bitwidth // 8))
        inside = np.zeros(wanted.shape, dtype=bool)
        for start, end in spans[-1]:
            inside |= (wanted >= np.uint64(start)) & (wanted + size <= np.uint64(end))
        if not inside.all():
            bad = wanted[~inside]
            raise OutOfBounds(
                f"a masked {what} of {bad.size} lanes outside every tensor argument "
                f"(first at {int(bad[0]):#x}; arguments {[(hex(s), e - s) for s, e in spans[-1]]})"
            )

    builder = it.interpreter_builder
    load, store = builder.create_masked_load, builder.create_masked_store

    def create_masked_load(ptrs, mask, other, *rest):
        check(ptrs, mask, "load")
        return load(ptrs, mask, other, *rest)

    def create_masked_store(ptrs, value, mask, *rest):
        check(ptrs, mask, "store")
        return store(ptrs, value, mask, *rest)

    it.GridExecutor._init_args_hst = _init_args_hst
    it.GridExecutor.__call__ = __call__
    builder.create_masked_load = create_masked_load
    builder.create_masked_store = create_masked_store
