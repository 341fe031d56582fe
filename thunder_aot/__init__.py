"""thunder-aot: export Thunder's fusions of a PyTorch module as a plain Python module.

Importing the package is cheap (generated modules import :mod:`thunder_aot.runtime` through it):
the public names load on first use.
"""

from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["__version__", "export", "load", "replace"]


def __getattr__(name: str):
    # loaded on use: ``import thunder_aot`` (and the runtime generated modules import) stays light
    if name == "replace":
        from thunder_aot.swap import replace

        return replace
    if name in ("export", "load"):
        from thunder_aot import api

        return getattr(api, name)
    raise AttributeError(f"module 'thunder_aot' has no attribute {name!r}")
