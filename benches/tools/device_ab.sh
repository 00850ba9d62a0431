#!/usr/bin/env bash
# On the GPU machine (device tool): install a NEW and an OLD trdata wheel side by side, run the whole test suite
# against NEW (installed, CUDA), then the loader-only GPU bench (benches/gpu/gpu_loader.py) alternating OLD/NEW on the
# built-in synthetic dataset. JSON lines land in $OUT/gpu_loader_{old,new}.jsonl.
#
# Usage (from the repo root, wheels in a carried, git-ignored folder):
#   benches/tools/device_ab.sh devcarry/new/trdata-….whl devcarry/old/trdata-….whl [ROUNDS]
#   (each wheel keeps its real file name, so the two live in separate folders)
set -u
new=$1 old=$2 rounds=${3:-5} py=python3
$py -m pip install -q --no-deps --target /tmp/new "$new"
$py -m pip install -q --no-deps --target /tmp/old "$old"
echo "== pytest against the installed NEW wheel"
PYTHONPATH=/tmp/new timeout 300 $py -m pytest -q -p no:cacheprovider -o timeout=0 tests 2>&1 | tail -8
data=$(PYTHONPATH=/tmp/new $py -c 'from trdata.sources.synthetic import default_dataset; print(default_dataset(progress=False))')
mkdir -p "${OUT:-bench-results}"
for round in $(seq 1 "$rounds"); do
  for which in old new; do
    echo "== gpu_loader $which round $round"
    PYTHONPATH=/tmp/$which timeout 120 $py benches/gpu/gpu_loader.py "$data" --steps 100 --dtype bfloat16 2>&1 \
      | tee -a "${OUT:-bench-results}/gpu_loader_$which.jsonl" | tail -2
  done
done
