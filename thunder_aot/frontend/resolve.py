"""Turn an import path into the ``nn.Module`` instance to export.

The path is imported as ``python -m`` imports: the current directory comes first on the import
path, for the ``thunder-aot`` command as for ``python -m thunder_aot`` (which puts it there
itself), in ``export`` and in ``check`` alike; ``mymod:Cls`` run from mymod's folder finds it.
"""

from __future__ import annotations

import importlib
import inspect
import os
import sys

import torch

from thunder_aot.errors import ExportError


def _with_current_directory() -> None:
    """The current directory first on ``sys.path``, as ``python -m`` puts it (``""`` counts)."""
    here = os.getcwd()
    if not any(p in ("", here) for p in sys.path):
        sys.path.insert(0, here)


def _import_attr(path: str) -> object:
    _with_current_directory()
    if ":" in path:
        module_name, _, attr_path = path.partition(":")
        candidates = [(module_name, attr_path)]
    else:
        parts = path.split(".")
        candidates = [(".".join(parts[:i]), ".".join(parts[i:])) for i in range(len(parts) - 1, 0, -1)]
    if not path or not all(candidates[0]):
        raise ExportError(
            f"bad import path {path!r}; expected 'package.module:attr' or 'package.module.attr'"
        )
    first_error: Exception | None = None
    for module_name, attr_path in candidates:
        try:
            obj: object = importlib.import_module(module_name)
        except ModuleNotFoundError as e:
            # keep looking only when it is the module we asked for that does not exist
            if e.name is not None and (module_name == e.name or module_name.startswith(e.name + ".")):
                first_error = first_error or e
                continue
            raise ExportError(f"importing {module_name!r} failed: {type(e).__name__}: {e}") from e
        except ExportError:
            raise
        except Exception as e:  # the user's module raised while importing
            raise ExportError(f"importing {module_name!r} failed: {type(e).__name__}: {e}") from e
        for attr in attr_path.split("."):
            if not hasattr(obj, attr):
                raise ExportError(
                    f"module {module_name!r} has no attribute {attr_path!r} (from import path {path!r})"
                )
            obj = getattr(obj, attr)
        return obj
    raise ExportError(f"cannot import {path!r}: no module named {getattr(first_error, 'name', path)!r}")


def resolve_module(path: str) -> torch.nn.Module:
    """An ``nn.Module`` instance, or a class / zero-argument factory returning one."""
    obj = _import_attr(path)
    if isinstance(obj, torch.nn.Module):
        return obj
    if callable(obj):
        if inspect.isclass(obj) and not issubclass(obj, torch.nn.Module):
            raise ExportError(f"{path!r} is the class {obj.__name__}, not a torch.nn.Module subclass")
        try:
            made = obj()
        except TypeError as e:
            raise ExportError(
                f"calling {path!r} with no arguments failed ({e}); "
                "expected an nn.Module, its class or a zero-argument factory"
            ) from e
        except Exception as e:
            raise ExportError(f"calling {path!r} failed: {type(e).__name__}: {e}") from e
        if isinstance(made, torch.nn.Module):
            return made
        raise ExportError(f"{path!r}() returned {type(made).__name__}, not a torch.nn.Module")
    raise ExportError(f"{path!r} is a {type(obj).__name__}, not a torch.nn.Module, its class or a factory")
