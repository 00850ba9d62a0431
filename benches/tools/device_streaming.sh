#!/bin/bash
# On the GPU machine: ResNet-18 fed from a packed file read locally (partial) and streamed over s3://
# from an S3 read server on loopback (benches/gpu/rn50_train.py `packed-s3`), against synthetic data, in one run.
# $CARRY (default devcarry) holds dist/ (the abi3 wheel) and data/imagenet/ (an ImageFolder sample).
cd "$(dirname "$0")/../.."
python3 -m pip install -q --no-deps --target /tmp/td "${CARRY:-devcarry}"/dist/*.whl 2>&1 | tail -2
export PYTHONPATH=/tmp/td PYTHONUNBUFFERED=1
timeout 540 python3 benches/gpu/rn50_train.py --data "${CARRY:-devcarry}"/data --model resnet18 \
  --configs synthetic,packed-partial,packed-s3,synthetic --pack-short-side 320 --steps 200 --warmup 20 \
  --json $OUT/rn18_streaming.json
# and a rerun of the detection row whose synthetic row started cold (fasterrcnn hflip), with the longer warm-up
timeout 200 python3 benches/gpu/detection_feed.py --data "${CARRY:-devcarry}"/data/imagenet --limit 0 --steps 30 --warmup 5 \
  --workers 15 --models fasterrcnn --recipes hflip --out $OUT/detection_feed_fasterrcnn_hflip.json
