"""Greedy decoding of a transformers causal LM over a static KV cache, each step one CUDA graph.

:class:`StaticDecoder` keeps every layer's keys and values preallocated (``[batch, kv_heads,
max_len, head_dim]``) and runs the model's embedding, its decoder layers as
:class:`~thunder_aot.integrations.transformers.export_wrappers.DecoderLayerStaticCacheCall` (a module
generated from it, or the layer itself), its final norm, its LM head and the greedy pick, with no
per-step Python of transformers. A step writes one slot of the cache in place; on CUDA it is
captured once per decoder (one graph for its batch size) and replayed.

The sequences of a batch share the cache's slots: a prompt shorter than the batch's longest is
padded on the left (its ``attention_mask`` says where), its padding slots are masked out of every
attention, and its rotary positions count its own tokens only, as transformers' ``generate`` does
for a left-padded batch.
"""

from __future__ import annotations

import torch
from torch import nn

from thunder_aot.integrations.transformers.attention import as_mask, layer_windows, mask_dtype, slot_mask
from thunder_aot.integrations.transformers.cache_slots import static_mask_dtype
from thunder_aot.integrations.transformers.export_wrappers import LAYER_CALLS, DecoderLayerStaticCacheCall
from thunder_aot.integrations.transformers.rotary import final_norm, rotary_call, rotary_kinds, static_rope
from thunder_aot.verify.judge import judge_output, references_making, run_recording_choices

__all__ = ["StaticDecoder", "judge_steps", "kv_cache_dims", "rope_width"]


def kv_cache_dims(config) -> tuple[int, int]:
    """``(kv_heads, head_dim)`` of a transformers decoder config: a KV cache's heads and width."""
    heads = config.num_attention_heads
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    return kv_heads, getattr(config, "head_dim", None) or config.hidden_size // heads


def rope_width(model: nn.Module) -> int:
    """The width of the cos and sin that ``model``'s rotary embedding gives (a head's width for most
    families, half of it for GPT-OSS): the rotary inputs of its decoder layers, read off one call
    (for the first layer's rotary kind, :mod:`.rotary`)."""
    base = model.model
    dtype = next(model.parameters()).dtype
    device = next(model.parameters()).device
    with torch.no_grad():
        probe = torch.zeros(1, 1, 1, dtype=dtype, device=device)
        positions = torch.zeros(1, 1, dtype=torch.long, device=device)
        cos, _ = rotary_call(base.rotary_emb, probe, positions, rotary_kinds(model)[0])
    return cos.shape[-1]


def _generated_layers(layers: list, classes: dict, config) -> list:
    """Each layer as the generated class of its layer type (``classes``: by ``config.layer_types``
    entry, or one class under None for every layer)."""
    if None in classes:
        return [classes[None].from_module(layer) for layer in layers]
    types = list(getattr(config, "layer_types", None) or [])
    if len(types) != len(layers):
        raise TypeError(
            f"StaticDecoder: generated classes by layer type need config.layer_types for each of the "
            f"{len(layers)} layers, got {len(types)}"
        )
    missing = sorted(set(types) - set(classes))
    if missing:
        raise TypeError(
            f"StaticDecoder: no generated class for layer type(s) {', '.join(missing)}; "
            f"got {', '.join(sorted(classes))}"
        )
    return [classes[t].from_module(layer) for t, layer in zip(types, layers)]


class StaticDecoder:
    """Greedy decoding of ``model`` (a transformers decoder-only causal LM with the Llama layout:
    ``model.model.embed_tokens``, ``.rotary_emb``, ``.layers``, ``.norm`` (or ``.final_layernorm``)
    and ``model.lm_head``) for
    ``batch_size`` sequences of up to ``max_len`` tokens, prompt included.

    ``generated_class``: a class generated from ``DecoderLayerStaticCacheCall`` (its buckets must
    serve this batch size, ``max_len``, the decode step and the prefill lengths), or a dict of them
    by layer type (``config.layer_types``: a model whose sliding and full layers differ in a setting
    the export recorded, as Gemma 3's ``is_sliding``, needs an export of each), or None to run the
    model's own layers through the same call. ``cuda_graph``: capture the decode step (default: on
    CUDA). The model is used, not copied; its weights are shared.

    ``prefill(ids, attention_mask=None)`` fills the cache and returns the next token of each
    sequence; ``step(tokens)`` appends them and returns the next ones; ``insert(row, ids)`` starts
    one sequence again from a new prompt while the others go on; ``generate(ids, n,
    attention_mask=None)`` prefills and steps, and returns ``ids`` with ``n`` new tokens."""

    def __init__(
        self,
        model: nn.Module,
        generated_class: type | dict[str, type] | None = None,
        max_len: int = 2048,
        batch_size: int = 1,
        cuda_graph: bool | None = None,
    ) -> None:
        classes = generated_class if isinstance(generated_class, dict) else {None: generated_class}
        for cls in classes.values():
            if cls is not None and LAYER_CALLS.get(getattr(cls, "__name__", None)) is not (
                DecoderLayerStaticCacheCall
            ):
                raise TypeError(
                    "StaticDecoder: expected a class generated from DecoderLayerStaticCacheCall "
                    f"(or a dict of them by layer type), got {getattr(cls, '__name__', repr(cls))}"
                )
        base = getattr(model, "model", None)
        missing = [
            name
            for name, owner in (
                ("model.embed_tokens", base),
                ("model.rotary_emb", base),
                ("model.layers", base),
                ("lm_head", model),
            )
            if not hasattr(owner, name.rsplit(".", 1)[-1])
        ]
        norm = None if base is None else final_norm(base)
        if base is not None and norm is None:
            missing.append("model.norm (or model.final_layernorm)")
        if missing:
            raise TypeError(
                f"StaticDecoder: {type(model).__name__} lacks {', '.join(missing)} "
                "(expected a decoder-only causal LM with the Llama layout)"
            )
        if not (
            isinstance(max_len, int) and max_len >= 2 and isinstance(batch_size, int) and batch_size >= 1
        ):
            raise ValueError(
                "StaticDecoder: expected max_len >= 2 and batch_size >= 1, "
                f"got {max_len!r} and {batch_size!r}"
            )
        config = model.config
        self.model, self.base, self.norm = model, base, norm
        self.max_len, self.batch_size = max_len, batch_size
        weight = next(model.parameters())
        self.device, self.dtype = weight.device, weight.dtype
        self.cuda_graph = self.device.type == "cuda" if cuda_graph is None else cuda_graph
        if self.cuda_graph and self.device.type != "cuda":
            raise ValueError("StaticDecoder: cuda_graph=True needs the model on a CUDA device")
        layers = [DecoderLayerStaticCacheCall(layer) for layer in base.layers]
        self.layers = layers if generated_class is None else _generated_layers(layers, classes, config)
        kv_heads, head_dim = kv_cache_dims(config)
        shape = (batch_size, kv_heads, max_len, head_dim)
        self.keys = [torch.zeros(shape, dtype=self.dtype, device=self.device) for _ in layers]
        self.values = [torch.zeros(shape, dtype=self.dtype, device=self.device) for _ in layers]
        self.windows = layer_windows(config)
        if len(self.windows) != len(layers):
            self.windows = [None] * len(layers)
        #: the layers' mask dtype: the generated class's (its decode bucket's mask input), else the
        #: model's (bool for sdpa, additive for eager attention)
        self.mask_dtype = (
            mask_dtype(model) if generated_class is None else static_mask_dtype(next(iter(classes.values())))
        )
        #: slot l of sequence b holds one of its tokens
        self.valid = torch.zeros(batch_size, max_len, dtype=torch.bool, device=self.device)
        self.slots = torch.arange(max_len, device=self.device)
        #: each layer's rotary kind (its layer type where the model has a rotary embedding per type)
        self.rope_kinds = rotary_kinds(model)
        #: per rotary kind, every position's cos and sin (``[max_len, head_dim]``), where the model's
        #: rotary embedding does not depend on the positions a call holds; None: computed per call
        self.rope_tables = {kind: self._rope_table(max_len, kind) for kind in dict.fromkeys(self.rope_kinds)}
        #: the decode step's inputs and output (static: a captured graph reads and writes these)
        self.tokens = torch.zeros(batch_size, 1, dtype=torch.long, device=self.device)
        self.start = torch.zeros(1, dtype=torch.long, device=self.device)
        self.rope_positions = torch.zeros(batch_size, 1, dtype=torch.long, device=self.device)
        self.next_tokens = torch.zeros(batch_size, dtype=torch.long, device=self.device)
        #: the last prefill's or step's logits (``[batch_size, vocab]``; a captured step's are the
        #: graph's own tensor, rewritten by each replay: clone to keep them)
        self.logits: torch.Tensor | None = None
        self.length = 0  # slots filled (shared by the batch)
        self._graph: torch.cuda.CUDAGraph | None = None

    # -- the computation ------------------------------------------------------------------------

    def _rope_table(self, max_len: int, kind: str | None) -> tuple[torch.Tensor, torch.Tensor] | None:
        """The rotary embedding's cos and sin for layers of ``kind`` at positions ``0 .. max_len -
        1``, computed once by the model's own rotary module (the values a call at those positions
        gets: each is one product of a frequency and a position, then cos and sin); None for rotary
        types that rescale with the longest position of a call (dynamic NTK, LongRoPE)."""
        rotary = self.base.rotary_emb
        if not static_rope(rotary, kind):
            return None
        positions = torch.arange(max_len, device=self.device)[None]
        probe = torch.zeros(1, max_len, 1, dtype=self.dtype, device=self.device)
        with torch.no_grad():
            cos, sin = rotary_call(rotary, probe, positions, kind)
        return cos[0].contiguous(), sin[0].contiguous()

    def _rope(
        self, hidden: torch.Tensor, rope_positions: torch.Tensor
    ) -> dict[str | None, tuple[torch.Tensor, torch.Tensor]]:
        """Each rotary kind's cos and sin at ``rope_positions``."""
        ropes = {}
        for kind, table in self.rope_tables.items():
            if table is None:
                cos, sin = rotary_call(self.base.rotary_emb, hidden, rope_positions, kind)
                ropes[kind] = cos.contiguous(), sin.contiguous()
            else:
                ropes[kind] = table[0][rope_positions], table[1][rope_positions]
        return ropes

    def _masks(
        self, start: torch.Tensor, seq: int, valid: torch.Tensor, step: bool = False
    ) -> dict[int | None, torch.Tensor]:
        """Each window's ``[batch, 1, seq, max_len]`` mask: query ``s`` (slot ``start + s``) attends
        the valid slots up to its own (within the window), and always its own slot (a padding query
        attends itself only: no row without a key)."""
        query = start + torch.arange(seq, device=self.device)
        masks = {}
        for window in dict.fromkeys(self.windows):
            if step and window is None:
                # a decode step's token attends every valid slot: they all precede it, its own included
                masks[window] = as_mask(valid[:, None, None, :], self.mask_dtype)
            else:
                masks[window] = slot_mask(query, self.slots, self.mask_dtype, valid, window)
        return masks

    def _forward(
        self,
        ids: torch.Tensor,
        start: torch.Tensor,
        rope_positions: torch.Tensor,
        rows: slice = slice(None),
        step: bool = False,
    ) -> torch.Tensor:
        """The last position's logits of ``ids`` (``[batch, seq]``, the sequences ``rows``) written at
        slots ``start ..`` (``step``: a decode step of the whole batch)."""
        hidden = self.base.embed_tokens(ids)
        ropes = self._rope(hidden, rope_positions)
        masks = self._masks(start, ids.shape[1], self.valid[rows], step)
        for layer, keys, values, window, kind in zip(
            self.layers, self.keys, self.values, self.windows, self.rope_kinds
        ):
            hidden = layer(hidden, *ropes[kind], keys[rows], values[rows], start, masks[window])
        return self.model.lm_head(self.norm(hidden[:, -1:, :]))[:, 0]

    def _step(self) -> None:
        self.valid.index_fill_(1, self.start, True)
        self.logits = self._forward(self.tokens, self.start, self.rope_positions, step=True)
        self.next_tokens.copy_(self.logits.argmax(-1))

    # -- the API --------------------------------------------------------------------------------

    def reset(self) -> None:
        """Forget every sequence (the cache's contents are masked out, not cleared)."""
        self.valid.zero_()
        self.length = 0

    @torch.no_grad()
    def prefill(self, ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        """Start the batch's sequences from ``ids`` (``[batch_size, prompt]``, left-padded where
        ``attention_mask`` has zeros) and return each one's next token (greedy)."""
        if not (isinstance(ids, torch.Tensor) and ids.dim() == 2 and ids.shape[0] == self.batch_size):
            raise ValueError(
                f"StaticDecoder.prefill: expected token ids of shape [{self.batch_size}, prompt], "
                f"got {tuple(ids.shape) if isinstance(ids, torch.Tensor) else type(ids).__name__}"
            )
        if not 1 <= ids.shape[1] < self.max_len:
            raise ValueError(
                f"StaticDecoder.prefill: a prompt of {ids.shape[1]} tokens "
                f"does not fit max_len {self.max_len}"
            )
        if attention_mask is None:
            attention_mask = torch.ones_like(ids)
        elif attention_mask.shape != ids.shape:
            raise ValueError(
                f"StaticDecoder.prefill: expected an attention_mask of shape {tuple(ids.shape)}, "
                f"got {tuple(attention_mask.shape)}"
            )
        ids, attention_mask = ids.to(self.device), attention_mask.to(self.device).bool()
        self.reset()
        seq = ids.shape[1]
        self.valid[:, :seq] = attention_mask
        rope = (attention_mask.long().cumsum(-1) - 1).clamp(min=0)
        start = torch.zeros(1, dtype=torch.long, device=self.device)
        self.logits = self._forward(ids, start, rope)
        self.length = seq
        self.rope_positions.copy_(rope[:, -1:] + 1)
        self.next_tokens.copy_(self.logits.argmax(-1))
        return self.next_tokens.clone()

    @torch.no_grad()
    def insert(self, row: int, ids: torch.Tensor) -> torch.Tensor:
        """Start sequence ``row`` again from the prompt ``ids`` (1-D) while the others go on (a
        finished sequence's slot taking a new request; the captured step is kept): the prompt takes
        the slots just before the batch's current one, so it may be at most as long as the batch's
        sequences so far. Returns its next token; pass it in ``row`` of the next ``step``."""
        if not (isinstance(row, int) and 0 <= row < self.batch_size):
            raise ValueError(f"StaticDecoder.insert: expected a row in 0..{self.batch_size - 1}, got {row!r}")
        if not (isinstance(ids, torch.Tensor) and ids.dim() == 1 and ids.numel() >= 1):
            raise ValueError(
                "StaticDecoder.insert: expected a 1-D tensor of token ids, got "
                f"{tuple(ids.shape) if isinstance(ids, torch.Tensor) else type(ids).__name__}"
            )
        if ids.numel() > self.length:
            raise ValueError(
                f"StaticDecoder.insert: a prompt of {ids.numel()} tokens needs as many slots before the "
                f"batch's current one ({self.length}); prefill a new batch instead"
            )
        prompt, end = ids.numel(), self.length
        self.valid[row] = False
        self.valid[row, end - prompt : end] = True
        start = torch.tensor([end - prompt], dtype=torch.long, device=self.device)
        rope = torch.arange(prompt, device=self.device)[None]
        logits = self._forward(ids.to(self.device)[None], start, rope, slice(row, row + 1))
        self.rope_positions[row] = prompt
        self.next_tokens[row] = logits.argmax(-1)[0]
        return self.next_tokens[row].clone()

    @torch.no_grad()
    def step(self, tokens: torch.Tensor) -> torch.Tensor:
        """Append ``tokens`` (``[batch_size]``) to every sequence and return the next ones (greedy)."""
        if not (isinstance(tokens, torch.Tensor) and tuple(tokens.shape) == (self.batch_size,)):
            raise ValueError(
                f"StaticDecoder.step: expected {self.batch_size} token ids, got "
                f"{tuple(tokens.shape) if isinstance(tokens, torch.Tensor) else type(tokens).__name__}"
            )
        if self.length == 0:
            raise RuntimeError("StaticDecoder.step: no sequence started (call prefill first)")
        if self.length >= self.max_len:
            raise RuntimeError(f"StaticDecoder.step: the cache is full (max_len {self.max_len})")
        self.tokens.copy_(tokens.view(-1, 1))
        self.start.fill_(self.length)
        if not self.cuda_graph:
            self._step()
        else:
            if self._graph is None:
                self._capture()
            self._graph.replay()
        self.length += 1
        self.rope_positions += 1
        return self.next_tokens.clone()

    def _capture(self) -> None:
        """Capture the decode step (after warm-up runs on a side stream) without changing the cache:
        the warm-up steps write the slot about to be written anyway, and restore ``valid``."""
        valid = self.valid.clone()
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(2):
                self._step()
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            self._step()
        self.valid.copy_(valid)
        self._graph = graph

    @torch.no_grad()
    def generate(
        self, ids: torch.Tensor, new_tokens: int, attention_mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        """``ids`` followed by ``new_tokens`` greedy tokens per sequence (``[batch_size, prompt + n]``)."""
        if ids.shape[-1] + new_tokens > self.max_len:
            raise ValueError(
                f"StaticDecoder.generate: {ids.shape[-1]} + {new_tokens} tokens exceed max_len {self.max_len}"
            )
        out = [self.prefill(ids, attention_mask)]
        for _ in range(new_tokens - 1):
            out.append(self.step(out[-1]))
        return torch.cat([ids.to(self.device), torch.stack(out, 1)], 1)


class _SequenceLogits(nn.Module):
    """A causal LM's logits over a whole sequence, its mask and positions as inputs."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, sequence, mask, positions):
        return self.model(
            input_ids=sequence, attention_mask=mask, position_ids=positions, use_cache=False
        ).logits


@torch.no_grad()
def judge_steps(
    decoder: StaticDecoder, ids: torch.Tensor, steps: int = 16, attention_mask: torch.Tensor | None = None
) -> int:
    """Judge the logits of ``decoder``'s prefill of ``ids`` and of its next ``steps`` steps as export
    judges a module's outputs (:func:`thunder_aot.verify.judge.judge_output`): against its model run
    in float64 over the same tokens, each may err a small multiple of what the model in its own
    dtype errs, plus one rounding step. The tokens are the decoder's own greedy picks, and both runs
    of the model read them (one forward over the whole sequence each), so a near tie that the
    decoder breaks otherwise than eager does not end the comparison. Where the model routes tokens
    to experts (top-k selections), eager and float64 route each token as the decoder did
    (:func:`decoder_choices`; :func:`thunder_aot.verify.judge.check_chosen` says why). Raises
    ExportError naming the first call that errs more; returns how many calls were judged
    (``steps + 1``)."""
    if attention_mask is None:
        attention_mask = torch.ones_like(ids)
    calls, tokens, picks = [], [], []
    for k in range(steps + 1):
        call = (decoder.prefill, [ids, attention_mask]) if k == 0 else (decoder.step, [tokens[-1]])
        token, made = run_recording_choices(*call)
        tokens.append(token)
        picks.append(made)
        calls.append(decoder.logits.clone())
    if decoder.cuda_graph and picks[0]:  # a replay calls no top-k: the same steps run plainly
        picks = _plain_run_choices(decoder, ids, attention_mask, tokens[:-1])
    sequence = torch.cat([ids.to(decoder.device), torch.stack(tokens[:-1], 1)], 1)
    mask = torch.cat([attention_mask.to(decoder.device), torch.ones_like(sequence[:, ids.shape[1] :])], 1)
    positions = (mask.long().cumsum(-1) - 1).clamp(min=0)

    first = ids.shape[1] - 1
    logits, inputs = _SequenceLogits(decoder.model), [sequence, mask, positions]
    expected, eager = run_recording_choices(logits, inputs)
    choices = (decoder_choices(picks, ids.shape[0]) if picks[0] else []) or eager
    if len(choices) == len(eager):
        # a padding token's picks are no measure (nothing attends it; the decoder lets it attend
        # itself alone, the model its own way): there eager and float64 route as eager did
        choices = [_padding_routed_as(e, c, mask.cpu() == 0) for e, c in zip(eager, choices)]
    against = references_making(logits, inputs, eager, choices)

    def at(name: str, k: int) -> torch.Tensor | None:
        return None if against[name] is None else against[name][:, first + k]

    for k, actual in enumerate(calls):
        where = "StaticDecoder's prefill" if k == 0 else f"StaticDecoder's step {k}"
        judge_output(
            expected[:, first + k],
            actual,
            at("reference", k),
            f"{where} (logits)",
            at("reference_ours", k),
            at("expected_ours", k),
            at("perturbed", k),
        )
    return len(calls)


def _plain_run_choices(
    decoder: StaticDecoder, ids: torch.Tensor, attention_mask: torch.Tensor, tokens: list[torch.Tensor]
) -> list[list[torch.Tensor]]:
    """The top-k picks of each call of ``decoder``'s prefill of ``ids`` and its steps over ``tokens``,
    run without its captured graph (the same kernels: the picks its replays made)."""
    graphed, decoder.cuda_graph = decoder.cuda_graph, False
    try:
        picks = [run_recording_choices(decoder.prefill, [ids, attention_mask])[1]]
        picks += [run_recording_choices(decoder.step, [token])[1] for token in tokens]
    finally:
        decoder.cuda_graph = graphed
    return picks


def _padding_routed_as(eager: torch.Tensor, picks: torch.Tensor, padding: torch.Tensor) -> torch.Tensor:
    """``picks`` (one selection's, over a whole sequence) with ``eager``'s at the padding tokens
    (``padding``: ``[batch, tokens]``, True there); ``picks`` as they are where the shapes disagree."""
    if eager.shape != picks.shape or picks.numel() != padding.numel() * picks.shape[-1]:
        return picks
    return torch.where(padding.reshape(*picks.shape[:-1], 1), eager, picks)


def decoder_choices(picks: list[list[torch.Tensor]], batch: int) -> list[torch.Tensor]:
    """The top-k picks of one forward over a whole decoded sequence, from a decoder's calls' own
    (``picks``: per call, the prefill's then each step's, its top-k selections' in order: one per
    MoE layer): each selection's picks joined along the sequence, per sequence of the ``batch``.
    A selection's picks are ``[batch * tokens, k]`` (transformers' routers flatten the tokens of a
    batch) or ``[batch, tokens, k]``; [] where the calls made different numbers of selections
    (the float64 run then routes as eager does)."""
    if any(len(made) != len(picks[0]) for made in picks):
        return []
    joined = []
    for selection in zip(*picks):
        k = selection[0].shape[-1]
        if any(p.dim() not in (2, 3) or p.numel() % (batch * k) for p in selection):
            return []
        sequence = torch.cat([p.reshape(batch, -1, k) for p in selection], 1)
        joined.append(sequence.reshape(-1, k) if selection[0].dim() == 2 else sequence)
    return joined
