"""Detection training fed by trdata: torchvision's Faster R-CNN (MobileNetV3-Large FPN, from scratch) on a COCO
layout — an image folder and an ``instances_*.json`` file.

    python examples/train_detection.py [--root DIR --ann FILE] [--steps 10] [--batch 4] [--size 160] [--masks]

Without ``--root``/``--ann`` it first writes a small synthetic COCO set (``--make N`` images of coloured
rectangles on noise, one box and polygon per rectangle, category = colour) in a temporary folder. trdata decodes
and augments the images with torchvision's ``hflip`` detection recipe (a horizontal flip; float32 in [0, 1] as
torchvision's detectors take them), each image at its own size in a padded slot (``Loader(pad_to=...)``, sized
from the annotation file's largest image), and moves each image's boxes (and masks with ``--masks``) with it.
``batch.image_list()`` gives the images at their own sizes and ``batch.targets`` the per-image dicts, the two lists
torchvision's detection models take (the model resizes each image to ``--size`` itself). Prints ``step, loss``
per step and, at the end, the first loss and the last.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile

import numpy as np
import torch
import torchvision
import trdata
from PIL import Image

COLORS = {1: (220, 40, 40), 2: (40, 200, 70), 3: (50, 70, 220)}


def make_coco(root: str, n: int, seed: int = 0) -> tuple[str, str]:
    """``n`` JPEGs of 1-3 coloured rectangles on noise and their COCO instances file (boxes XYWH, polygons)."""
    rng = np.random.default_rng(seed)
    images_dir = os.path.join(root, "images")
    os.makedirs(images_dir, exist_ok=True)
    images, annotations = [], []
    for i in range(n):
        w, h = int(rng.integers(160, 240)), int(rng.integers(140, 200))
        a = rng.integers(0, 60, (h, w, 3)).astype(np.uint8)
        for _ in range(int(rng.integers(1, 4))):
            cat = int(rng.integers(1, 4))
            bw, bh = int(rng.integers(24, w // 2)), int(rng.integers(24, h // 2))
            x, y = int(rng.integers(0, w - bw)), int(rng.integers(0, h - bh))
            a[y : y + bh, x : x + bw] = COLORS[cat]
            annotations.append({
                "id": len(annotations) + 1, "image_id": i + 1, "category_id": cat, "iscrowd": 0,
                "bbox": [x, y, bw, bh], "area": bw * bh,
                "segmentation": [[x, y, x + bw, y, x + bw, y + bh, x, y + bh]],
            })  # fmt: skip
        name = f"{i + 1:012d}.jpg"
        Image.fromarray(a).save(os.path.join(images_dir, name), quality=90)
        images.append({"id": i + 1, "file_name": name, "width": w, "height": h})
    categories = [
        {"id": c, "name": n, "supercategory": "shape"} for c, n in [(1, "red"), (2, "green"), (3, "blue")]
    ]
    ann_file = os.path.join(root, "instances_train.json")
    with open(ann_file, "w") as f:
        json.dump({"images": images, "annotations": annotations, "categories": categories}, f)
    return images_dir, ann_file


def stride_multiple(v: int, stride: int = 32) -> int:
    """``v`` rounded up to a multiple of ``stride``."""
    return -(-v // stride) * stride


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--root")
    p.add_argument("--ann")
    p.add_argument("--make", type=int, default=64)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--size", type=int, default=160)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--masks", action="store_true")
    args = p.parse_args()
    torch.manual_seed(0)
    tmp = None
    if args.root is None:
        tmp = tempfile.TemporaryDirectory()
        args.root, args.ann = make_coco(tmp.name, args.make)
    source = trdata.CocoDetection(args.root, args.ann, masks=args.masks)
    model = torchvision.models.detection.fasterrcnn_mobilenet_v3_large_fpn(
        weights=None, weights_backbone=None, num_classes=max(source.class_to_idx.values()) + 1,
        min_size=args.size, max_size=args.size,
    )  # fmt: skip
    model.train()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=1e-4)
    losses: list[float] = []
    # The hflip recipe keeps each image's size: the slots must hold the largest image (a multiple of 32 here, as
    # FPN backbones like). A recipe that enlarges images needs more: see the guide's table of recipes.
    with open(args.ann) as f:
        stored = json.load(f)["images"]
    pad_to = (
        stride_multiple(max(im["height"] for im in stored)),
        stride_multiple(max(im["width"] for im in stored)),
    )
    loader = trdata.Loader(
        source,
        batch_size=args.batch,
        workers=args.workers,
        shuffle=True,
        transforms=[trdata.RandomHorizontalFlip()],
        pad_to=pad_to,
        normalize=None,  # float32 in [0, 1]: the model normalizes
        dtype="float32",
        last_batch="drop",
    )
    with loader:
        step = 0
        while step < args.steps:
            for batch in loader:
                images = batch.image_list()  # each image at its own size (views of the batch's buffer)
                # torchvision's detectors take empty targets, should an image have no boxes
                targets = [{"boxes": t["boxes"], "labels": t["labels"]} for t in batch.targets]
                loss = sum(model(images, targets).values())
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                step += 1
                losses.append(float(loss.detach()))
                print(f"step {step}, loss {losses[-1]:.4f}", flush=True)
                if step == args.steps:
                    break
    print(f"first loss {losses[0]:.4f}, last loss {losses[-1]:.4f}")
    if tmp is not None:
        tmp.cleanup()


if __name__ == "__main__":
    main()
