"""The frontend: the request's module resolved (:mod:`.resolve`), traced with Thunder at each shape
bucket (:mod:`.trace`, :mod:`.buckets`, with :mod:`.torch_ops`' executor for ops Thunder lacks),
lowered to the IR (:mod:`.lower`) and generalised over the buckets' dynamic sizes
(:mod:`.generalize`): :func:`.program.traced_program`, a :class:`~thunder_aot.ir.Program` before any
pass. Only :mod:`.resolve` can be imported without Thunder; this package imports nothing itself.
"""
