"""Indexed writes into a tensor the caller holds, done in place: ``cache.index_copy_(2, pos, k)``.

Thunder traces an in-place indexed write (a static KV cache's ``keys.index_copy_(2, cache_position,
key_states)``, ``x[:, idx] = v``) as its out-of-place value, ``t = torch.index_copy(cache, 2, pos,
k)``, a copy of the *whole* tensor with the rows written, and a write-back ``cache.copy_(t)``: two
passes over the cache per call where eager writes only the rows. Where nothing reads the tensor's
old value after the write, the pair becomes the in-place call, whose result is the tensor itself,
and the write-back goes (the reads of either value read the tensor).

The pass keeps the pair where the old value is read later (a residual of the cache before the
write), where the write-back casts or broadcasts, or where the write is not the first argument.
"""

from __future__ import annotations

from thunder_aot.ir import BucketProgram, Ref, TorchCall, arg_refs, renamed, step_reads
from thunder_aot.passes.base import Pass
from thunder_aot.passes.drop_unobserved_write_backs import write_back

#: out-of-place indexed writes and the in-place call that does the same write into its first argument
IN_PLACE = {
    "torch.index_copy": "torch.Tensor.index_copy_",
    "torch.index_put": "torch.Tensor.index_put_",
}


def index_writes_in_place(program: BucketProgram) -> BucketProgram:
    """``program`` with each indexed write whose only purpose is its write-back done in place."""
    while True:
        steps = list(program.steps)
        producer = {o.name: i for i, s in enumerate(steps) for o in s.outputs}
        specs = {v.name: v.spec for v in program.inputs}
        specs.update({o.name: o.spec for s in steps for o in s.outputs})
        for i, step in enumerate(steps):
            pair = write_back(step)
            if pair is None:
                continue
            dst, src = pair
            j = producer.get(src)
            write = steps[j] if j is not None else None
            if not (
                isinstance(write, TorchCall)
                and write.target in IN_PLACE
                and write.args
                and write.args[0] == Ref(dst)
                and len(write.outputs) == 1
                and specs.get(dst) == specs[src]
            ):
                continue
            if any(dst in arg_refs(a) for a in (*write.args[1:], *(v for _, v in write.kwargs))):
                continue  # the written values read the tensor itself
            if any(dst in step_reads(s) for k, s in enumerate(steps) if j < k and k != i):
                continue  # its value before the write is read after it
            in_place = TorchCall(
                IN_PLACE[write.target], (*write.outputs,), write.args, write.kwargs, write.source
            )
            names = {step.outputs[0].name: src}
            rest = renamed(tuple(steps[j + 1 : i] + steps[i + 1 :]), names)
            program = BucketProgram(
                index=program.index,
                bucket=program.bucket,
                inputs=program.inputs,
                steps=(*steps[:j], in_place, *rest),
                outputs=tuple(names.get(n, n) for n in program.outputs),
            )
            break
        else:
            return program


PASS = Pass("index_writes_in_place", lambda program, _kernels: index_writes_in_place(program))
