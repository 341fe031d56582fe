"""Stands first on a subprocess's path while a test without the ``traces`` marker runs
(tests/conftest.py): such a test must not trace, so Thunder cannot be imported there."""

raise ImportError("a test not marked 'traces' started a subprocess that imports Thunder (it traces)")
