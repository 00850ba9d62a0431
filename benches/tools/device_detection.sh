#!/bin/bash
# On the GPU machine: torchvision's detectors fed by trdata vs DataLoader vs synthetic (benches/gpu/detection_feed.py;
# extra arguments go to it, e.g. --models retinanet --recipes hflip), after checks (CHECKS=0 skips them): a CUDA
# loader's ssd-recipe pixels and targets equal the CPU loader's, the GPU decode tests on pad_to slots, and the CUDA
# batch-op tests (DetectionMixUp after a Mosaic among them). $CARRY (default devcarry) holds dist/ (the abi3 wheel),
# wheels/ (pycocotools for cp312) and data/imagenet/ (an ImageFolder sample). FEED_TIMEOUT (default 440) bounds the
# bench; its JSON is written after each (model, recipe), so a cut-short run keeps what it measured.
cd "$(dirname "$0")/../.."
python3 -m pip install -q --no-deps --target /tmp/td "${CARRY:-devcarry}"/dist/*.whl "${CARRY:-devcarry}"/wheels/pycocotools*.whl 2>&1 | tail -2
export PYTHONPATH=/tmp/td PYTHONUNBUFFERED=1
python3 -c "import trdata, torch, torchvision; print(trdata.__file__, torch.__version__, torchvision.__version__, torch.cuda.get_device_name())"
if [ "${CHECKS:-1}" = 1 ]; then
timeout 120 python3 benches/tools/cuda_cpu_targets.py --data "${CARRY:-devcarry}"/data/imagenet
# the GPU decode path on pad_to slots (the hflip row decodes there) against the CPU path; batch ops on CUDA
timeout 150 python3 -m pytest -q -p no:cacheprovider tests/cuda/test_gpu_decode.py -k "pad_to or agree_with_cpu_rows or cuda_batch or detection_mixup" \
  tests/cuda/test_batch_ops_cuda.py 2>&1 | tail -4
fi
timeout "${FEED_TIMEOUT:-440}" python3 benches/gpu/detection_feed.py --data "${CARRY:-devcarry}"/data/imagenet --limit 0 \
  --steps 40 --warmup 5 --workers 15 --out $OUT/detection_feed.json "$@"
