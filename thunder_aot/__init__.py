"""thunder-aot: export Thunder's fusions of a PyTorch module as a plain, reviewable Python module."""

__version__ = "0.1.0"
