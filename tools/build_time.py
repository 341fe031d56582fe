# Contributor tooling (not part of thunder-aot): where the cold-start bench's shared part goes, the
# Llama-1B-shaped causal LM's imports and build step by step on the GPU machine (the `cold` suite of
# tools/gpu_suites.py runs it after the cold-start bench).
# Usage: . .gpu/env.sh && python3 tools/build_time.py
import time

t0 = time.time()
import torch  # noqa: E402  (timed: the imports happen between the clock reads on purpose)

t1 = time.time()
from transformers import LlamaForCausalLM  # noqa: E402  (timed)

t2 = time.time()
torch.zeros(1, device="cuda")
torch.cuda.synchronize()
t3 = time.time()
from thunder_aot.examples import hf  # noqa: E402  (timed)

t4 = time.time()
config = hf.llama_config(
    hidden_size=2048,
    intermediate_size=8192,
    num_hidden_layers=16,
    num_attention_heads=32,
    num_key_value_heads=8,
    head_dim=64,
    rms_norm_eps=1e-5,
    vocab_size=128256,
    max_position_embeddings=4096,
    tie_word_embeddings=True,
)
with torch.device("cuda"):
    model = LlamaForCausalLM(config)
torch.cuda.synchronize()
t5 = time.time()
hf._randomize(model, 30)
torch.cuda.synchronize()
t6 = time.time()
model = model.to(torch.bfloat16)
torch.cuda.synchronize()
t7 = time.time()
print(
    f"import torch {t1-t0:.2f} s, import transformers {t2-t1:.2f} s, CUDA init {t3-t2:.2f} s, "
    f"import thunder_aot.examples.hf {t4-t3:.2f} s, LlamaForCausalLM(config) on cuda {t5-t4:.2f} s, "
    f"_randomize {t6-t5:.2f} s, to(bf16) {t7-t6:.2f} s; total {t7-t0:.2f} s"
)
