"""What Thunder's interpreter is made to do while the exporter traces (:func:`tracing_as_torch_runs`):
see a forward as torch runs it (source lines, dtype comparisons, grouped matmuls on the CPU copy),
decode each function's bytecode once and read globals directly. Each change is undone when the trace
ends."""

from __future__ import annotations

import contextlib
import dis
import types

import torch

from thunder_aot.frontend import torch_ops

#: top-level packages whose frames are never the source line an op is attributed to
LIBRARY_PACKAGES = frozenset({"thunder", "torch"})


def _user_source_location(runtime_ctx) -> tuple[str, object] | tuple[None, None]:
    """The innermost frame outside Thunder and torch: the user's line that led to an op (code of
    other libraries, transformers' modeling files among them, counts as the user's)."""
    from thunder.core.interpreter import unwrap

    for frame in reversed(runtime_ctx.frame_stack):
        module = unwrap(frame.globals).get("__name__", "") or ""
        if module.partition(".")[0] not in LIBRARY_PACKAGES:
            return frame.code.co_filename, frame.positions
    return None, None


@contextlib.contextmanager
def ops_attributed_to_user_lines():
    """While tracing, Thunder records each op's source as the innermost frame outside its own
    interpreter (a torch module's forward, a Thunder decomposition); record the user's line instead."""
    from thunder.core.interpreter import InterpreterRuntimeCtx

    original = InterpreterRuntimeCtx.get_current_user_source_location
    InterpreterRuntimeCtx.get_current_user_source_location = _user_source_location
    try:
        yield
    finally:
        InterpreterRuntimeCtx.get_current_user_source_location = original


@contextlib.contextmanager
def dtypes_compare_with_torchs():
    """While tracing, a tensor's ``dtype`` is Thunder's, which Thunder 0.2.6 compares unequal to every
    torch dtype: ``if x.dtype == torch.float32`` in a forward would take the other branch (and
    transformers' grouped-mm experts take their slow fallback on ``weight.dtype != torch.bfloat16``).
    Make a Thunder dtype equal to the torch dtype it stands for."""
    from thunder.core import dtypes

    original = dtypes.dtype.__eq__

    def __eq__(self, other):
        if isinstance(other, torch.dtype):
            other = dtypes.to_dtype(other)
        return original(self, other)

    dtypes.dtype.__eq__ = __eq__
    try:
        yield
    finally:
        dtypes.dtype.__eq__ = original


@contextlib.contextmanager
def instructions_decoded_once():
    """While tracing, each code object's bytecode decoded once: Thunder's interpreter decodes a
    function's instructions (``dis.get_instructions``) every time it enters a frame, a lookup of a
    builtin included (two small frames), and a decoder layer enters some 10^4 frames per trace; about
    a tenth of a trace's time went to decoding the same code again. A code object and its
    instructions do not change; the decoded tuple is kept for the trace, the code with it (so its
    ``id`` is not reused)."""
    original = dis.get_instructions
    decoded: dict[int, tuple] = {}

    def get_instructions(x, *, first_line=None, show_caches=False, adaptive=False):
        if first_line is None and not show_caches and not adaptive and isinstance(x, types.CodeType):
            found = decoded.get(id(x))
            if found is None:
                found = decoded[id(x)] = (x, tuple(original(x)))
            return iter(found[1])
        return original(x, first_line=first_line, show_caches=show_caches, adaptive=adaptive)

    dis.get_instructions = get_instructions
    try:
        yield
    finally:
        dis.get_instructions = original


@contextlib.contextmanager
def globals_read_directly():
    """While tracing, a global name read from its module's dict (or the builtins' dict) directly, with
    the same wrapper and provenance as Thunder's own reading. Thunder's interpreter reads a global by
    interpreting a small function around ``d[k]`` (a frame for it, one for ``__getitem__``), twice
    for a builtin; some 10^4 global reads per trace of a decoder layer made them the largest part of
    its time. Where provenance is not tracked, or the dict is not a plain ``dict``, or the name is
    missing (Thunder raises its NameError), Thunder's reading runs as before."""
    from thunder.core import interpreter

    original = interpreter.globals_lookup
    read = interpreter.MutMappingWrapperMethods.__getitem__

    def direct(mapping, name):
        return (
            isinstance(mapping, interpreter.WrappedValue)
            and type(mapping.value) is dict
            and mapping.item_wrappers is not None
            and interpreter.get_interpretercompilectx()._with_provenance_tracking
            and isinstance(name, interpreter.WrappedValue)
            and name.value in mapping.value
        )

    def globals_lookup(globals_dict, name):
        if direct(globals_dict, name):
            return read(globals_dict, name)
        key = interpreter.wrap_const("__builtins__")
        if not isinstance(name, interpreter.WrappedValue) or not direct(globals_dict, key):
            return original(globals_dict, name)
        builtins = read(globals_dict, key)
        if direct(builtins, name):
            return read(builtins, name)
        return original(globals_dict, name)

    interpreter.globals_lookup = globals_lookup
    try:
        yield
    finally:
        interpreter.globals_lookup = original


@contextlib.contextmanager
def tracing_as_torch_runs():
    """What Thunder's interpreter needs to see a forward as torch runs it (see the two above), and
    grouped matmuls that run on the CPU copy it traces (:func:`torch_ops.cpu_safe_grouped_mm`), with
    bytecode decoded once per code object (:func:`instructions_decoded_once`) and globals read directly
    (:func:`globals_read_directly`)."""
    with (
        ops_attributed_to_user_lines(),
        dtypes_compare_with_torchs(),
        torch_ops.cpu_safe_grouped_mm(),
        instructions_decoded_once(),
        globals_read_directly(),
    ):
        yield
