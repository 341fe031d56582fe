"""The one exception type the command line turns into a single line of output."""

from __future__ import annotations


class ExportError(Exception):
    """A problem with the user's input or module, reported as one line without a traceback."""
