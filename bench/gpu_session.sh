#!/usr/bin/env bash
# One batched GPU session (tests, Triton schedule sweep, hot-path overhead, per-module benches);
# each step has its own time limit and everything lands in $OUT/results.tgz after every step.
# Usage on the GPU machine: . .gpu/env.sh && bash bench/gpu_session.sh
set -u
W=$(mktemp -d)
pack() { tar czf "$OUT/results.tgz" -C "$W" . ; }
step() { local limit=$1 name=$2; shift 2; echo "=== $name"; timeout "$limit" "$@" > "$W/$name.log" 2>&1; echo "rc=$?" >> "$W/$name.log"; tail -4 "$W/$name.log"; pack; }
step 160 gpu_tests python3 -m pytest -m gpu tests/test_gpu.py tests/test_gpu_models.py -q -p no:cacheprovider -rs
step 70 triton_schedule python3 bench/triton_schedule.py --out "$W/triton_schedule.md"
step 45 overhead python3 bench/overhead.py --backends triton --rounds 3 --out "$W/overhead_triton.md"
step 300 modules bash bench/modules.sh "$W/modules" 2
