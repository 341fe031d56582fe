#!/usr/bin/env bash
# Short GPU session after a Triton schedule change: Triton GPU tests, then the seed RMSNorm and the
# wide-row modules benchmarked. Usage: . .gpu/env.sh && bash bench/final_check.sh
set -u
W=$(mktemp -d)
pack() { tar czf "$OUT/results.tgz" -C "$W" . ; }
step() { local limit=$1 name=$2; shift 2; echo "=== $name"; timeout "$limit" "$@" > "$W/$name.log" 2>&1; echo "rc=$?" >> "$W/$name.log"; tail -3 "$W/$name.log"; pack; }
step 70 gpu_tests python3 -m pytest -m gpu tests/test_gpu.py -q -p no:cacheprovider -rs -k "triton or unaligned or adversarial or threads"
step 80 rmsnorm python3 -m thunder_aot bench thunder_aot.examples.gpt_oss:rmsnorm --shapes "1x[1..65536]x2880:bf16" --backends nvfuser,triton --sizes 1,2048,65536 --rounds 2 --out "$W/rmsnorm"
step 45 vocab_softmax python3 -m thunder_aot bench thunder_aot.examples.blocks:vocab_softmax --shapes "[1..4096]x32000:bf16" --backends nvfuser,triton --sizes 1,4096 --rounds 2 --out "$W/vocab_softmax"
step 45 layer_norm python3 -m thunder_aot bench thunder_aot.examples.blocks:layer_norm --shapes "[1..2048]x1024:bf16" --backends nvfuser,triton --sizes 1,2048 --rounds 2 --out "$W/layer_norm"
