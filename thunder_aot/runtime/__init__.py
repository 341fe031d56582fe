"""The runtime library every generated module imports: what is generic to them, written once.

A generated module holds only what is specific to its source module (its kernels or
FusionDefinitions, its bucket table, its dispatch and its class); everything else lives here:
the guard table of the fast path, the one-line errors, the base class with ``from_module``,
``warmup`` and the fallback, and (in :mod:`.nvfuser` and :mod:`.triton`) the first-call locks,
compiles and launches. Importing it costs torch and nothing else: no Thunder, Jinja or black.

``RUNTIME_VERSION`` grows whenever what generated modules may call changes; a generated module
calls :func:`require` at import with the version it was written for, and an older runtime refuses
it (as protobuf's generated code checks its runtime).
"""

from __future__ import annotations

import ast
import itertools
import re
import warnings
from collections.abc import Callable, Iterable

import torch

from thunder_aot.runtime.graphs import CudaGraphs
from thunder_aot.runtime.specs import BucketSpec, InputSpec, Size
from thunder_aot.runtime.state import adopt_state

#: the interface version generated modules are written against; what each version added is in
#: docs/generated-module.md ("Runtime versions")
RUNTIME_VERSION = 9

__all__ = [
    "RUNTIME_VERSION",
    "autocast_error",
    "autocasting",
    "CHOICES",
    "GLOBAL_BACKWARD_HOOKS",
    "GLOBAL_BACKWARD_PRE_HOOKS",
    "GLOBAL_FORWARD_HOOKS",
    "GLOBAL_FORWARD_PRE_HOOKS",
    "GUARD_LIMIT",
    "GeneratedModule",
    "GuardTable",
    "adopt_state",
    "BucketSpec",
    "InputSpec",
    "Size",
    "NoBucketError",
    "bad_input",
    "bad_state",
    "dynamo_compiling",
    "is_grad_enabled",
    "no_autograd",
    "no_bucket",
    "record_guard",
    "require",
    "unmerged",
    "UnmergedError",
]


#: the selections a generated module's top-k kernels make, while ``thunder_aot.verify`` watches a
#: call (one list per watcher, the innermost last; empty otherwise, and then nothing is recorded):
#: each kernel appends its indices, as the watcher records each ``torch.topk`` call's
CHOICES: list[list] = []


#: whether any torch.autocast region is active (one C call: the generated ``__call__`` asks on every call)
autocasting = getattr(torch._C, "_is_any_autocast_enabled", None) or (
    lambda: torch.is_autocast_enabled("cuda") or torch.is_autocast_enabled("cpu")
)


def autocast_error(owner: str) -> NoBucketError:
    """A call under ``torch.autocast``: the export traced the module without it, so its torch calls
    would hand its kernels other dtypes than they were written for. A module built with a fallback
    runs the source's forward (autocast applies there); others raise this."""
    return NoBucketError(
        f"{owner} (thunder-aot): called under torch.autocast, which the export did not trace (its kernels "
        "take the dtypes it was exported with); call it outside autocast, or export the module with "
        "the dtypes autocast gives (or with --fallback, to run the source's forward there)"
    )


def require(version: int) -> None:
    """Refuse to run a generated module written for a newer runtime than this one."""
    if version > RUNTIME_VERSION:
        raise ImportError(
            f"this module was generated for thunder-aot runtime version {version}; the installed thunder-aot "
            f"provides version {RUNTIME_VERSION}: upgrade thunder-aot"
        )


class NoBucketError(ValueError):
    """The inputs match none of a generated module's buckets."""


def _describe(t: object) -> str:
    if isinstance(t, torch.Tensor):
        return f"{_shape_text(t.shape)}:{str(t.dtype).removeprefix('torch.')}"
    return type(t).__name__


def _shape_text(shape) -> str:
    return "x".join(map(str, shape)) or "scalar"


def no_bucket(
    owner: str, names: Iterable[str], values: Iterable[object], buckets: Iterable[str]
) -> NoBucketError:
    """The one-line error for inputs outside every bucket: each input's shape and dtype, and the buckets."""
    got = ", ".join(f"{name} {_describe(t)}" for name, t in zip(names, values))
    return NoBucketError(f"{owner} (thunder-aot): no bucket for {got}; expected one of: {'; '.join(buckets)}")


def no_autograd(owner: str, backend: str) -> RuntimeError:
    return RuntimeError(
        f"{owner} (thunder-aot, {backend}) computes no gradients, and a tensor it got requires grad: "
        "call it under torch.no_grad() or torch.inference_mode(), or requires_grad_(False) the module"
    )


def bad_input(owner: str, name: str, t: object, expected: str) -> ValueError:
    got = (
        f"{t.device} tensor, contiguous={t.is_contiguous()}"
        if isinstance(t, torch.Tensor)
        else type(t).__name__
    )
    return ValueError(f"{owner} (thunder-aot): {name} must be {expected}; got a {got}")


def bad_state(owner: str, path: str, t: torch.Tensor, expected: str, device: torch.device) -> ValueError:
    got = (
        f"{str(t.dtype).removeprefix('torch.')} tensor of shape {'x'.join(map(str, t.shape)) or 'scalar'} on "
        f"{t.device}, contiguous={t.is_contiguous()}"
    )
    return ValueError(
        f"{owner} (thunder-aot): {path} must be {expected} ({device}); got a {got}"
        " (was the module converted after export? re-export for other dtypes)"
    )


class UnmergedError(ValueError):
    """A member parameter of a merged projection no longer lies in the merged tensor."""


def unmerged(owner: str, member: str, merged: str) -> UnmergedError:
    return UnmergedError(
        f"{owner} (thunder-aot): {member} is no longer a view of {merged}, the merged projection weight its "
        "matmul reads (the parameter was replaced, converted or its .data assigned); the module's own calls "
        "merge again, a caller of the module-level forward() calls merge_projections() on the module"
    )


# --- the fast path: a C++ guard per input shape -----------------------------------------------

#: torch's C++ tensor test, the one torch.compile guards its graphs' inputs with (None on a torch
#: without it: every call then takes the checked path)
try:
    from torch._C._dynamo.guards import TensorGuards
except ImportError:  # pragma: no cover - a torch without dynamo's guards
    TensorGuards = None

is_grad_enabled = torch.is_grad_enabled
dynamo_compiling = torch.compiler.is_dynamo_compiling
#: a Triton module's ``_device`` while Triton's interpreter or torch.compile's tracing runs it
#: (runtime.triton.TRACING; here so that the code generator reads it without importing Triton)
TRACING_DEVICE = -2
_tracing = torch.compiler.is_compiling


def guard(*tensors: torch.Tensor) -> Callable[..., bool]:
    """A test that tensors have these tensors' Python type, dispatch keys (device type, autograd,
    inference), dtype, device index, requires_grad, sizes and strides (a size-1 dim's stride is
    free): whatever passes it passes the checks these tensors passed."""
    return TensorGuards(
        *tensors,
        dynamic_dims_sizes=[list(t.shape) for t in tensors],
        dynamic_dims_strides=[[None if n == 1 else s for n, s in zip(t.shape, t.stride())] for t in tensors],
    ).check


#: the most shapes one module's guard table holds (the rest take the checked path)
GUARD_LIMIT = 4096


def _entry(table: dict, shape: torch.Size, program: int, tensors: tuple[torch.Tensor, ...]) -> tuple | None:
    """``(guard, program, no tensor requires grad, device index)`` of tensors that passed the checks,
    or None where nothing is recorded: under torch.compile's tracing, on a torch without
    ``TensorGuards``, or for a new shape when ``table`` holds ``GUARD_LIMIT`` already."""
    if TensorGuards is None or _tracing() or (shape not in table and len(table) >= GUARD_LIMIT):
        return None
    grad_free = not any(t.requires_grad for t in tensors)
    return guard(*tensors), program, grad_free, tensors[0].get_device()


def record_guard(table: dict, shape: torch.Size, program: int, tensors: tuple[torch.Tensor, ...]) -> None:
    """Record in a guard table of a module generated for runtime version 5 or older (a plain dict):
    the first input's shape -> ``(guard, program, no tensor requires grad, device index)``. Newer
    modules hold a :class:`GuardTable`."""
    entry = _entry(table, shape, program, tensors)
    if entry is not None:
        table[shape] = entry


class GuardTable(dict):
    """A generated module's guard table: the first input's shape -> ``(guard, program, no tensor
    requires grad, device index, sizes)``, and ``last``, the entry whose guard passed last.

    ``forward`` tries ``last``'s guard first (a guard tests every size, so the shape needs no
    lookup while calls repeat it: a decode loop), then :meth:`find`; when the entry passes (and
    gradients are off where some tensor requires grad) it runs the entry's program on the entry's
    ``sizes`` (the program's dynamic dims, read off the shapes once) without the checks.
    ``_dispatch`` runs the checks and records an entry (:meth:`record`). The last call of a shape
    wins; at most ``GUARD_LIMIT`` shapes are held. The device index is the tensors' (-1 for CPU
    tensors, as Triton's interpreter gets)."""

    __slots__ = ("last",)

    def __init__(self) -> None:
        super().__init__()
        self.last: tuple | None = None

    def find(self, *tensors: object) -> tuple | None:
        """The entry of these arguments' first shape whose guard they pass (it becomes ``last``), or None."""
        try:
            entry = self.get(tensors[0].shape)
        except (AttributeError, TypeError):  # not a tensor: the checked path says what it must be
            return None
        if entry is None or not entry[0](*tensors):
            return None
        self.last = entry
        return entry

    def record(
        self, shape: torch.Size, program: int, sizes: tuple[int, ...], tensors: tuple[torch.Tensor, ...]
    ) -> None:
        """Record the entry of tensors that passed the checks (nothing under torch.compile's tracing,
        or on a torch without ``TensorGuards``)."""
        entry = _entry(self, shape, program, tensors)
        if entry is not None:
            self[shape] = self.last = (*entry, sizes)


# --- the nn.Module ------------------------------------------------------------------------------

#: torch's registries of hooks that apply to every module (register_module_forward_hook & co.):
#: a generated ``__call__`` takes nn.Module's generic path while any of them, or one of the
#: module's own hook dicts, holds a hook (its test is written out there: a call to a helper costs
#: more than the test)
GLOBAL_FORWARD_PRE_HOOKS = torch.nn.modules.module._global_forward_pre_hooks
GLOBAL_FORWARD_HOOKS = torch.nn.modules.module._global_forward_hooks
GLOBAL_BACKWARD_PRE_HOOKS = torch.nn.modules.module._global_backward_pre_hooks
GLOBAL_BACKWARD_HOOKS = torch.nn.modules.module._global_backward_hooks


_SETTING_STEP = re.compile(
    r"\.?([A-Za-z_][A-Za-z_0-9]*)|(?:^|\.)(\d+)|\[('(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"|-?\d+)\]"
)


def setting(source: object, path: str) -> object:
    """The value at ``path`` of ``source``: attributes and items at any depth, as the export
    recorded them (``variance_epsilon``, ``config.rope_theta``, ``opts['bias']``); a missing one
    raises ValueError naming the path. A numeric step first or after a dot is a submodule of a
    container (``layers.0.self_attn``; ``0.inplace`` of an nn.Sequential), read as torch's
    ``get_submodule`` does."""
    value, at = source, 0
    while at < len(path):
        step = _SETTING_STEP.match(path, at)
        if step is None:
            raise ValueError(f"cannot read the setting path {path!r}")
        try:
            value = (
                getattr(value, step[1] or step[2]) if step[3] is None else value[ast.literal_eval(step[3])]
            )
        except (AttributeError, KeyError, IndexError, TypeError) as e:
            raise ValueError(f"the source has no setting {path!r} ({type(e).__name__}: {e})") from None
        at = step.end()
    return value


def _remerge_after_load(module: GeneratedModule, incompatible) -> None:
    """load_state_dict's post hook of modules with merged projections (a module-level function: a
    module holding it still pickles)."""
    module._remerge()


def _adjacent(tensors: list[torch.Tensor]) -> torch.Tensor | None:
    """The tensor of ``tensors`` stacked along dim 0 where they already lie so in one storage (one
    after the other, each contiguous), sharing that memory; else None."""
    first = tensors[0]
    if first.device.type == "meta":
        return None
    storage, offset = first.untyped_storage(), first.storage_offset()
    for t in tensors:
        if (
            not t.is_contiguous()
            or t.untyped_storage().data_ptr() != storage.data_ptr()
            or t.storage_offset() != offset
        ):
            return None
        offset += t.numel()
    shape = (sum(t.shape[0] for t in tensors), *first.shape[1:])
    merged = torch.empty(0, dtype=first.dtype, device=first.device)
    with torch.no_grad():
        merged.set_(storage, first.storage_offset(), shape, torch.empty(shape, device="meta").stride())
    return merged


#: the generated classes train() has warned about
_TRAIN_WARNED: set[str] = set()


class GeneratedModule(torch.nn.Module):
    """Base of every generated ``nn.Module``: what they share, driven by their class tables.

    - ``STATE``: per parameter or buffer, ``(state_dict key, "parameter" | "buffer", shape,
      dtype, persistent)``, in the order ``forward`` takes them;
    - ``EXPORTED_SETTINGS``: each setting the export baked in (``"variance_epsilon": 1e-05``);
    - ``WARMUP``: per bucket, its dynamic dims' ranges and a function of those dims giving its
      inputs' ``(shape, dtype)``;
    - ``FALLBACK``: whether a module built by ``from_module`` runs the source module's forward
      for inputs outside every bucket;
    - ``MERGED``: per merged projection, ``(buffer key, member parameter keys)``: the members
      concatenated along dim 0 into a non-persistent buffer that one matmul reads, each member
      kept as a view of it (:meth:`merge_projections`).
    """

    STATE: tuple[tuple[str, str, tuple[int, ...], torch.dtype, bool], ...] = ()
    EXPORTED_SETTINGS: dict[str, object] = {}
    WARMUP: tuple[tuple[dict[str, tuple[int, int]], Callable[..., list]], ...] = ()
    FALLBACK = False
    MERGED: tuple[tuple[str, tuple[str, ...]], ...] = ()

    def __init__(self, *, device: torch.device | str | None = None) -> None:
        """Uninitialised parameters and buffers with the source's names (fill them with
        ``load_state_dict``); ``from_module`` shares a source module's tensors instead."""
        super().__init__()
        for key, kind, shape, dtype, persistent in self.STATE:
            self._place(key, kind, torch.empty(shape, dtype=dtype, device=device), persistent)
        if self.MERGED:
            self.merge_projections()
            # load_state_dict(assign=True) replaces the parameters: merge the new ones
            self.register_load_state_dict_post_hook(_remerge_after_load)

    def merge_projections(self) -> None:
        """Concatenate each ``MERGED`` group's parameters into its buffer and make every parameter a
        view of it (``param.data``: the same Parameter objects, now sharing one tensor; a source
        module that holds them sees the same). Built modules call it themselves (``from_module``,
        ``to()``, ``load_state_dict(assign=True)``); call it after replacing a member parameter."""
        for key, members in self.MERGED:
            tensors = [self.get_parameter(k) for k in members]
            first = tensors[0]
            for k, t in zip(members, tensors):
                if t.dtype != first.dtype or t.device != first.device or t.shape[1:] != first.shape[1:]:
                    raise ValueError(
                        f"{type(self).__name__} (thunder-aot): {k} ({_describe(t)} on {t.device}) "
                        f"cannot be merged with {members[0]} ({_describe(first)} on {first.device}): "
                        "expected one dtype, device and row size"
                    )
            merged = _adjacent(tensors)
            if merged is None:  # else already one tensor's consecutive rows (merged by another module)
                with torch.no_grad():
                    merged = torch.cat([t.detach() for t in tensors], dim=0)
                start = 0
                for t in tensors:
                    t.data = merged[start : start + t.shape[0]]
                    start += t.shape[0]
            self._place(key, "buffer", merged, False)

    def _merged_intact(self) -> bool:
        for key, members in self.MERGED:
            merged = self.get_buffer(key)
            start = merged.data_ptr()
            for k in members:
                t = self.get_parameter(k)
                if t.data_ptr() != start or t.dtype != merged.dtype or t.device != merged.device:
                    return False
                start += t.numel() * t.element_size()
        return True

    def _merged_again(self, *inputs):
        """A call whose checks found a member parameter outside its merged tensor (replaced,
        converted with the module holding it, e.g. a model's ``.to()`` after ``replace``): merge
        the current parameters, then call again."""
        self.merge_projections()
        return self.forward(*inputs)

    def _remerge(self) -> None:
        if self.MERGED and not self._merged_intact():
            self.merge_projections()

    def _apply(self, fn, recurse=True):
        # to(), cuda(), half(), to_empty(): convert the members, not the merged copy, then re-merge
        for key, _ in self.MERGED:
            *path, leaf = key.split(".")
            self.get_submodule(".".join(path))._buffers.pop(leaf, None)
        result = super()._apply(fn, recurse)
        if self.MERGED:
            self.merge_projections()
        return result

    def _place(self, key: str, kind: str, tensor: torch.Tensor, persistent: bool) -> None:
        owner: torch.nn.Module = self
        *path, leaf = key.split(".")
        for name in path:
            if name not in owner._modules:
                owner.add_module(name, torch.nn.Module())
            owner = owner._modules[name]
        if kind == "parameter":
            owner.register_parameter(
                leaf, tensor if isinstance(tensor, torch.nn.Parameter) else torch.nn.Parameter(tensor)
            )
        else:
            owner.register_buffer(leaf, tensor, persistent=persistent)

    @classmethod
    def from_module(cls, source: torch.nn.Module):
        """A module computing ``source``'s forward that shares (does not copy) its tensors.

        Raises ValueError when ``source`` has other settings (eps, scales) than the exported one."""
        for path, exported in cls.EXPORTED_SETTINGS.items():
            owner = setting(source, path)
            if type(owner) is not type(exported) or owner != exported:
                raise ValueError(
                    f"{cls.__name__} (thunder-aot) was exported for {path}={exported!r}; "
                    f"the source has {owner!r}"
                )
        module = cls(device="meta")
        for key, kind, shape, dtype, persistent in cls.STATE:
            tensor = source.get_parameter(key) if kind == "parameter" else source.get_buffer(key)
            if tuple(tensor.shape) != tuple(shape) or tensor.dtype != dtype:
                raise ValueError(
                    f"{cls.__name__} (thunder-aot) was exported for {key} of shape {_shape_text(shape)} "
                    f"and dtype {str(dtype).removeprefix('torch.')}; the source has {_describe(tensor)}"
                )
            module._place(key, kind, tensor, persistent)
        if cls.MERGED:
            module.merge_projections()
        if cls.FALLBACK:
            module.__dict__["_fallback_source"] = source  # not a submodule: state_dict stays the source's
        return module

    def _outside_buckets(self, error: NoBucketError, *inputs):
        """Inputs outside every bucket: the source module's forward (``FALLBACK``), else ``error``."""
        source = self.__dict__.get("_fallback_source")
        if source is None:
            raise error
        return source(*inputs)

    def warmup(self, device: torch.device | str | None = None, **sizes: list[int]) -> int:
        """Call every bucket once per size (default: each dynamic dim at its edges; pass e.g.
        ``s0=[1, 15, 128]`` to choose), so that kernels are recorded and compiled before serving.
        Returns the number of calls made."""
        if device is None:
            tensors = itertools.chain(self.parameters(), self.buffers())
            first = next(tensors, None)
            device = first.device if first is not None else ("cuda" if torch.cuda.is_available() else "cpu")
        calls = 0
        for ranges, make_inputs in self.WARMUP:
            choices = [sizes.get(name, bounds) for name, bounds in ranges.items()]
            for values in itertools.product(*choices):
                if not all(lo <= v <= hi for v, (lo, hi) in zip(values, ranges.values())):
                    continue
                args = [torch.randn(shape, device=device).to(dtype) for shape, dtype in make_inputs(*values)]
                with torch.no_grad():
                    self(*args)
                calls += 1
        return calls

    def train(self, mode: bool = True):
        """As ``nn.Module.train``, and on ``mode=True`` a warning (once per class): the module runs
        its source's forward as exported, in eval mode, whatever its ``training`` flag says."""
        if mode and type(self).__name__ not in _TRAIN_WARNED:
            _TRAIN_WARNED.add(type(self).__name__)
            warnings.warn(
                f"thunder-aot: {type(self).__name__} runs its source's forward as exported, in eval mode "
                "(no dropout, normalization statistics not updated); train() changes nothing it computes",
                RuntimeWarning,
                stacklevel=2,
            )
        return super().train(mode)

    def cuda_graphs(self, outputs: str = "fresh") -> torch.nn.Module:
        """This module's calls replayed from CUDA graphs, one per input signature, captured at its
        first call or by ``warmup()`` (:class:`thunder_aot.runtime.graphs.CudaGraphs`). ``outputs``:
        ``"fresh"`` (new tensors per call) or ``"static"`` (the graph's buffers, overwritten by the
        next call of the same shapes)."""
        return CudaGraphs(self, outputs)

    def __init_subclass__(cls, **kwargs) -> None:
        # a subclass of a generated class with a forward of its own (and no __call__) is called
        # through nn.Module.__call__, which calls that forward
        super().__init_subclass__(**kwargs)
        if "forward" in cls.__dict__ and "__call__" not in cls.__dict__:
            cls.__call__ = torch.nn.Module.__call__
