"""What a pass is: a named rewrite of one bucket's program, the backend capability it needs, and
the backend's verdict on regions (:class:`Kernels`) that passes consult before they change one."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from thunder_aot.backends.base import Backend, RegionView
from thunder_aot.ir import BucketProgram, DimRange, Region


@dataclass
class Kernels:
    """The backend's verdict on the regions of one bucket's program (its dynamic ``dims``), each
    region's view built once however many passes ask."""

    backend: Backend
    dims: tuple[DimRange, ...]
    _views: dict[Region, RegionView] = field(default_factory=dict)

    def view(self, region: Region) -> RegionView:
        if region not in self._views:
            self._views[region] = self.backend.region_view(region, self.dims)
        return self._views[region]

    def makes_kernel(self, region: Region) -> bool:
        return self.view(region).runs_kernel

    def contiguous_outputs(self, region: Region) -> set[str]:
        """The region's outputs a kernel writes contiguously into tensors it allocated."""
        if not self.view(region).runs_kernel:
            return set()
        return {o.name for o in region.outputs} - set(self.view(region).strided_outputs)


@dataclass(frozen=True)
class Pass:
    """One rewrite of a bucket's program. Every pass leaves each value the program computes as
    eager computes it; it changes only where the values are computed (a kernel or a torch call).
    The one exception, drop_round_trip_casts, keeps a region's intermediates in the wider dtype
    they were computed in, where Thunder's record rounds and widens them again."""

    #: what the pass does, as its module is named
    name: str
    run: Callable[[BucketProgram, Kernels], BucketProgram]
    #: the :class:`~thunder_aot.backends.base.Backend` flag that must be set for the pass to run
    #: (None: it runs for every backend)
    requires: str | None = None

    def applies_to(self, backend: Backend) -> bool:
        return self.requires is None or bool(getattr(backend, self.requires))
