#!/usr/bin/env bash
# bench/results/torch-cpu.md: the torch backend's modules against eager on this machine's CPU, per
# call (issue 44: a torch module runs the source's own calls, so it is never slower than eager).
# Usage, from the project root with the project installed (make setup):
#   [ROUNDS=9] bash tools/torch_cpu.sh [OUT.md]    (default bench/results/torch-cpu.md)
set -euo pipefail
out=${1:-bench/results/torch-cpu.md}
python=${PYTHON:-.venv/bin/python}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cases=(
  "layer_norm|thunder_aot.examples.blocks:layer_norm|[1..2048]x1024:bf16|1,16,128,2048"
  "gated_mlp|thunder_aot.examples.blocks:gated_mlp|[1..512]x256|1,16,128,512"
  "rmsnorm|thunder_aot.examples.gpt_oss:rmsnorm|1x[1..2048]x2880:bf16|1,16,128,2048"
)
commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
{
  echo "# The torch backend on CPU: per call against eager"
  echo
  echo "What it measures: the bundled LayerNorm, MLP and RMSNorm exported with \`--backend torch\` (each"
  echo "region as the source's own torch calls) against the source module in eager, per call on one CPU"
  echo "thread (\`thunder-aot bench --device cpu\`: interleaved rounds, median; thunder.jit left out)."
  echo
  echo "Regenerate: \`bash tools/torch_cpu.sh\` on an idle machine. Measured at $commit on"
  echo "$(nproc --all) CPU cores ($(uname -m)), $(date -u +%Y-%m-%d), torch $($python -c 'import torch; print(torch.__version__)')."
  echo
} > "$tmp/page.md"
for case in "${cases[@]}"; do
  IFS='|' read -r name source shapes sizes <<< "$case"
  cmd=(thunder-aot bench "$source" --shapes "$shapes" --backends torch --device cpu --sizes "$sizes" --rounds "${ROUNDS:-9}" --skip thunder.jit)
  "$python" -m thunder_aot "${cmd[@]:1}" --out "$tmp/$name" > /dev/null
  { echo "## $name"; echo; echo "    $(printf '%q ' "${cmd[@]}")"; echo; sed -n '/^|/,$p' "$tmp/$name/bench.md"; echo; } >> "$tmp/page.md"
done
mv "$tmp/page.md" "$out"
echo "wrote $out"
