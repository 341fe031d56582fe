#!/usr/bin/env bash
# Contributor tooling (not part of thunder-aot): batches of GPU tests and benchmarks for this
# project's GPU machine, see tools/README.md and docs/contributing.md.
# One batched GPU session; each step has its own time limit, and everything lands in
# $OUT/results.tgz after every step (a call cut short keeps what it finished).
# Usage on the GPU machine:  . .gpu/env.sh && bash tools/gpu_session.sh [full|final]
#   full  (default): all GPU tests, Triton schedule sweep, Triton hot-path overhead, per-module benches
#   check: all GPU tests, then the gated_mlp bench alone (full log), then softmax, gelu_gate, rotary benched
#   hotpath: all GPU tests, then the hot-path layers (overhead.py) and the seed's table (seed_table.py)
#   verify: the Triton hot path's steps one by one, the hot-path layers of both backends, all GPU tests
#           (also cuda:1 on the two-GPU machine), then rmsnorm benched (S=1, 128, 2048 and 65536 for the bandwidth)
#   ab OLD.py: after a Triton change: the old rmsnorm module against generated/rmsnorm_triton.py in one
#       run, the Triton hot-path layers, all GPU tests, then rmsnorm, gelu_gate and gated_mlp benched
#   tiles: after a change of the Triton kernels: their GPU tests (also cuda:1, memcheck), the rows-per-program
#          sweep, then the modules with several rows per program benched
#   tiles1 / tiles2: the tiles mode in two calls of under 10 minutes: (1) the Triton GPU tests, the
#          rows-per-program sweep, the schedule sweep and fd_compare; (2) rotary, softmax and gated_mlp
#          benched, then the Triton hot-path layers
#   closing: all GPU tests (also cuda:1), then rotary and softmax benched, then the per-module hot path
#   sound: sound export's repeat run: tools/seed_verify.py under 20 seeds, nvFuser and Triton, each
#          (backend, set) in its own process at once (nvFuser compiles per size on the CPU)
#   sound-modules BACKEND SET NAME...: the same for the named modules of one set, one process each
#   models1: the kernel GPU tests (tests/test_gpu.py), then the Llama-3.2-1B-shaped causal LM per forward at
#          S = 1, 16, 128 (eager, torch.compile default and reduce-overhead, whole layers, layer stack)
#   models2: the GPT-OSS-shaped decoder layer benched (Triton, nvFuser, torch.compile), then the causal LM at S = 1024
#   models3: the GPT-OSS-shaped layer (with its mask: causal, as the model runs it) benched (its export traces on AMX hosts since bfe8848), then the
#          causal LM's cold start (fresh processes, empty and warm caches) at S = 16
#   models4: the GPT-OSS-shaped causal LM (4 layers, mask layers: eager attention, sliding windows)
#          benched at S = 1, 16, 128, 1024, then the model GPU tests
#   models5: the Llama causal LM at the issue's other token counts (2..64; 256..2048 with 568, 1369)
#   models6: the GPU tests never run before (GPT-OSS mask-layer stack with graphs, the nvFuser kernel
#          store across processes), then the GPT-OSS-shaped causal LM benched at S = 1, 16
#   models7: the GPT-OSS-shaped causal LM benched at S = 128, 1024
#   models8: the GPT-OSS Triton model GPU tests and the nvFuser kernel store, then the GPT-OSS-shaped
#          causal LM benched at S = 1, 16 (after the fixes of s13_models6b)
#   models9: the Llama causal LM at S = 1, 16 with merged projections, against reduce-overhead
#   models10: models9's Llama bench, then the GPT-OSS layer-stack graph test and the nvFuser kernel store
#          one by one (-x: the failure's summary before the step's limit)
#   models11: the nvFuser export of the small GPT-OSS layer verified on the GPU (its stepped slices)
#   models12: models11's test, then the Llama causal LM's cold start at S = 16 (fresh processes, empty and warm caches)
#   models13: after the gather and join passes: the Triton kernel GPU tests (examples, index kernels with the
#          new modules, memcheck), the GPT-OSS mask-layer stack with graphs, then the GPT-OSS-shaped model at S = 1, 16
#   models14: memcheck of the Triton kernels, the GPT-OSS mask-layer stack test (judged by check_chosen), then the
#          GPT-OSS-shaped layer's device time by kernel (tools/layer_profile.py: Triton, nvFuser, torch.compile)
#   models15: after the whole-row sink softmax and 32-bit indices: the GPT-OSS-shaped model at S = 1, 16, then the
#          Triton kernel GPU tests (examples, index kernels, memcheck)
#   models16: the GPT-OSS-shaped layer benched (Triton, nvFuser, torch.compile at S = 1, 16, 128, 1024), then its
#          Triton device time by kernel at S = 1, 16, 1024
#   models17: after the routing program (exporter.routing) and common expressions computed once in index kernels:
#          the Triton kernel GPU tests, the GPT-OSS-shaped model at S = 1, 16, then the GPT-OSS stack test
#   models18: the GPT-OSS-shaped layer at S = 1024 alone (Triton, nvFuser, torch.compile: models16 ran out of time
#          there), then its Triton device time by kernel at S = 1, 1024
#   models19: the MoE blocks of four transformers families on the GPU (Triton export verified there, CUDA-graph
#          replay judged by check_chosen), then the GPT-OSS-shaped layer at S = 1024 (Triton, nvFuser, torch.compile)
#   models20: the Llama causal LM's cold start at S = 16 (models12's step) after the examples draw their random
#          weights on the GPU, where the model lives
#   models22: the Llama causal LM at S = 2, 4, 8, 15, 32, 64 (models5's first half)
#   models21: the Llama causal LM at S = 256, 512, 568, 1369, 2048 without reduce-overhead (the issue asks it at S <= 16)
#   models23: after the index kernels' shared values and tail lanes, transposed outputs as views and the compiled
#          nan_max: the Triton kernel GPU tests (examples, index kernels incl. copies and views, memcheck), then the
#          GPT-OSS-shaped layer at S = 1024 (Triton, nvFuser, torch.compile)
#   models24: after the top-k kernel (exporter.topk): memcheck of the Triton kernels (the copies modules with a kernel,
#          views, routers), the Triton kernel GPU tests, the MoE blocks and the GPT-OSS stack (picks recorded from the
#          kernels), then sdpa_tail's generated module and its source under memcheck alone
#   models28: the GPT-OSS-shaped layer at S = 1, 16, 128 (Triton, nvFuser, torch.compile)
#   models25: the GPT-OSS-shaped causal LM at issue 19's other token counts (2, 4, 8, 15 with reduce-overhead)
#   models26: the same at 32, 64, 256, 512, 568 (without reduce-overhead: the issue asks it at S <= 16)
#   models27: the same at 1369, 2048
#   models29: models26's S = 256 again (and 568, so that the bucket is models26's) after the model bench judges each
#          system against the float64 run making its own top-k picks (models26 refused every thunder-aot system at 256)
#   models30: issue 17's device-time point: every module of generated/ with a Triton kernel at 16384 rows (nvFuser and
#          Triton side by side, torch.compile and eager beside them)
#   models31: the kernel GPU tests, the Triton hot-path layers (tools/overhead.py), residual_rmsnorm at 16384 rows
#   models32: wide_rmsnorm, vocab_softmax, softmax and gated_mlp at 16384 rows (models30's steps, longer)
#   models33 OLD.py: the seed's Triton module against OLD.py (an earlier generated/rmsnorm_triton.py), then its
#          hot-path layers against the floor twice (tools/overhead.py, 15 rounds), then wide_rmsnorm and
#          vocab_softmax at 16384 rows and softmax at 8x2048 rows (tools/rows_device_time.py, softmax with
#          Triton variants), then the Triton GPU tests
#   models34: after the width classes: softmax at S = 2000, 2001, 2048 (rows_device_time, variants), the Triton
#          GPU tests, memcheck
#   models35 OLD.py: the seed's Triton module against OLD.py (tools/ab_modules.py) and against the floor twice
#          (tools/overhead.py, 15 rounds)
#   models36: num_warps of row kernels (rows_device_time variants /2, x2, x4, x8): softmax at S = 1024, 1500,
#          2048, and layer_norm, rmsnorm, gelu_gate, gated_mlp, residual_rmsnorm at 16384 rows
#   models37: the width units: models34 at S = 1024, 1500, 2000, 2001, 2048
#   models38: the run-time row width at every unit, eagerly and under torch.compile; the swapped Llama under
#          torch.compile and a plain model in a CUDA graph (Triton)
#   models39: the run-time row width at every unit (eagerly, torch.compile automatic dynamic and dynamic=True), then
#          the Llama-3.2-1B- and Qwen3-shaped decoder layers (sdpa) at S = 1, 16, 128, 1024 (Triton, nvFuser, torch.compile)
#   models40: after the kernels' helpers are defined under the names they are called by: models39's first step, the
#          graphs and breaks of softmax, rmsnorm and rotary under torch.compile (tools/compile_breaks.py), the seed's
#          Triton module against the floor (tools/overhead.py, 15 rounds), then the Triton GPU tests
#   models42: the index-kernel GPU test of expert_routing alone (it failed in models40), then the Triton GPU tests
#          models40 did not reach in its time
#   models43: models42's first step alone
#   models44: models42, then tools/compile_breaks.py (fullgraph under each dynamic setting) and the seed
#          RMSNorm's Triton module against the floor (tools/overhead.py)
#   models45: the last Triton GPU test models44 ran out of time for, then models41
#   models46: the transformers families added in session 24 (Cohere, T5, Starcoder2, GPT-NeoX, OLMo 2,
#          Granite) exported and verified on the GPU with the Triton backend
#   models41: the GPT-OSS-shaped layer at S = 1, 16, 128, 1024 (Triton, nvFuser, torch.compile)
#   models47: after merged projections trace as the member calls: tools/compile_breaks.py (softmax, rmsnorm, rotary,
#          gated_mlp), gated_mlp's Triton GPU tests, then the GPT-OSS-shaped layer at S = 128 with inputs of seed 1
#          (at seed 0 torch.compile's routing broke a near tie otherwise than eager's: s24_models45)
#   models49: after exporter.split and exporter.fill: their view modules on the GPU (latent_norm_and_rotary,
#          keys_fill), then the transformers families added in session 25 (Gemma 3, Phi, StableLM, Qwen3-MoE,
#          DeepSeek-V3 layers) exported and verified on the GPU with the Triton backend
#   models48: the seed RMSNorm's Triton module against the floor (tools/overhead.py) and benched at S = 1, 2048,
#          65536 (copy bandwidth), then the Triton GPU tests
#   models50: where the seed RMSNorm's module floor spends its time over the floor (tools/overhead.py: the
#          nn.Module call, the hook tests, the grad-mode and device tests, each added to the floor alone),
#          the nvFuser overhead table, then the Triton GPU tests (with exporter.slices' view module), then
#          Falcon's layer (exporter.slices, exporter.views on a weight's transpose) exported and verified with Triton
#   models51: after math_tanh, math_round and sizes as floats (a mean over a dynamic dim): the Triton GPU tests
#          (unary_math compiled), the new sound modules (sequence_statistics, modulated_layer_norm) under 20 seeds
#          with nvFuser and Triton, then the KV-cache layers' generate test with CUDA graphs (greedy_tokens)
#   final: after a Triton change: the Triton GPU tests (also cuda:1, models), the Triton hot-path layers,
#          then rmsnorm and softmax benched
set -u
W=$(mktemp -d)
pack() { tar czf "$OUT/results.tgz" -C "$W" . ; }
step() { local limit=$1 name=$2; shift 2; echo "=== $name"; timeout "$limit" "$@" > "$W/$name.log" 2>&1; echo "rc=$?" >> "$W/$name.log"; tail -4 "$W/$name.log"; pack; }
BENCH=(python3 -m thunder_aot bench --backends nvfuser,triton,triton:unchecked --rounds 2)
# one step benching a causal LM of thunder_aot.examples.hf with the Triton backend:
#   model_bench LIMIT NAME FACTORY SIZES SKIP [ROUNDS]   (the output under $W/NAME)
model_bench() { step "$1" "$2" env PYTHONUNBUFFERED=1 python3 -m thunder_aot bench "thunder_aot.examples.hf:$3" --model \
    --backends triton --sizes "$4" --rounds "${6:-2}" --min-run-time 0.05 --skip "$5" --out "$W/$2"; }
# GPT-OSS's decoder layer with its mask, as the causal LM runs it, and its bucket
GPT_OSS_LAYER=thunder_aot.examples.hf:gpt_oss_decoder_layer_mask
GPT_OSS_SHAPES="1x[S=1..1024]x2880:bf16, 1x[S]x32:bf16, 1x[S]x32:bf16, 1x1x[S]x[S]:bf16"
# the layer benched with both backends and torch.compile:  gpt_oss_layer_bench LIMIT NAME SIZES
gpt_oss_layer_bench() { step "$1" "$2" env PYTHONUNBUFFERED=1 python3 -m thunder_aot bench "$GPT_OSS_LAYER" --shapes "$GPT_OSS_SHAPES" \
    --backends triton,nvfuser --sizes "$3" --rounds 3 --min-run-time 0.05 --skip thunder.jit,thunderfx --out "$W/$2"; }
# the layer's device time by kernel:  gpt_oss_profile LIMIT SIZES [tools/layer_profile.py options]
gpt_oss_profile() { local limit=$1 sizes=$2; shift 2; step "$limit" gpt_oss_profile env PYTHONUNBUFFERED=1 python3 tools/layer_profile.py \
    "$GPT_OSS_LAYER" "$GPT_OSS_SHAPES" --sizes "$sizes" --top 40 "$@" --out "$W/gpt_oss_profile.md"; }
# a run-time row width on the GPU: softmax at S = $SOFTMAX_SIZES (default 2000 2001 2048; rows_device_time,
# variants), the Triton GPU tests, memcheck
width_class_checks() {
  for s in ${SOFTMAX_SIZES:-2000 2001 2048}; do
    step 100 "rows_softmax_$s" python3 tools/rows_device_time.py thunder_aot.examples.blocks:scaled_masked_softmax \
        "1x8x[S=1..2048]x[S]:bf16, 1x1x[S]x[S]:fp32" "$s" --variants --out "$W/rows_softmax_$s.md"
  done
  step 200 gpu_tests python3 -m pytest -m gpu tests/test_gpu.py -q -p no:cacheprovider -rs -k "triton or unaligned or adversarial or threads"
  step 150 memcheck python3 -m pytest -m gpu tests/test_gpu.py -q -p no:cacheprovider -rs -k memcheck
}
# the index-kernel GPU test of expert_routing alone, with its traceback (it failed once in s22_models40)
expert_routing_test() {
  step 90 expert_routing python3 -m pytest -m gpu tests/test_gpu.py -q -p no:cacheprovider -rs --tb=long -x \
      -k "views_on_the_gpu and expert_routing"
}
# generated/ modules benched at 16384 rows (nvFuser and Triton side by side):  rows16k LIMIT STEM,STEM...
rows16k() {
  local limit=$1 stems=",$2,"
  while IFS='|' read -r stem source shapes size; do
    case "$stems" in *",$stem,"*) ;; *) continue ;; esac
    step "$limit" "rows16k_$stem" python3 -m thunder_aot bench "$source" --shapes "$shapes" --backends nvfuser,triton \
        --sizes "$size" --rounds 2 --skip thunder.jit,thunderfx --out "$W/rows16k/$stem"
  done <<'LIST'
rmsnorm|thunder_aot.examples.gpt_oss:rmsnorm|1x[1..16384]x2880:bf16|16384
residual_rmsnorm|thunder_aot.examples.blocks:residual_rmsnorm|1x[S=1..16384]x2880:bf16, 1x[S]x2880:bf16|16384
wide_rmsnorm|thunder_aot.examples.blocks:wide_rmsnorm|1x[1..16384]x16384:bf16|16384
layer_norm|thunder_aot.examples.blocks:layer_norm|[1..16384]x1024:bf16|16384
gelu_gate|thunder_aot.examples.blocks:gelu_gate|[1..16384]x2048:bf16|16384
vocab_softmax|thunder_aot.examples.blocks:vocab_softmax|[1..16384]x32000:bf16|16384
rotary|thunder_aot.examples.blocks:rotary_embedding|1x8x[S=1..2048]x64:bf16, 1x1x[S]x64:bf16, 1x1x[S]x64:bf16|2048
softmax|thunder_aot.examples.blocks:scaled_masked_softmax|1x8x[S=1..2048]x[S]:bf16, 1x1x[S]x[S]:fp32|2048
gated_mlp|thunder_aot.examples.blocks:gated_mlp|[1..16384]x256:fp32|16384
LIST
}
if [ "${1:-full}" = check ]; then
  step 170 gpu_tests python3 -m pytest -m gpu tests/test_gpu.py tests/test_gpu_models.py -q -p no:cacheprovider -rs
  step 60 gated_mlp env PYTHONFAULTHANDLER=1 "${BENCH[@]}" thunder_aot.examples.blocks:gated_mlp --shapes "[1..512]x256:fp32" --sizes 1 --out "$W/gated_mlp"
  step 300 modules bash tools/modules.sh "$W/modules" 2 softmax,gelu_gate,rotary
elif [ "${1:-full}" = hotpath ]; then
  step 170 gpu_tests python3 -m pytest -m gpu tests/test_gpu.py tests/test_gpu_models.py -q -p no:cacheprovider -rs
  step 100 overhead python3 tools/overhead.py --rounds 3 --out "$W/overhead.md"
  step 280 seed_table python3 tools/seed_table.py --rounds 5 --out "$W/seed_rmsnorm"
elif [ "${1:-full}" = verify ]; then
  step 30 hotpath_parts python3 tools/hotpath_parts.py --rounds 3 --out "$W/hotpath_parts.md"
  step 130 overhead python3 tools/overhead.py --rounds 3 --out "$W/overhead.md"
  step 300 gpu_tests python3 -m pytest -m gpu tests/test_gpu.py tests/test_gpu_models.py -q -p no:cacheprovider -rs
  step 110 rmsnorm "${BENCH[@]}" thunder_aot.examples.gpt_oss:rmsnorm --shapes "1x[1..65536]x2880:bf16" --sizes 1,128,2048,65536 --out "$W/rmsnorm"
elif [ "${1:-full}" = ab ]; then
  step 100 ab python3 tools/ab_modules.py "$2" generated/rmsnorm_triton.py --rounds 5
  step 70 overhead_triton python3 tools/overhead.py --backends triton --rounds 3 --out "$W/overhead_triton.md"
  step 300 gpu_tests python3 -m pytest -m gpu tests/test_gpu.py tests/test_gpu_models.py -q -p no:cacheprovider -rs
  step 150 modules bash tools/modules.sh "$W/modules" 2 rmsnorm,gelu_gate,gated_mlp
elif [ "${1:-full}" = tiles ]; then
  step 200 gpu_tests python3 -m pytest -m gpu tests/test_gpu.py tests/test_gpu_models.py -q -p no:cacheprovider -rs -k "triton or unaligned or adversarial or threads or second_gpu or another_gpu"
  step 170 triton_tiles python3 tools/triton_tiles.py --out "$W/triton_tiles.md"
  step 150 modules bash tools/modules.sh "$W/modules" 1 rotary,softmax,layer_norm,gelu_gate
elif [ "${1:-full}" = tiles1 ]; then
  step 220 gpu_tests python3 -m pytest -m gpu tests/test_gpu.py tests/test_gpu_models.py -q -p no:cacheprovider -rs -k "triton or unaligned or adversarial or threads or second_gpu or another_gpu"
  step 170 triton_tiles python3 tools/triton_tiles.py --out "$W/triton_tiles.md"
  step 80 triton_schedule python3 tools/triton_schedule.py --out "$W/triton_schedule.md"
  step 50 fd_compare python3 tools/fd_compare.py --out "$W/fd_compare.md"
elif [ "${1:-full}" = tiles2 ]; then
  step 340 modules bash tools/modules.sh "$W/modules" 2 rotary,softmax,gated_mlp
  step 80 overhead_triton python3 tools/overhead.py --backends triton --rounds 3 --out "$W/overhead_triton.md"
  step 40 hotpath_parts python3 tools/hotpath_parts.py --rounds 3 --out "$W/hotpath_parts.md"
elif [ "${1:-full}" = closing ]; then
  step 330 gpu_tests python3 -m pytest -m gpu tests/test_gpu.py tests/test_gpu_models.py -q -p no:cacheprovider -rs
  step 150 modules bash tools/modules.sh "$W/modules" 1 rotary,softmax
  step 60 hotpath_modules python3 tools/hotpath_modules.py --rounds 5 --out "$W/hotpath_modules.md"
elif [ "${1:-full}" = models1 ]; then
  step 150 gpu_tests python3 -m pytest -m gpu tests/test_gpu.py -q -p no:cacheprovider -rs
  step 390 llama1b_model env PYTHONUNBUFFERED=1 python3 -m thunder_aot bench thunder_aot.examples.hf:llama_1b_causal_lm --model \
      --backends triton --sizes 1,16,128 --rounds 2 --min-run-time 0.05 --skip 'torch.compile(layers)' --out "$W/llama1b_stack"
elif [ "${1:-full}" = models2 ]; then
  step 280 gpt_oss_layer env PYTHONUNBUFFERED=1 python3 -m thunder_aot bench thunder_aot.examples.hf:gpt_oss_decoder_layer \
      --shapes "1x[S=1..1024]x2880:bf16, 1x[S]x32:bf16, 1x[S]x32:bf16" --backends triton,nvfuser --sizes 1,16,128,1024 \
      --rounds 3 --min-run-time 0.05 --skip thunder.jit,thunderfx --out "$W/gpt_oss_layer"
  step 200 llama1b_model_1024 env PYTHONUNBUFFERED=1 python3 -m thunder_aot bench thunder_aot.examples.hf:llama_1b_causal_lm --model \
      --backends triton --sizes 1024 --rounds 2 --min-run-time 0.05 --skip 'torch.compile(layers)' --out "$W/llama1b_stack_1024"
elif [ "${1:-full}" = models3 ]; then
  gpt_oss_layer_bench 300 gpt_oss_layer 1,16,128,1024
  step 280 llama1b_cold env PYTHONUNBUFFERED=1 python3 -m thunder_aot bench thunder_aot.examples.hf:llama_1b_causal_lm --model \
      --cold-start --backends triton --sizes 16 --out "$W/llama1b_cold"
elif [ "${1:-full}" = models4 ]; then
  model_bench 420 gpt_oss_model gpt_oss_causal_lm 1,16,128,1024 "torch.compile(layers)" 3
  step 170 gpu_tests python3 -m pytest -m gpu tests/test_gpu_models.py -q -p no:cacheprovider -rs
elif [ "${1:-full}" = models5 ]; then
  # the Llama model at the issue's other token counts (S=1,16,128,1024 are in models1/models2)
  model_bench 420 llama1b_small llama_1b_causal_lm 2,4,8,15,32,64 "torch.compile(layers)"
  model_bench 420 llama1b_large llama_1b_causal_lm 256,512,568,1369,2048 "torch.compile(layers)"
elif [ "${1:-full}" = models6 ]; then
  step 200 gpu_tests_new python3 -m pytest -m gpu tests/test_gpu_models.py tests/test_gpu.py -q -p no:cacheprovider -rs \
      -k "gpt_oss or kernels_are_reused" -s
  model_bench 360 gpt_oss_model gpt_oss_causal_lm 1,16 "torch.compile(layers)"
elif [ "${1:-full}" = models7 ]; then
  model_bench 560 gpt_oss_model_large gpt_oss_causal_lm 128,1024 "torch.compile(layers)"
elif [ "${1:-full}" = models8 ]; then
  step 150 gpu_tests_new python3 -m pytest -m gpu tests/test_gpu_models.py tests/test_gpu.py -q -p no:cacheprovider -rs \
      -k "(gpt_oss and triton) or kernels_are_reused" -s
  model_bench 420 gpt_oss_model gpt_oss_causal_lm 1,16 "torch.compile(layers)"
elif [ "${1:-full}" = models9 ]; then
  model_bench 320 llama1b_merged llama_1b_causal_lm 1,16 "torch.compile,torch.compile(layers)"
elif [ "${1:-full}" = models10 ]; then
  model_bench 300 llama1b_merged llama_1b_causal_lm 1,16 "torch.compile,torch.compile(layers)"
  step 100 gpt_oss_stack_test python3 -m pytest -m gpu tests/test_gpu_models.py -x -p no:cacheprovider -rs --tb=short \
      -k "gpt_oss_mask_layer_stack and triton"
  step 80 kernel_store_test python3 -m pytest -m gpu tests/test_gpu.py -x -p no:cacheprovider -rs --tb=short -s -k kernels_are_reused
elif [ "${1:-full}" = models11 ]; then
  step 110 gpt_oss_nvfuser_test python3 -m pytest -m gpu tests/test_gpu_models.py -x -p no:cacheprovider -rs --tb=short \
      -k "nvfuser and gpt_oss_small_decoder_layer"
elif [ "${1:-full}" = models12 ]; then
  step 110 gpt_oss_nvfuser_test python3 -m pytest -m gpu tests/test_gpu_models.py -x -p no:cacheprovider -rs --tb=short \
      -k "nvfuser and gpt_oss_small_decoder_layer"
  step 430 llama1b_cold env PYTHONUNBUFFERED=1 python3 -m thunder_aot bench thunder_aot.examples.hf:llama_1b_causal_lm --model \
      --cold-start --backends triton --sizes 16 --out "$W/llama1b_cold"
elif [ "${1:-full}" = models13 ]; then
  step 200 gpu_triton python3 -m pytest -m gpu tests/test_gpu.py -q -p no:cacheprovider -rs --tb=short \
      -k "triton_matches or regions_with_views or memcheck"
  step 100 gpt_oss_stack_test python3 -m pytest -m gpu tests/test_gpu_models.py -x -p no:cacheprovider -rs --tb=short \
      -k "gpt_oss_mask_layer_stack and triton"
  model_bench 370 gpt_oss_model gpt_oss_causal_lm 1,16 "torch.compile(layers)"
elif [ "${1:-full}" = models14 ]; then
  step 120 memcheck python3 -m pytest -m gpu tests/test_gpu.py -q -p no:cacheprovider -rs --tb=short -k memcheck
  step 110 gpt_oss_stack_test python3 -m pytest -m gpu tests/test_gpu_models.py -x -p no:cacheprovider -rs --tb=short \
      -k "gpt_oss_mask_layer_stack and triton"
  gpt_oss_profile 330 1,16,128,1024
elif [ "${1:-full}" = models15 ]; then
  model_bench 370 gpt_oss_model gpt_oss_causal_lm 1,16 "torch.compile(layers)"
  step 200 gpu_triton python3 -m pytest -m gpu tests/test_gpu.py -q -p no:cacheprovider -rs --tb=short \
      -k "triton_matches or regions_with_views or memcheck"
elif [ "${1:-full}" = models16 ]; then
  gpt_oss_layer_bench 300 gpt_oss_layer 1,16,128,1024
  gpt_oss_profile 200 1,16,1024 --backends triton
elif [ "${1:-full}" = models17 ]; then
  step 120 gpu_triton python3 -m pytest -m gpu tests/test_gpu.py -q -p no:cacheprovider -rs --tb=short \
      -k "triton_matches or regions_with_views or memcheck"
  model_bench 200 gpt_oss_model gpt_oss_causal_lm 1,16 "torch.compile(layers)"
  step 100 gpt_oss_stack_test python3 -m pytest -m gpu tests/test_gpu_models.py -x -p no:cacheprovider -rs --tb=short \
      -k "gpt_oss_mask_layer_stack and triton"
elif [ "${1:-full}" = models18 ]; then
  gpt_oss_layer_bench 360 gpt_oss_layer_1024 1024
  gpt_oss_profile 150 1,1024 --backends triton
elif [ "${1:-full}" = models19 ]; then
  step 240 gpu_moe python3 -m pytest -m gpu tests/test_gpu_models.py -q -p no:cacheprovider -rs -k moe_blocks
  gpt_oss_layer_bench 330 gpt_oss_layer_1024 1024
elif [ "${1:-full}" = models20 ]; then
  step 480 llama1b_cold env PYTHONUNBUFFERED=1 python3 -m thunder_aot bench thunder_aot.examples.hf:llama_1b_causal_lm --model \
      --cold-start --backends triton --sizes 16 --out "$W/llama1b_cold"
elif [ "${1:-full}" = models22 ]; then
  model_bench 420 llama1b_small llama_1b_causal_lm 2,4,8,15,32,64 "torch.compile(layers)"
elif [ "${1:-full}" = models21 ]; then
  model_bench 500 llama1b_large llama_1b_causal_lm 256,512,568,1369,2048 "torch.compile(layers),torch.compile(reduce-overhead)"
elif [ "${1:-full}" = models23 ]; then
  step 170 gpu_triton python3 -m pytest -m gpu tests/test_gpu.py -q -p no:cacheprovider -rs --tb=short \
      -k "triton_matches or regions_with_views or memcheck"
  gpt_oss_layer_bench 330 gpt_oss_layer_1024 1024
elif [ "${1:-full}" = models24 ]; then
  step 150 memcheck python3 -m pytest -m gpu tests/test_gpu.py -q -p no:cacheprovider -rs --tb=short -k memcheck
  step 150 gpu_triton python3 -m pytest -m gpu tests/test_gpu.py -q -p no:cacheprovider -rs --tb=short \
      -k "triton_matches or regions_with_views"
  step 200 gpu_moe python3 -m pytest -m gpu tests/test_gpu_models.py -q -p no:cacheprovider -rs --tb=short \
      -k "moe_blocks or (gpt_oss_mask_layer_stack and triton)"
  # which side s18's memcheck errors inside sdpa_tail (no Triton kernel) belong to: the generated module, then eager
  MEMCHECK=(env PYTORCH_NO_CUDA_MEMORY_CACHING=1 compute-sanitizer --tool memcheck --leak-check no)
  step 45 memcheck_sdpa_tail "${MEMCHECK[@]}" python3 tests/triton_memcheck.py sdpa_tail
  step 45 memcheck_sdpa_tail_eager "${MEMCHECK[@]}" python3 tests/triton_memcheck.py sdpa_tail --eager
elif [ "${1:-full}" = models28 ]; then
  gpt_oss_layer_bench 500 gpt_oss_layer 1,16,128
elif [ "${1:-full}" = models25 ]; then
  model_bench 500 gpt_oss_model_small gpt_oss_causal_lm 2,4,8,15 "torch.compile(layers)"
elif [ "${1:-full}" = models26 ]; then
  model_bench 500 gpt_oss_model_mid gpt_oss_causal_lm 32,64,256,512,568 "torch.compile(layers),torch.compile(reduce-overhead)"
elif [ "${1:-full}" = models27 ]; then
  model_bench 500 gpt_oss_model_large2 gpt_oss_causal_lm 1369,2048 "torch.compile(layers),torch.compile(reduce-overhead)"
elif [ "${1:-full}" = models29 ]; then
  model_bench 400 gpt_oss_model_256 gpt_oss_causal_lm 256,568 "torch.compile(layers),torch.compile(reduce-overhead)"
elif [ "${1:-full}" = models30 ]; then
  rows16k 80 rmsnorm,residual_rmsnorm,wide_rmsnorm,layer_norm,gelu_gate,vocab_softmax,rotary,softmax,gated_mlp
elif [ "${1:-full}" = models31 ]; then
  step 240 gpu_tests python3 -m pytest -m gpu tests/test_gpu.py -q -p no:cacheprovider -rs
  step 110 overhead_triton python3 tools/overhead.py --backends triton --rounds 3 --out "$W/overhead_triton.md"
  rows16k 170 residual_rmsnorm
elif [ "${1:-full}" = models32 ]; then
  rows16k 140 wide_rmsnorm,vocab_softmax,softmax,gated_mlp
elif [ "${1:-full}" = models33 ]; then
  step 120 ab python3 tools/ab_modules.py "$2" generated/rmsnorm_triton.py --rounds 9
  for run in a b; do
    step 100 "overhead_triton_$run" python3 tools/overhead.py --backends triton --rounds 15 --min-run-time 0.05 \
        --only "guard only,generated forward()" --out "$W/overhead_triton_$run.md"
  done
  step 100 rows_wide_rmsnorm python3 tools/rows_device_time.py thunder_aot.examples.blocks:wide_rmsnorm \
      "1x[1..16384]x16384:bf16" 16384 --out "$W/rows_wide_rmsnorm.md"
  step 100 rows_vocab_softmax python3 tools/rows_device_time.py thunder_aot.examples.blocks:vocab_softmax \
      "[1..16384]x32000:bf16" 16384 --out "$W/rows_vocab_softmax.md"
  step 120 rows_softmax python3 tools/rows_device_time.py thunder_aot.examples.blocks:scaled_masked_softmax \
      "1x8x[S=1..2048]x[S]:bf16, 1x1x[S]x[S]:fp32" 2048 --variants --out "$W/rows_softmax.md"
  step 200 gpu_tests python3 -m pytest -m gpu tests/test_gpu.py -q -p no:cacheprovider -rs -k "triton or unaligned or adversarial or threads"
elif [ "${1:-full}" = models34 ]; then
  width_class_checks
elif [ "${1:-full}" = models35 ]; then
  step 120 ab python3 tools/ab_modules.py "$2" generated/rmsnorm_triton.py --rounds 9
  for run in a b; do
    step 100 "overhead_triton_$run" python3 tools/overhead.py --backends triton --rounds 15 --min-run-time 0.05 \
        --only "guard only,generated forward()" --out "$W/overhead_triton_$run.md"
  done
elif [ "${1:-full}" = models38 ]; then
  step 200 gpu_units python3 -m pytest -m gpu tests/test_gpu.py -q -p no:cacheprovider -rs -k "every_unit or c_launcher"
  step 300 gpu_models python3 -m pytest -m gpu tests/test_gpu_models.py -q -p no:cacheprovider -rs \
      -k "triton and (torch_compile or plain_model)"
elif [ "${1:-full}" = models39 ]; then
  step 120 gpu_units python3 -m pytest -m gpu tests/test_gpu.py -q -p no:cacheprovider -rs -k "every_unit"
  for layer in llama_1b_decoder_layer:64 qwen3_2b_decoder_layer:128; do
    name=${layer%%:*} rope=${layer##*:}
    step 230 "$name" env PYTHONUNBUFFERED=1 python3 -m thunder_aot bench "thunder_aot.examples.hf:$name" \
        --shapes "1x[S=1..1024]x2048:bf16, 1x[S]x$rope:bf16, 1x[S]x$rope:bf16" --backends triton,nvfuser \
        --sizes 1,16,128,1024 --rounds 3 --min-run-time 0.05 --skip thunder.jit,thunderfx --out "$W/$name"
  done
elif [ "${1:-full}" = models40 ]; then
  step 120 gpu_units python3 -m pytest -m gpu tests/test_gpu.py -q -p no:cacheprovider -rs -k "every_unit"
  step 150 compile_breaks env PYTHONUNBUFFERED=1 python3 tools/compile_breaks.py softmax rmsnorm rotary
  step 100 overhead_triton python3 tools/overhead.py --backends triton --rounds 15 --min-run-time 0.05 \
      --only "guard only,generated forward()" --out "$W/overhead_triton.md"
  step 180 gpu_tests python3 -m pytest -m gpu tests/test_gpu.py -q -p no:cacheprovider -rs -k "triton or unaligned or adversarial or threads"
elif [ "${1:-full}" = models42 ] || [ "${1:-full}" = models44 ]; then
  expert_routing_test
  step 150 gpu_tests_rest python3 -m pytest -m gpu tests/test_gpu.py -q -p no:cacheprovider -rs \
      -k "eager_attention_tail or copy_into_norm or sdpa_tail or rotary_scores or router or second_gpu or threads or unaligned or adversarial or memcheck or launch"
  if [ "$1" = models44 ]; then
    step 150 compile_breaks env PYTHONUNBUFFERED=1 python3 tools/compile_breaks.py softmax rmsnorm rotary
    step 160 overhead_triton python3 tools/overhead.py --backends triton --rounds 15 --min-run-time 0.05 \
        --only "guard only,generated forward()" --out "$W/overhead_triton.md"
  fi
elif [ "${1:-full}" = models45 ]; then
  step 150 gpu_test_simulated_triton python3 -m pytest -m gpu tests/test_gpu.py -q -p no:cacheprovider -rs --tb=long \
      -k "simulated_untested_triton"
  gpt_oss_layer_bench 330 gpt_oss_layer 1,16,128,1024
elif [ "${1:-full}" = models46 ]; then
  step 300 gpu_tests_more_families python3 -m pytest -m gpu tests/test_gpu_models.py -q -p no:cacheprovider -rs --tb=long \
      -k "triton and (cohere or t5_layernorm or starcoder2 or neox or olmo2 or granite)"
elif [ "${1:-full}" = models47 ]; then
  step 200 compile_breaks env PYTHONUNBUFFERED=1 python3 tools/compile_breaks.py softmax rmsnorm rotary gated_mlp
  step 100 gpu_tests_gated_mlp python3 -m pytest -m gpu tests/test_gpu.py -q -p no:cacheprovider -rs -k "triton and gated_mlp"
  step 260 gpt_oss_layer_seed1 env PYTHONUNBUFFERED=1 python3 -m thunder_aot bench "$GPT_OSS_LAYER" --shapes "$GPT_OSS_SHAPES" \
      --backends triton,nvfuser --sizes 128 --seed 1 --rounds 3 --min-run-time 0.05 --skip thunder.jit,thunderfx \
      --out "$W/gpt_oss_layer_seed1"
elif [ "${1:-full}" = models49 ]; then
  step 120 gpu_tests_split_fill python3 -m pytest -m gpu tests/test_gpu.py -q -p no:cacheprovider -rs --tb=long \
      -k "views_on_the_gpu and (latent_norm or keys_fill)"
  step 400 gpu_tests_families python3 -m pytest -m gpu tests/test_gpu_models.py -q -p no:cacheprovider -rs --tb=long \
      -k "triton and (gemma3 or phi_decoder or stablelm or qwen3_moe_decoder or deepseek)"
elif [ "${1:-full}" = models50 ]; then
  step 300 overhead_triton python3 tools/overhead.py --backends triton --rounds 15 --min-run-time 0.05 \
      --only "guard only" --out "$W/overhead_triton.md"
  step 150 overhead_nvfuser python3 tools/overhead.py --backends nvfuser --rounds 5 --min-run-time 0.05 \
      --out "$W/overhead_nvfuser.md"
  step 200 gpu_tests python3 -m pytest -m gpu tests/test_gpu.py -q -p no:cacheprovider -rs -k "triton or unaligned or adversarial or threads"
  step 200 gpu_tests_falcon python3 -m pytest -m gpu tests/test_gpu_models.py -q -p no:cacheprovider -rs --tb=long \
      -k "triton and falcon"
elif [ "${1:-full}" = models51 ]; then
  step 200 gpu_tests python3 -m pytest -m gpu tests/test_gpu.py -q -p no:cacheprovider -rs -k "triton or unaligned or adversarial or threads"
  for b in nvfuser triton; do  # at once, each in its own process
    ( timeout 200 python3 tools/seed_verify.py --device cuda --backends $b --sets sound \
        --modules sequence_statistics,modulated_layer_norm --out "$W/seeds_$b.md" > "$W/seeds_$b.log" 2>&1
      echo "rc=$?" >> "$W/seeds_$b.log" ) &
  done
  wait
  tail -n 4 "$W"/seeds_*.log
  pack
  step 120 gpu_graphs_generate python3 -m pytest -m gpu tests/test_gpu_graphs.py -q -p no:cacheprovider -rs -k generate
elif [ "${1:-full}" = models48 ]; then
  step 160 overhead_triton python3 tools/overhead.py --backends triton --rounds 15 --min-run-time 0.05 \
      --only "guard only,generated forward()" --out "$W/overhead_triton.md"
  step 120 rmsnorm "${BENCH[@]}" thunder_aot.examples.gpt_oss:rmsnorm --shapes "1x[1..65536]x2880:bf16" --sizes 1,2048,65536 \
      --skip thunder.jit,thunderfx --out "$W/rmsnorm"
  step 200 gpu_tests python3 -m pytest -m gpu tests/test_gpu.py -q -p no:cacheprovider -rs -k "triton or unaligned or adversarial or threads"
elif [ "${1:-full}" = models43 ]; then
  expert_routing_test
elif [ "${1:-full}" = models41 ]; then
  gpt_oss_layer_bench 330 gpt_oss_layer 1,16,128,1024
elif [ "${1:-full}" = models37 ]; then
  SOFTMAX_SIZES="1024 1500 2000 2001 2048" width_class_checks
elif [ "${1:-full}" = models36 ]; then
  for s in 1024 1500 2048; do
    step 100 "rows_softmax_$s" python3 tools/rows_device_time.py thunder_aot.examples.blocks:scaled_masked_softmax \
        "1x8x[S=1..2048]x[S]:bf16, 1x1x[S]x[S]:fp32" "$s" --variants --out "$W/rows_softmax_$s.md"
  done
  step 100 rows_layer_norm python3 tools/rows_device_time.py thunder_aot.examples.blocks:layer_norm \
      "[s0=1..16384]x1024:bf16" 16384 --variants --out "$W/rows_layer_norm.md"
  step 100 rows_rmsnorm python3 tools/rows_device_time.py thunder_aot.examples.gpt_oss:rmsnorm \
      "1x[s0=1..16384]x2880:bf16" 16384 --variants --out "$W/rows_rmsnorm.md"
  step 100 rows_gelu_gate python3 tools/rows_device_time.py thunder_aot.examples.blocks:gelu_gate \
      "[s0=1..16384]x2048:bf16" 16384 --variants --out "$W/rows_gelu_gate.md"
  step 100 rows_gated_mlp python3 tools/rows_device_time.py thunder_aot.examples.blocks:gated_mlp \
      "[s0=1..16384]x256:fp32" 16384 --variants --out "$W/rows_gated_mlp.md"
  step 100 rows_residual_rmsnorm python3 tools/rows_device_time.py thunder_aot.examples.blocks:residual_rmsnorm \
      "1x[S=1..16384]x2880:bf16, 1x[S]x2880:bf16" 16384 --variants --out "$W/rows_residual_rmsnorm.md"
elif [ "${1:-full}" = final ]; then
  step 150 gpu_tests python3 -m pytest -m gpu tests/test_gpu.py tests/test_gpu_models.py -q -p no:cacheprovider -rs -k "triton or unaligned or adversarial or threads or second_gpu"
  step 70 overhead_triton python3 tools/overhead.py --backends triton --rounds 3 --out "$W/overhead_triton.md"
  step 100 rmsnorm "${BENCH[@]}" thunder_aot.examples.gpt_oss:rmsnorm --shapes "1x[1..65536]x2880:bf16" --sizes 1,128,2048,65536 --out "$W/rmsnorm"
  step 60 softmax "${BENCH[@]}" thunder_aot.examples.blocks:scaled_masked_softmax --shapes "1x8x[S=1..512]x[S]:bf16, 1x1x[S]x[S]:fp32" --sizes 1,512 --out "$W/softmax"
elif [ "${1:-full}" = sound ]; then
  for b in nvfuser triton; do
    for s in generated hf sound; do
      ( timeout 520 python3 tools/seed_verify.py --device cuda --backends $b --sets $s --out "$W/seeds_${b}_${s}.md" \
          > "$W/seeds_${b}_${s}.log" 2>&1; echo "rc=$?" >> "$W/seeds_${b}_${s}.log" ) &
    done
  done
  wait
  tail -n 3 "$W"/seeds_*.log
  pack
elif [ "${1:-full}" = sound-modules ]; then  # sound-modules BACKEND SET NAME... : one process per module
  b=$2; s=$3; shift 3
  for m in "$@"; do
    ( timeout 500 python3 tools/seed_verify.py --device cuda --backends $b --sets $s --modules $m --out "$W/seeds_${b}_${s}_$m.md" \
        > "$W/seeds_${b}_${s}_$m.log" 2>&1; echo "rc=$?" >> "$W/seeds_${b}_${s}_$m.log" ) &
  done
  wait
  tail -n 3 "$W"/seeds_*.log
  pack
else
  step 160 gpu_tests python3 -m pytest -m gpu tests/test_gpu.py tests/test_gpu_models.py -q -p no:cacheprovider -rs
  step 70 triton_schedule python3 tools/triton_schedule.py --out "$W/triton_schedule.md"
  step 45 overhead python3 tools/overhead.py --backends triton --rounds 3 --out "$W/overhead_triton.md"
  step 300 modules bash tools/modules.sh "$W/modules" 2
fi
