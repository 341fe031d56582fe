#!/usr/bin/env bash
# thunder-aot bench for the bundled modules with Triton kernels, nvFuser and Triton side by side
# (issue 4's per-module tables). Usage, on the GPU machine after `. .gpu/env.sh`:
#     bash tools/modules.sh OUTDIR [ROUNDS] [STEM,STEM,...] [BENCH OPTION...]
# writes OUTDIR/<module>/bench.{md,json,png}; the third argument picks modules (default, or "": all);
# options after it go to `thunder-aot bench` after the table's own (the last --sizes wins). Exits 1 if
# any module's bench failed. The table below is the one list of these modules: the `modules` suite of
# tools/gpu_suites.py reads its stems and runs this script one module per step.
set -u
out=${1:?output folder}
rounds=${2:-3}
only=${3:-}
shift $(($# < 3 ? $# : 3))
failed=0
while IFS='|' read -r stem source shapes sizes; do
  [ -z "$stem" ] && continue
  if [ -n "$only" ] && [[ ",$only," != *",$stem,"* ]]; then continue; fi
  echo "== $stem"
  python3 -m thunder_aot bench "$source" --shapes "$shapes" --backends nvfuser,triton --sizes "$sizes" \
    --rounds "$rounds" --out "$out/$stem" "$@" < /dev/null 2>&1 | grep -v "compiling and checking"
  rc=${PIPESTATUS[0]}
  if [ "$rc" -ne 0 ]; then echo "== $stem: thunder-aot bench exited with $rc"; failed=1; fi
done <<'LIST'
rmsnorm|thunder_aot.examples.gpt_oss:rmsnorm|1x[1..65536]x2880:bf16|1,2048,65536
layer_norm|thunder_aot.examples.blocks:layer_norm|[1..2048]x1024:bf16|1,128,2048
softmax|thunder_aot.examples.blocks:scaled_masked_softmax|1x8x[S=1..512]x[S]:bf16, 1x1x[S]x[S]:fp32|1,128,512
vocab_softmax|thunder_aot.examples.blocks:vocab_softmax|[1..4096]x32000:bf16|1,64,4096
wide_rmsnorm|thunder_aot.examples.blocks:wide_rmsnorm|1x[1..4096]x16384:bf16|1,128,4096
residual_rmsnorm|thunder_aot.examples.blocks:residual_rmsnorm|1x[S=1..2048]x2880:bf16, 1x[S]x2880:bf16|1,128,2048
gated_mlp|thunder_aot.examples.blocks:gated_mlp|[1..512]x256:fp32|1,128,512
gelu_gate|thunder_aot.examples.blocks:gelu_gate|[1..2048]x2048:bf16|1,128,2048
rotary|thunder_aot.examples.blocks:rotary_embedding|1x8x[S=1..2048]x64:bf16, 1x1x[S]x64:bf16, 1x1x[S]x64:bf16|1,128,2048
LIST
exit $failed
