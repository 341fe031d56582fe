"""Run a callback on a module as soon as it is imported (or now, where it already is): how the
tests wrap the exporter's functions without importing it (and torch, Thunder) up front."""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
from collections.abc import Callable


class _AfterImport(importlib.abc.MetaPathFinder):
    def __init__(self, name: str, callback: Callable) -> None:
        self.name, self.callback = name, callback

    def find_spec(self, name, path, target=None):
        if name != self.name:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return spec
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            self.callback(module)

        spec.loader.exec_module = exec_module
        return spec


def after_import(name: str, callback: Callable) -> None:
    if name in sys.modules:
        callback(sys.modules[name])
    else:
        sys.meta_path.insert(0, _AfterImport(name, callback))
