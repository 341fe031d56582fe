"""Integrations of thunder-aot with other libraries' models: what export traces of them and what puts
the generated modules back into them at run time (:mod:`thunder_aot.integrations.transformers`)."""
