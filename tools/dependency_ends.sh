#!/usr/bin/env bash
# Prove one end of pyproject.toml's torch range: a fresh venv, `pip install ".[export,test]"` with
# torch pinned to VERSION (everything else resolved from the ranges), then the README's quick start
# from a scratch directory (export the seed's RMSNorm with the torch backend, import and run it)
# and the fast test tier. The log goes to bench/results/deps/torch-VERSION.log.
#
#     bash tools/dependency_ends.sh 2.7.1
set -uo pipefail
version=$1
root=$(cd "$(dirname "$0")/.." && pwd)
work=${TMPDIR:-/tmp}/thunder-aot-ends/torch-$version
log=$root/bench/results/deps/torch-$version.log
mkdir -p "$(dirname "$log")"
rm -rf "$work" && mkdir -p "$work/scratch"
python3 -m venv "$work/venv"
py=$work/venv/bin/python
{
    echo "# tools/dependency_ends.sh $version -- $(date -u +%FT%TZ), commit $(git -C "$root" rev-parse --short HEAD), $(python3 --version)"
    echo "## pip install torch==$version $root[export,test]"
    "$py" -m pip install -q --upgrade pip
    "$py" -m pip install -q "torch==$version" "$root[export,test]" || { echo "INSTALL FAILED"; exit 1; }
    "$py" -m pip list 2>/dev/null | grep -iE '^(torch|lightning-thunder|black|jinja2|triton|transformers|thunder-aot) '
    echo "## quick start (from $work/scratch: the installed package, not the checkout)"
    cd "$work/scratch"
    "$work/venv/bin/thunder-aot" --version
    "$work/venv/bin/thunder-aot" export thunder_aot.examples.gpt_oss:rmsnorm \
        --shapes "1x15x2880:bf16; 1x568x2880:bf16; 1x1369x2880:bf16; 1x[1..2048]x2880:bf16" \
        --backend torch --out rmsnorm_torch.py || { echo "EXPORT FAILED"; exit 1; }
    head -8 rmsnorm_torch.py
    "$py" "$root/examples/run_generated.py" rmsnorm_torch.py || { echo "RUN FAILED"; exit 1; }
    echo "## fast test tier (pytest -m 'not traces and not gpu and not slow')"
    cd "$root"
    "$py" -m pytest -q -p no:cacheprovider -m "not traces and not gpu and not slow" 2>&1 | tail -25
    echo "## exit ${PIPESTATUS[0]}"
} 2>&1 | grep -v "^WARNING: Location 'file:///opt" | tee "$log"
