"""Render a :class:`~thunder_aot.model.Program` into a Python module: the module view, Jinja, black,
and an atomic write.

All decisions are made in :mod:`.module` and in the backends' region views; the templates in
``templates/`` only loop over those views and fill slots.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import black
import jinja2

from thunder_aot.backends.base import Backend
from thunder_aot.codegen.module import UNCHECKED_NOTE, module_view
from thunder_aot.model import Program

__all__ = ["BLACK_MODE", "UNCHECKED_NOTE", "environment", "module_view", "render", "write_atomic"]

BLACK_MODE = black.Mode(line_length=110, target_versions={black.TargetVersion.PY310})


def templates_dir() -> Path:
    """Templates ship inside the wheel as thunder_aot/templates; in a checkout they are ../../templates."""
    packaged = Path(__file__).parent.parent / "templates"
    return packaged if packaged.is_dir() else Path(__file__).parent.parent.parent / "templates"


def environment() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(templates_dir())),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        autoescape=False,
    )


def render(
    program: Program, backend: Backend, command: str, versions: dict[str, str], checks: bool = True
) -> str:
    view = module_view(program, backend, command, versions, checks)
    text = environment().get_template("module.py.jinja").render(m=view)
    return black.format_str(text, mode=BLACK_MODE)


def write_atomic(path: Path, text: str) -> bool:
    """Write ``text`` to ``path`` through a temporary file and a rename (nothing half-written is ever
    left at ``path``), with the permissions a plain write would give; False if unchanged."""
    path = Path(path)
    if path.exists() and path.read_text() == text:
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    # the mode a plain open() would give: the file's own when it exists, else what the umask allows
    umask = os.umask(0)
    os.umask(umask)
    mode = path.stat().st_mode & 0o777 if path.exists() else 0o666 & ~umask
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return True
