#!/usr/bin/env bash
# Same-machine A/B of two builds of trdata on the CPU bench: interleaved rounds of benches/peers/throughput.py (trdata,
# torch DataLoader + v2, DALI CPU, the 2-thread libjpeg-turbo ceiling), each tree with its own extension and
# script, so the peer ratios of both builds come from the same minutes on the same cores.
#
# Usage: benches/tools/ab_builds.sh BEFORE_TREE AFTER_TREE [ROUNDS] [PYTHON]
#   e.g. benches/tools/ab_builds.sh /work/before /work/main 3 /work/benchvenv/bin/python   (a python with torch/DALI)
# Writes bench-results/ab_<label>_<round>.json and prints one line per run: img/s and the ratios.
set -euo pipefail
before=$1 after=$2 rounds=${3:-3} py=${4:-python3}
out="$(cd "$(dirname "$0")/.." && pwd)/bench-results"
mkdir -p "$out"
for r in $(seq 1 "$rounds"); do
  order=("$before" "$after"); ((r % 2 == 0)) && order=("$after" "$before")  # alternate who goes first
  for tree in "${order[@]}"; do
    label=$([[ $tree == "$before" ]] && echo before || echo after)
    (cd "$tree" && PYTHONPATH="$tree/python" "$py" benches/peers/throughput.py --only trdata,torch-v2,dali,decode-2 -q \
      --out "$out/ab_${label}_$r.json" > /dev/null)
    "$py" - "$out/ab_${label}_$r.json" "$label" "$r" <<'PY'
import json, sys
rows = {m["key"]: m["img_per_s"] for m in json.load(open(sys.argv[1]))["results"]}
t = rows["trdata"]
print(f"{sys.argv[2]:6} round {sys.argv[3]}: trdata {t:,.0f} img/s  ÷torch-v2 {t / rows['torch-v2']:.2f}"
      f"  ÷dali {t / rows['dali']:.2f}  ÷decode-2 {t / rows['decode-2']:.3f}")
PY
  done
done
