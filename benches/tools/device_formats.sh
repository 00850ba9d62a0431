#!/bin/bash
# On the GPU machine, in one call (the record sources' GPU row, 540 s at most): ResNet-18 fed from a Parquet file
# (trdata.Parquet: row groups read whole through the partial cache, shuffled in windows) against its synthetic
# rate, beside the same images as JPEG files, then the loader alone from the Parquet file.
#   1. check: a Parquet loader's first batch on cuda:0 equals a CPU loader's (benches/tools/parquet_check.py);
#   2. benches/gpu/gpu_feed.py --only rn18/{synthetic,trdata-auto,parquet-auto,parquet-cpu},load/parquet-auto
#      (long windows late in a virtual epoch of ≥ 1,000 batches: the bench's defaults).
# $CARRY (default devcarry) holds dist/ (the abi3 wheel), data/imagenet150/ (an ImageFolder sample) and
# data/imagenet150.parquet (the same images in Hugging Face's layout, made by benches/tools/make_parquet.py).
# Output under $OUT: parts.jsonl (name, rc, seconds), gpu_feed.json, summary.txt.
cd "$(dirname "$0")/../.."
CARRY=${CARRY:-devcarry}
OUT=${OUT:-bench-results}
DATA="$CARRY/data/imagenet150"
PARQUET="$CARRY/data/imagenet150.parquet"
mkdir -p "$OUT"
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)"  # the Parquet feeders open the file once per repeat
: >"$OUT/parts.jsonl"
SITE=$(mktemp -d)
python3 -m pip install -q --no-deps --target "$SITE" "$CARRY"/dist/*.whl 2>&1 | tail -2
export PYTHONPATH="$SITE" PYTHONUNBUFFERED=1
python3 -c "import trdata, torch; print(trdata.__file__, torch.__version__, torch.cuda.get_device_name(), flush=True)"
nproc

part() {
  local name=$1 limit=$2 start=$SECONDS rc
  shift 2
  echo "=== $name (at most ${limit}s; $((SECONDS))s so far)"
  timeout "$limit" "$@" 2>&1 | tee "$OUT/$name.txt"
  rc=${PIPESTATUS[0]}
  echo "{\"part\": \"$name\", \"rc\": $rc, \"timed_out\": $([ "$rc" = 124 ] && echo true || echo false), \"seconds\": $((SECONDS - start))}" >>"$OUT/parts.jsonl"
}

part parquet_check 60 python3 benches/tools/parquet_check.py "$PARQUET"
part gpu_feed "${FEED_TIMEOUT:-420}" python3 benches/gpu/gpu_feed.py --data "$DATA" --parquet "$PARQUET" \
  --only 'rn18/synthetic,rn18/trdata-auto,rn18/parquet-auto,rn18/parquet-cpu,load/parquet-auto' \
  --deadline 380 --json "$OUT/gpu_feed.json" $FEED_ARGS
echo "=== summary (${SECONDS}s)"
cat "$OUT/parts.jsonl" | tee "$OUT/summary.txt"
