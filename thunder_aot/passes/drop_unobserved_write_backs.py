"""In-place write-backs a program does not need: ``dst.copy_(src)`` into a tensor only it made.

Thunder traces an in-place op (``out.add_(bias)``, ``ids.clamp_(max=7)``, ``x.masked_fill_(m, 0)``)
as its out-of-place value ``src`` and a ``copy_`` of it into the original tensor ``dst``. Where
``dst`` is a fresh intermediate (made by a matmul, a sort, an index lookup, a kernel, nothing
else holds it or a view of it), writing it back is one more kernel per in-place op with no
observer: the program can read ``src`` wherever it read ``dst`` after the write. MoE layers have
several per layer (transformers' grouped-mm experts: four, plus an ``index_put`` into an
``empty``).

The pass keeps every write-back it cannot prove unobserved: into an input or a parameter (the
caller sees it), into a tensor a view was taken of, of a value read elsewhere, or with a
broadcast or a dtype cast.
"""

from __future__ import annotations

from thunder_aot.ir import (
    VIEW_PRIMS,
    BucketProgram,
    Ref,
    Region,
    Step,
    TorchCall,
    arg_refs,
    renamed,
    step_reads,
)
from thunder_aot.passes.base import Pass

COPY = "torch.Tensor.copy_"


def write_back(step: Step) -> tuple[str, str] | None:
    """``(dst, src)`` of a plain ``dst.copy_(src)`` (how Thunder writes an in-place op's value back),
    else None."""
    if (
        isinstance(step, TorchCall)
        and step.target == COPY
        and len(step.args) == 2
        and not step.kwargs
        and all(isinstance(a, Ref) for a in step.args)
        and len(step.outputs) == 1
    ):
        return step.args[0].name, step.args[1].name
    return None


#: torch calls whose outputs are new tensors, never views of their arguments
FRESH_CALLS = frozenset(
    {
        "torch.nn.functional.linear",
        "torch.matmul",
        "torch.bmm",
        "torch.mm",
        "torch.addmm",
        "torch._grouped_mm",
        "torch.nn.functional.scaled_dot_product_attention",
        "torch.sort",
        "torch.topk",
        "torch.histc",
        "torch.cumsum",
        "torch.index_put",
        "torch.empty",
        "torch.zeros",
        "torch.ones",
        "torch.full",
        "torch.arange",
    }
)


def _fresh_call(step: TorchCall, specs: dict) -> bool:
    if step.target in FRESH_CALLS:
        return True
    # advanced indexing by one index tensor copies (x[idx]); basic indexing makes views
    return (
        step.target == "torch.Tensor.__getitem__"
        and len(step.args) == 2
        and isinstance(step.args[1], Ref)
        and len(specs[step.args[1].name].shape) >= 1
    )


def _views_of(region: Region, name: str) -> set[str]:
    """The region's outputs that may be ``name`` (one of its inputs) seen through views only."""
    through = {name}
    for op in region.ops:
        if op.prim in VIEW_PRIMS and any(r in through for a in op.args for r in arg_refs(a)):
            through.update(o.name for o in op.outputs)
    return {o.name for o in region.outputs} & through


def _producer_is_fresh(step: Step, name: str, specs: dict) -> bool:
    if isinstance(step, Region):
        return not any(name in _views_of(step, v.name) for v in step.inputs)
    return _fresh_call(step, specs)


def _readers_keep_no_view(steps: list[Step], name: str, specs: dict) -> bool:
    for step in steps:
        if name not in step_reads(step):
            continue
        if isinstance(step, Region):
            if _views_of(step, name):
                return False
        elif not _fresh_call(step, specs):
            return False
    return True


def drop_unobserved_write_backs(program: BucketProgram) -> BucketProgram:
    """``program`` without the write-backs into fresh intermediates that nothing observes; the reads
    after each dropped one take its value instead."""
    while True:
        steps = list(program.steps)
        specs = {v.name: v.spec for v in program.inputs}
        producer: dict[str, int] = {}
        for i, step in enumerate(steps):
            for o in step.outputs:
                specs[o.name] = o.spec
                producer[o.name] = i
            if isinstance(step, Region):
                specs.update({o.name: o.spec for op in step.ops for o in op.outputs})
        for i, step in enumerate(steps):
            pair = write_back(step)
            if pair is None:
                continue
            dst, src = pair
            if dst not in producer or src not in producer or specs[dst] != specs[src]:
                continue  # an input or a parameter, or a broadcast or cast
            readers_of_src = [k for k, s in enumerate(steps) if src in step_reads(s)]
            if readers_of_src != [i] or src in program.outputs:
                continue
            if not _producer_is_fresh(steps[producer[dst]], dst, specs):
                continue
            if not _readers_keep_no_view([s for k, s in enumerate(steps) if k != i], dst, specs):
                continue
            names = {dst: src, step.outputs[0].name: src}
            later = renamed(tuple(steps[i + 1 :]), names)
            program = BucketProgram(
                index=program.index,
                bucket=program.bucket,
                inputs=program.inputs,
                steps=tuple(steps[:i]) + later,
                outputs=tuple(names.get(n, n) for n in program.outputs),
            )
            break
        else:
            return program


PASS = Pass("drop_unobserved_write_backs", lambda program, _kernels: drop_unobserved_write_backs(program))
