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
python3 - <<'PY'
import os, sys, tempfile, numpy as np, torch, trdata
sys.path.insert(0, "benches")
from common import folder_files
from common.coco import write_coco
paths, _ = folder_files(os.environ.get("CARRY", "devcarry") + "/data/imagenet")
tmp = tempfile.mkdtemp(); images, ann = write_coco(paths[:48], tmp)
src = trdata.CocoDetection(images, ann, masks=True)
tf = [trdata.RandomPhotometricDistort(), trdata.RandomZoomOut(fill=(123, 117, 104)), trdata.RandomIoUCrop(),
      trdata.RandomHorizontalFlip(), trdata.SanitizeBoundingBoxes(), trdata.Resize((300, 300))]
def run(device):
    with trdata.Loader(src, batch_size=16, transforms=tf, device=device, seed=3, reproducible=True, dtype="uint8") as ld:
        return [(b.images.cpu().numpy() if hasattr(b.images, "cpu") else np.asarray(b.images), b.targets) for b in ld]
g, c = run("cuda"), run("cpu")
assert g[0][1][0]["boxes"].device.type == "cuda" and g[0][1][0]["masks"].device.type == "cuda"
for (gi, gt), (ci, ct) in zip(g, c):
    assert np.array_equal(gi, ci)
    for a, b in zip(gt, ct):
        assert all(torch.equal(a[k].cpu(), b[k]) for k in ("boxes", "labels", "masks"))
print("CUDA loader: ssd recipe pixels and targets equal the CPU loader's; targets on cuda: OK")
PY
# the GPU decode path on pad_to slots (the hflip row decodes there) against the CPU path; batch ops on CUDA
timeout 150 python3 -m pytest -q -p no:cacheprovider tests/cuda/test_gpu_decode.py -k "pad_to or agree_with_cpu_rows or cuda_batch or detection_mixup" \
  tests/cuda/test_batch_ops_cuda.py 2>&1 | tail -4
fi
timeout "${FEED_TIMEOUT:-440}" python3 benches/gpu/detection_feed.py --data "${CARRY:-devcarry}"/data/imagenet --limit 0 \
  --steps 40 --warmup 5 --workers 15 --out $OUT/detection_feed.json "$@"
