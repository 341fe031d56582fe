"""Code generation: a :class:`~thunder_aot.ir.Program` rendered into a Python module.

All decisions are made in :mod:`.module` (the module view) and in the backends' region views; the
templates in ``templates/`` only loop over those views and fill slots (:mod:`.render`). The
``@generated`` header is written and read by :mod:`.header`; :mod:`.output` writes files. Only
:mod:`.render` imports the exporter's dependencies (jinja2, black): the others serve ``load`` and
``check`` on a machine that holds just the runtime.
"""
