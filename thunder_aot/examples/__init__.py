"""Bundled example modules, so that every command in the README works with no user code.

They mirror the modules found in transformers' LLM implementations, written out here so the
examples need no transformers install (no weights are downloaded either way).
"""
