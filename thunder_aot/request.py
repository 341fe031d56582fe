"""What an export is asked for: the source module, its shape buckets, the backend and the options
(the CLI's flags and the Python API's arguments), and the command line that asks for it again."""

from __future__ import annotations

import dataclasses
import shlex
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from thunder_aot.shapes import format_bucket, parse_shapes

if TYPE_CHECKING:  # the CLI imports this module before torch (its --help does not load torch)
    import torch

#: seeds (verification's, bench's) are integers in [0, SEED_LIMIT): what torch.Generator takes
SEED_LIMIT = 2**63

#: where export reports what it does, one line at a time
Progress = Callable[[str], None]


@dataclass(frozen=True)
class ExportRequest:
    source: str
    shapes: tuple[str, ...]
    backend: str = "nvfuser"
    out: str | None = None
    fallback: bool = False
    nvfuser_dynamic: str = "specialize"
    nvfuser_frontend: str = "direct"
    #: per-call checks of inputs, parameters and autograd in the generated module (off: --unchecked)
    checks: bool = True
    #: the seed of verification's random inputs (None: a fresh one, named in any refusal)
    verify_seed: int | None = None
    #: compare the generated module with its source before returning it (off: --no-verify, which
    #: the header records)
    verify: bool = True
    #: one matmul for linear layers that read one input (q/k/v, gate/up), where the backend's
    #: kernels can slice their parts (off: --no-merge-projections, which the header records)
    merge_projections: bool = True
    #: the module itself where it was given as an object (Python API), not found by ``source``
    instance: torch.nn.Module | None = dataclasses.field(default=None, compare=False, repr=False)

    def command(self) -> str:
        """The exact command line that regenerates the output (written into its header)."""
        buckets = "; ".join(format_bucket(b) for b in parse_shapes(list(self.shapes)))
        parts = ["thunder-aot", "export", self.source, "--shapes", buckets, "--backend", self.backend]
        if self.fallback:
            parts.append("--fallback")
        if self.nvfuser_dynamic != "specialize":
            parts += ["--nvfuser-dynamic", self.nvfuser_dynamic]
        if self.nvfuser_frontend != "direct":
            parts += ["--nvfuser-frontend", self.nvfuser_frontend]
        if not self.checks:
            parts.append("--unchecked")
        if not self.verify:
            parts.append("--no-verify")
        if not self.merge_projections:
            parts.append("--no-merge-projections")
        if self.out is not None:
            parts += ["--out", Path(self.out).as_posix()]
        return shlex.join(parts)
