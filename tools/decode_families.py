"""Which transformers causal LMs the decode API takes: a small model of each family (the examples'
sizes: hidden 256, 4 heads, 2 KV heads, intermediate 512, 2 layers, vocabulary 512, sdpa
attention), random weights, float32 on CPU, decoded by ``StaticDecoder`` with the model's own
layers; prints per family whether its greedy tokens are ``generate``'s, or the error in one line.
Structure only: the generated layers are not exported (tests/test_decode.py does that for a few).

    PYTHONPATH=. .venv/bin/python tools/decode_families.py [Family ...]
    (default: the families below; a name is transformers' class prefix, e.g. Qwen3 for Qwen3Config)
"""

from __future__ import annotations

import sys

import torch
import transformers

from thunder_aot.examples.hf import _randomize, _small_config
from thunder_aot.integrations.transformers import StaticDecoder

#: class prefix -> config fields beyond the examples' sizes
FAMILIES = {
    "Llama": {},
    "Mistral": {},
    "Qwen2": {},
    "Qwen3": {},
    "Granite": {},
    "Olmo": {},
    "Olmo2": {},
    "Olmo3": dict(sliding_window=4, layer_types=["sliding_attention", "full_attention"]),
    "Gemma2": dict(head_dim=64),
    "Gemma3": dict(head_dim=64, sliding_window=4, layer_types=["sliding_attention", "full_attention"]),
    "Cohere": {},
    "StableLm": {},
    "Phi": dict(partial_rotary_factor=0.5),
    "Phi3": {},
    "Glm": {},
    "Starcoder2": {},
    "Exaone4": {},
    "SmolLM3": {},
    "Arcee": {},
    "SeedOss": {},
    "Apertus": {},
    "Mixtral": {},
    "Qwen3Moe": {},
}
#: token ids every config names, inside the probe's vocabulary
TOKEN_IDS = dict(pad_token_id=0, bos_token_id=1, eos_token_id=2)


def probe(family: str, fields: dict) -> str:
    config_name = "Gemma3TextConfig" if family == "Gemma3" else f"{family}Config"
    config = _small_config(getattr(transformers, config_name), **TOKEN_IDS, **fields)
    model = _randomize(getattr(transformers, f"{family}ForCausalLM")(config), 5).eval()
    ids = torch.randint(0, config.vocab_size, (1, 7), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        want = model.generate(ids, max_new_tokens=8, do_sample=False, pad_token_id=0)
    got = StaticDecoder(model, None, max_len=32, cuda_graph=False).generate(ids, 8)
    return "generate's tokens" if torch.equal(want, got) else f"other tokens: {got[0, 7:].tolist()}"


def main(names: list[str]) -> None:
    for family in names or FAMILIES:
        try:
            result = probe(family, FAMILIES.get(family, {}))
        except Exception as e:  # noqa: BLE001 - reported, one line per family
            result = f"{type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''}"
        print(f"{family}: {result}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
