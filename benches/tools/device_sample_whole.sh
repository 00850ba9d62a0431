#!/bin/bash
# On the GPU machine, in one call (issue 36's GPU rows, 540 s at most): quick CUDA checks, then
# benches/gpu/detection_feed.py's rows:
#   1. checks (CHECKS=0 skips): tests/cuda/test_targets_cuda.py, and a CUDA loader's ssd-recipe pixels and targets
#      (boxes, labels, masks) equal the CPU loader's (benches/tools/cuda_cpu_targets.py);
#   2. ssdlite (SSDLITE=0 skips): ssdlite320_mobilenet_v3_large, the ssdlite recipe, batch 64, rows synthetic, trdata,
#      dataloader (15 workers), each image 20 times an epoch, SSDLITE_STEPS (default 150) timed steps a row;
#   3. hflip (HFLIP=0 skips): retinanet and fasterrcnn_mobilenet, hflip, batch 16, rows synthetic,
#      synthetic_first_sight, trdata, trdata_again, dataloader, 40 steps (the bench's definitions).
# Each part has its own time limit (CHECK_TIMEOUT 60 + 40, SSDLITE_TIMEOUT 120, HFLIP_TIMEOUT 300) and writes its JSON
# under $OUT as it goes (the bench after each row); $OUT/parts.jsonl gets one line per part (name, rc, seconds); a
# summary table ends the output ($OUT/summary.txt). FEED_ARGS: more arguments for both bench parts (a later one
# wins, e.g. FEED_ARGS="--device cpu --decode cpu --batch 2 --steps 2 --limit 8" for a dry run without a GPU).
# $CARRY (default devcarry) holds dist/ (the abi3 wheel), wheels/ (pycocotools for cp312: torchvision's
# CocoDetection needs it; the machine has none) and data/imagenet/ (an ImageFolder sample).
cd "$(dirname "$0")/../.."
CARRY=${CARRY:-devcarry}
OUT=${OUT:-bench-results}
DATA="$CARRY/data/imagenet"
mkdir -p "$OUT"
: >"$OUT/parts.jsonl"
SITE=$(mktemp -d)
# shellcheck disable=SC2046  # the wheels' paths (none where the machine has pycocotools already)
python3 -m pip install -q --no-deps --target "$SITE" "$CARRY"/dist/*.whl $(ls "$CARRY"/wheels/pycocotools*.whl 2>/dev/null) 2>&1 | tail -2
export PYTHONPATH="$SITE" PYTHONUNBUFFERED=1
python3 -c "import trdata, torch, torchvision; print(trdata.__file__, torch.__version__, torchvision.__version__, torch.cuda.get_device_name(), flush=True)"
nproc

# part NAME LIMIT CMD...: CMD under `timeout LIMIT`, its output to the console and $OUT/NAME.txt, a line in parts.jsonl
part() {
  local name=$1 limit=$2 start=$SECONDS rc
  shift 2
  echo "=== $name (at most ${limit}s; $((SECONDS))s so far)"
  timeout "$limit" "$@" 2>&1 | tee "$OUT/$name.txt"
  rc=${PIPESTATUS[0]}
  echo "{\"part\": \"$name\", \"rc\": $rc, \"timed_out\": $([ "$rc" = 124 ] && echo true || echo false), \"seconds\": $((SECONDS - start))}" >>"$OUT/parts.jsonl"
}

if [ "${CHECKS:-1}" = 1 ]; then
  part targets_cuda "${CHECK_TIMEOUT:-60}" python3 -m pytest -q -p no:cacheprovider -rs tests/cuda/test_targets_cuda.py
  part cuda_cpu_targets 40 python3 benches/tools/cuda_cpu_targets.py --data "$DATA"
fi
if [ "${SSDLITE:-1}" = 1 ]; then
  part ssdlite "${SSDLITE_TIMEOUT:-120}" python3 benches/gpu/detection_feed.py --data "$DATA" --limit 0 \
    --models ssdlite --recipes ssdlite --batch 64 --repeat 20 --rows synthetic,trdata,dataloader \
    --steps "${SSDLITE_STEPS:-150}" --warmup 10 --model-warmup 100 --workers 15 --out "$OUT/ssdlite.json" $FEED_ARGS
fi
if [ "${HFLIP:-1}" = 1 ]; then
  part hflip "${HFLIP_TIMEOUT:-300}" python3 benches/gpu/detection_feed.py --data "$DATA" --limit 0 \
    --models retinanet,fasterrcnn --recipes hflip --rows synthetic,synthetic_first_sight,trdata,trdata_again,dataloader \
    --steps 40 --warmup 5 --workers 15 --out "$OUT/hflip.json" $FEED_ARGS
fi

echo "=== summary (${SECONDS}s)"
{
  cat "$OUT/parts.jsonl"
  python3 benches/tools/detection_summary.py "$OUT/ssdlite.json" "$OUT/hflip.json"
} | tee "$OUT/summary.txt"
