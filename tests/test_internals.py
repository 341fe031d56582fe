"""docs/internals.md's worked example of adding an op: the Triton unary table's ``bitwise_not`` row
is what makes a region holding ``~x`` a kernel (without the row the region runs as its source
calls). tests/test_op_zoo.py exports and verifies the zoo modules that use it (``bitwise_not_*``)."""

from __future__ import annotations

import pytest

from tests.op_zoo import ZOO
from thunder_aot.backends import get_backend
from thunder_aot.backends.triton import index_kernels, row_kernels
from thunder_aot.pipeline import build_program, regions_without_kernels
from thunder_aot.request import ExportRequest


def _without_kernels(name: str) -> list[str]:
    factory, shapes, _ = ZOO[name]
    request = ExportRequest(f"<{name}>", (shapes,), backend="triton", instance=factory().eval())
    program, _, backend = build_program(request, progress=lambda m: None)
    assert any(op.prim == "bitwise_not" for bp in program.programs for r in bp.regions() for op in r.ops)
    return regions_without_kernels(program, get_backend("triton"))


@pytest.mark.traces
@pytest.mark.parametrize("name", ["bitwise_not_mask", "bitwise_not_int"])
def test_the_bitwise_not_row_makes_its_region_a_kernel(name, monkeypatch):
    assert _without_kernels(name) == []
    monkeypatch.delitem(index_kernels.POINTWISE_OPS, "bitwise_not")
    monkeypatch.delitem(row_kernels.ROW_OPS, "bitwise_not")
    (line,) = _without_kernels(name)
    assert "bitwise_not" in line and "runs as its source's torch calls" in line, line
