"""The passes over the traced program, one module each, named for what it does; each module's
``PASS`` is a :class:`~thunder_aot.passes.base.Pass`. :data:`thunder_aot.pipeline.PASSES` orders
them. ``merge_projections`` rewrites the whole program (its inputs too) and runs after them;
``refused_regions_as_source_calls`` is the pipeline's answer to a refusal by verification."""
