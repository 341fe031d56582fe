"""Put generated modules into a running model."""

from __future__ import annotations

from collections.abc import Callable

import torch

from thunder_aot.integrations.transformers import (
    LAYER_CALLS,
    DecoderLayerCacheCall,
    DecoderLayerStaticCacheCall,
    LayerAdapter,
)


def replace(
    model: torch.nn.Module,
    match: type | Callable[[str, torch.nn.Module], bool],
    generated: type,
    *,
    cuda_graphs: str | None = None,
) -> list[str]:
    """Swap every submodule of ``model`` that ``match`` selects for ``generated.from_module(submodule)``.

    ``match`` is a class (``isinstance``) or a predicate ``(qualified_name, module) -> bool``;
    ``generated`` is the generated ``nn.Module`` class (e.g. ``g.LlamaRMSNorm``). Each new module
    shares the replaced submodule's own tensors, and ``from_module`` refuses a submodule whose
    settings (eps, ...) differ from the exported ones. Returns the qualified names replaced, in
    ``named_modules`` order. ``model`` itself is never replaced. ``cuda_graphs`` (``"fresh"`` or
    ``"static"``): each generated module replays its calls from CUDA graphs (``module.cuda_graphs``).

    A module generated from a whole decoder layer
    (:class:`thunder_aot.integrations.transformers.DecoderLayerCall`) replaces bare transformers layers
    too: each becomes a :class:`~thunder_aot.integrations.transformers.LayerAdapter` that takes the
    layer's call convention, keeps its ``state_dict`` keys, and runs the original layer for the calls
    the generated module does not serve (a KV cache, an attention mask).
    """
    if not hasattr(generated, "from_module"):
        raise TypeError(f"{generated!r} is not a thunder-aot generated module class (it has no from_module)")
    selected = match if not isinstance(match, type) else (lambda name, module: isinstance(module, match))
    chosen = [name for name, module in model.named_modules() if name and selected(name, module)]
    # a submodule inside one already chosen goes with its parent
    chosen = [n for n in chosen if not any(n.startswith(p + ".") for p in chosen if p != n)]
    new = {
        name: _replacement(model.get_submodule(name), generated, cuda_graphs) for name in chosen
    }  # check all first
    for name, module in new.items():
        parent_name, _, leaf = name.rpartition(".")
        setattr(model.get_submodule(parent_name) if parent_name else model, leaf, module)
    return chosen


def _replacement(module: torch.nn.Module, generated: type, cuda_graphs: str | None) -> torch.nn.Module:
    call = LAYER_CALLS.get(generated.__name__)
    if cuda_graphs is not None and call is DecoderLayerStaticCacheCall:
        raise ValueError(
            "replace: cuda_graphs with a static-cache layer would copy the cache into the graph's inputs "
            "every call; use StaticDecoder, which captures the whole step"
        )
    if cuda_graphs is not None and call is DecoderLayerCacheCall:
        raise ValueError(
            "replace: cuda_graphs with a KV-cache layer would capture a graph per cache length "
            "(its inputs grow every step); capture the serving loop's own graph instead "
            "(the generated modules run inside it)"
        )
    if call is not None and not isinstance(module, tuple(LAYER_CALLS.values())):
        return LayerAdapter.wrap(module, generated, cuda_graphs)
    new = generated.from_module(module)
    return new if cuda_graphs is None else new.cuda_graphs(cuda_graphs)
