"""Render a :class:`~thunder_aot.ir.Program` into a Python module's text: the module view
(:mod:`.module`), Jinja, black."""

from __future__ import annotations

from pathlib import Path

import black
import jinja2

from thunder_aot.backends.base import Backend
from thunder_aot.codegen.module import module_view
from thunder_aot.ir import Program

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
