"""thunder-aot: export Thunder's fusions of a PyTorch module as a plain Python module."""

from thunder_aot.swap import replace

__version__ = "0.1.0"

__all__ = ["__version__", "replace"]
