"""CUDA graphs around a generated module: one graph per input signature, replayed afterwards.

``module.cuda_graphs()`` (any generated module, or any ``nn.Module`` whose forward takes tensors
and returns a tensor or a tuple of tensors) gives a :class:`CudaGraphs` wrapper:

- the first call with a signature (each input's shape, strides, dtype and device) runs the module
  twice on a side stream (first-call compiles, cuBLAS workspaces), then captures one call into a
  ``torch.cuda.CUDAGraph`` whose inputs are static buffers; ``warmup()`` captures ahead of serving;
- later calls with that signature copy their inputs into the static buffers (an input that *is*
  the static buffer, from :meth:`CudaGraphs.static_inputs`, is not copied) and replay the graph;
- outputs: ``outputs="fresh"`` (the default) returns new tensors, copies of the graph's outputs,
  that the caller owns; ``outputs="static"`` returns the graph's own output buffers, which the next
  call of the same signature overwrites (no copy: consume or copy them before the next call);
- inside a caller's own capture (``torch.cuda.graph``, as SGLang captures its decode batches) and
  for non-CUDA inputs the wrapper calls the module directly: its kernels become part of the
  caller's graph;
- all graphs of one wrapper share one memory pool (their intermediates are reused between
  captures); :attr:`CudaGraphs.memory` holds the bytes each capture added to the reserved memory;
- one wrapper serves one stream at a time: a lock orders calls from several threads on the host,
  but their CUDA streams must be ordered by the caller (static buffers are shared).

Weights are read by address: load new weights in place (``load_state_dict``, ``copy_``), never by
replacing the tensors, or the graphs keep reading the old ones.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

import torch

from thunder_aot.runtime.state import adopt_state

__all__ = ["CudaGraphs"]

#: the module's calls before a capture, on a side stream: compiles and lazy initialisations happen
#: outside the graph
WARM_CALLS = 2

OUTPUT_MODES = ("fresh", "static")


@dataclass
class _Graph:
    graph: torch.cuda.CUDAGraph
    inputs: tuple[torch.Tensor, ...]
    outputs: tuple[torch.Tensor, ...]
    single: bool  # the module returned one tensor (not a tuple)


def _signature(inputs: tuple) -> tuple:
    return tuple((t.shape, t.stride(), t.dtype, t.device) for t in inputs)


class CudaGraphs(torch.nn.Module):
    """``module``'s calls replayed from CUDA graphs (see the module docstring); its parameters and
    buffers are the module's own, under the same ``state_dict`` keys."""

    def __init__(self, module: torch.nn.Module, outputs: str = "fresh") -> None:
        if outputs not in OUTPUT_MODES:
            raise ValueError(
                f"cuda_graphs: outputs must be one of {', '.join(map(repr, OUTPUT_MODES))}; got {outputs!r}"
            )
        super().__init__()
        adopt_state(self, module)
        self.__dict__["module"] = module
        self.outputs = outputs
        self._graphs: dict[tuple, _Graph] = {}
        self._pool = None
        self._lock = threading.Lock()
        #: reserved CUDA memory each capture added, in bytes, by input shapes
        self.memory: dict[tuple[tuple[int, ...], ...], int] = {}

    @property
    def graphs(self) -> int:
        """How many graphs are captured."""
        return len(self._graphs)

    def forward(self, *inputs: torch.Tensor):
        if (
            not inputs
            or not all(isinstance(t, torch.Tensor) and t.is_cuda for t in inputs)
            or (torch.cuda.is_current_stream_capturing())
        ):
            return self.__dict__["module"](*inputs)
        with self._lock:
            entry = self._graphs.get(_signature(inputs))
            if entry is None:
                entry = self._capture(inputs)
            for static, given in zip(entry.inputs, inputs):
                if static is not given:
                    static.copy_(given)
            entry.graph.replay()
            outs = entry.outputs if self.outputs == "static" else tuple(o.clone() for o in entry.outputs)
        return outs[0] if entry.single else outs

    def static_inputs(self, *inputs: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """The static input buffers of the graph for these inputs' signature (captured now if
        needed): a caller that writes its inputs there saves the copies."""
        with self._lock:
            entry = self._graphs.get(_signature(inputs)) or self._capture(inputs)
        return entry.inputs

    def _capture(self, inputs: tuple[torch.Tensor, ...]) -> _Graph:
        module = self.__dict__["module"]
        device = inputs[0].device
        static = tuple(
            torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device=t.device).copy_(t) for t in inputs
        )
        side = torch.cuda.Stream(device)
        side.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(side):
            for _ in range(WARM_CALLS):
                module(*static)
        torch.cuda.current_stream(device).wait_stream(side)
        if self._pool is None:
            self._pool = torch.cuda.graph_pool_handle()
        reserved = torch.cuda.memory_reserved(device)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self._pool):
            out = module(*static)
        single = isinstance(out, torch.Tensor)
        outs = (out,) if single else tuple(out)
        if not all(isinstance(o, torch.Tensor) for o in outs):
            raise TypeError(
                f"cuda_graphs: {type(module).__name__} must return a tensor or a tuple of tensors"
            )
        entry = _Graph(graph, static, outs, single)
        self._graphs[_signature(inputs)] = entry
        self.memory[tuple(tuple(t.shape) for t in inputs)] = torch.cuda.memory_reserved(device) - reserved
        return entry

    def warmup(self, device: torch.device | str | None = None, **sizes: list[int]) -> int:
        """The module's ``warmup`` through the graphs: captures a graph per bucket and size."""
        module = self.__dict__["module"]
        if not hasattr(module, "WARMUP"):
            raise TypeError(
                f"cuda_graphs: {type(module).__name__} has no buckets to warm up; call it with inputs"
            )
        return type(module).warmup(self, device, **sizes)

    @property
    def WARMUP(self):  # noqa: N802 - the generated class's table, for warmup
        return self.__dict__["module"].WARMUP

    def extra_repr(self) -> str:
        return (
            f"{type(self.__dict__['module']).__name__}, outputs={self.outputs!r}, graphs={len(self._graphs)}"
        )
