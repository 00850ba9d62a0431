#!/usr/bin/env python3
"""Detection samples on the CPU box: trdata's ``CocoDetection`` against torch DataLoader + torchvision's
``CocoDetection`` + ``wrap_dataset_for_transforms_v2`` + v2, on the same generated COCO-style set (the ImageNet
sample's images, 2-6 boxes with polygons per image, one crowd RLE in four images) and the same CPUs, float32 in
[0, 1], boxes (and, ``masks``, instance masks) moved with the image, batch 16. Recipes (``--recipes``):

- ``rrc``: RandomResizedCrop(size, scale=(0.3, 1)) + horizontal flip;
- ``ssd``: torchvision's references' ``ssd`` (RandomPhotometricDistort, RandomZoomOut(fill=mean),
  RandomIoUCrop, horizontal flip, SanitizeBoundingBoxes), then Resize((300, 300)) — SSD300's input, which its
  model would otherwise do — so that both sides batch one size;
- ``lsj``: the references' ``lsj`` with v2 ops: ScaleJitter((size, size)), RandomCrop(size, pad_if_needed=True)
  (the references' own FixedSizeCrop is not in torchvision), horizontal flip, SanitizeBoundingBoxes.
- ``mosaic`` (no masks: trdata's Mosaic merges boxes only): YOLO's Mosaic(size) onto a 2·size canvas, then
  RandomAffine(translate 0.1, scale 0.5–1.5), CenterCrop(size), horizontal flip; the peer composes the four images
  in Python over the wrapped ``CocoDetection`` (v2 resize to long side ``size``, boxes shifted, clipped and
  merged) and runs the same v2 ops on the canvas.

1 warm-up epoch, then the best of ``--rounds`` timed epochs, interleaved.

    PYTHONPATH=python python benches/peers/detection.py [--data DIR] [--workers 2] [--rounds 2] [--size 512]
        [--recipes rrc,ssd,lsj,mosaic]

Target: trdata ≥ 4× with masks, ≥ 3× without. Reported, never asserted.
"""

from __future__ import annotations

import argparse
import math
import os
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
import trdata

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benches/: the shared `common` package
from common import DEFAULT_DATA, folder_files  # noqa: E402
from common.coco import write_coco  # noqa: E402

BATCH = 16


MEAN = (123, 117, 104)


def trdata_recipe(recipe: str, size: int) -> list[Any]:
    t = trdata
    return {
        "rrc": [t.RandomResizedCrop(size, scale=(0.3, 1.0)), t.RandomHorizontalFlip()],
        "ssd": [
            t.RandomPhotometricDistort(),
            t.RandomZoomOut(fill=MEAN),
            t.RandomIoUCrop(),
            t.RandomHorizontalFlip(),
            t.SanitizeBoundingBoxes(),
            t.Resize((300, 300)),
        ],  # fmt: skip
        "lsj": [
            t.ScaleJitter((size, size)),
            t.RandomCrop(size, pad_if_needed=True),
            t.RandomHorizontalFlip(),
            t.SanitizeBoundingBoxes(),
        ],  # fmt: skip
        "mosaic": [t.Mosaic(size), *_MOSAIC_TAIL(t, size)],
    }[recipe]


def _MOSAIC_TAIL(t: Any, size: int) -> list[Any]:
    """What runs on a mosaic's canvas (trdata's and v2's classes take the same arguments)."""
    return [
        t.RandomAffine(degrees=0, translate=(0.1, 0.1), scale=(0.5, 1.5)),
        t.CenterCrop(size),
        t.RandomHorizontalFlip(),
    ]


def torchvision_recipe(recipe: str, size: int, masks: bool) -> list[Any]:
    import torch
    from torchvision import tv_tensors
    from torchvision.transforms import v2

    return {
        "rrc": [v2.RandomResizedCrop(size, scale=(0.3, 1.0), antialias=True), v2.RandomHorizontalFlip()],
        "ssd": [
            v2.RandomPhotometricDistort(),
            v2.RandomZoomOut(fill={tv_tensors.Mask: 0, "others": MEAN}),
            v2.RandomIoUCrop(),
            v2.RandomHorizontalFlip(),
            v2.SanitizeBoundingBoxes(),
            v2.Resize((300, 300), antialias=True),
        ],  # fmt: skip
        "lsj": [
            v2.ScaleJitter((size, size), antialias=True),
            v2.RandomCrop(size, pad_if_needed=True),
            v2.RandomHorizontalFlip(),
            v2.SanitizeBoundingBoxes(),
        ],  # fmt: skip
        "mosaic": _MOSAIC_TAIL(v2, size),
    }[recipe] + [v2.ToDtype(torch.float32, scale=True)]


class MosaicDataset:
    """The peer's Mosaic: ultralytics' ``_mosaic4`` written in Python over torchvision's wrapped ``CocoDetection``
    (images as uint8 tensors, boxes as ``BoundingBoxes``), then ``tail`` (v2) on the canvas."""

    def __init__(self, wrapped: Any, size: int, tail: Any) -> None:
        self.ds, self.s, self.tail = wrapped, size, tail

    def __len__(self) -> int:
        return len(self.ds)

    def _load(self, i: int) -> tuple[Any, Any]:
        from torchvision.transforms.v2 import functional as F

        img, target = self.ds[i]
        img = F.pil_to_tensor(img)
        h, w = img.shape[-2:]
        r = self.s / max(h, w)
        rh, rw = min(math.ceil(h * r), self.s), min(math.ceil(w * r), self.s)
        boxes = target["boxes"].as_subclass(torch.Tensor) * torch.tensor([rw / w, rh / h, rw / w, rh / h])
        return F.resize(img, [rh, rw], antialias=True), (boxes, target["labels"])

    def __getitem__(self, i: int) -> Any:
        from torchvision import tv_tensors

        s = self.s
        xc, yc = (int(random.uniform(s // 2, 2 * s - s // 2)) for _ in range(2))
        canvas = torch.full((3, 2 * s, 2 * s), 114, dtype=torch.uint8)
        all_boxes, all_labels = [], []
        for k, j in enumerate([i] + [random.randrange(len(self.ds)) for _ in range(3)]):
            img, (boxes, labels) = self._load(j)
            h, w = img.shape[-2:]
            if k == 0:
                x1a, y1a, x2a, y2a = max(xc - w, 0), max(yc - h, 0), xc, yc
                x1b, y1b, x2b, y2b = w - (x2a - x1a), h - (y2a - y1a), w, h
            elif k == 1:
                x1a, y1a, x2a, y2a = xc, max(yc - h, 0), min(xc + w, 2 * s), yc
                x1b, y1b, x2b, y2b = 0, h - (y2a - y1a), min(w, x2a - x1a), h
            elif k == 2:
                x1a, y1a, x2a, y2a = max(xc - w, 0), yc, xc, min(2 * s, yc + h)
                x1b, y1b, x2b, y2b = w - (x2a - x1a), 0, w, min(y2a - y1a, h)
            else:
                x1a, y1a, x2a, y2a = xc, yc, min(xc + w, 2 * s), min(2 * s, yc + h)
                x1b, y1b, x2b, y2b = 0, 0, min(w, x2a - x1a), min(y2a - y1a, h)
            canvas[:, y1a:y2a, x1a:x2a] = img[:, y1b:y2b, x1b:x2b]
            all_boxes.append(boxes + torch.tensor([x1a - x1b, y1a - y1b] * 2))
            all_labels.append(labels)
        boxes = torch.cat(all_boxes).clamp_(0, 2 * s)
        keep = (boxes[:, 2] > boxes[:, 0]) & (boxes[:, 3] > boxes[:, 1])
        target = {
            "boxes": tv_tensors.BoundingBoxes(boxes[keep], format="XYXY", canvas_size=(2 * s, 2 * s)),
            "labels": torch.cat(all_labels)[keep],
        }
        return self.tail(tv_tensors.Image(canvas), target)


def trdata_epoch(
    images: str, ann: str, workers: int, size: int, masks: bool, recipe: str
) -> tuple[float, int]:
    source = trdata.CocoDetection(images, ann, masks=masks)
    with trdata.Loader(
        source,
        batch_size=BATCH,
        transforms=trdata_recipe(recipe, size),
        normalize=None,
        dtype="float32",
        shuffle=True,
        workers=workers,
    ) as loader:
        for _ in loader:  # warm-up
            pass
        n, t0 = 0, time.perf_counter()
        loader.set_epoch(1)
        for b in loader:
            n += b.valid
            assert len(b.targets) == len(b)
        return n / (time.perf_counter() - t0), n


def _collate(batch: list[Any]) -> Any:
    return tuple(zip(*batch))


def torchvision_epoch(
    images: str, ann: str, workers: int, size: int, masks: bool, recipe: str
) -> tuple[float, int]:
    import torch
    from torchvision.datasets import CocoDetection, wrap_dataset_for_transforms_v2
    from torchvision.transforms import v2

    keys = {"image_id", "boxes", "labels", *(["masks"] if masks else [])}
    if recipe == "mosaic":
        plain = wrap_dataset_for_transforms_v2(CocoDetection(images, ann), target_keys=keys)
        ds: Any = MosaicDataset(plain, size, v2.Compose(torchvision_recipe(recipe, size, masks)))
    else:
        tf = v2.Compose([v2.PILToTensor(), *torchvision_recipe(recipe, size, masks)])
        ds = wrap_dataset_for_transforms_v2(CocoDetection(images, ann, transforms=tf), target_keys=keys)
    loader = torch.utils.data.DataLoader(
        ds, batch_size=BATCH, shuffle=True, num_workers=workers, collate_fn=_collate, persistent_workers=True
    )
    for _ in loader:  # warm-up
        pass
    n, t0 = 0, time.perf_counter()
    for imgs, targets in loader:
        n += len(imgs)
        assert len(targets) == len(imgs)
    return n / (time.perf_counter() - t0), n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA, help="ImageFolder root (default: %(default)s)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--size", type=int, default=512)
    ap.add_argument("--limit", type=int, default=0, help="use the first N images only (0: all)")
    ap.add_argument("--recipes", default="rrc,ssd,lsj")
    args = ap.parse_args()
    cpus = sorted(os.sched_getaffinity(0))[: args.workers]
    os.sched_setaffinity(0, cpus)  # both contenders on the same CPUs (DataLoader's workers inherit it)
    paths, _ = folder_files(str(args.data))
    paths = paths[: args.limit or None]
    with tempfile.TemporaryDirectory() as tmp:
        images, ann = write_coco(paths, tmp)
        print(
            f"{len(paths)} images, COCO-style boxes + polygons, {args.workers} workers on CPUs {cpus}, size {args.size}"
        )
        pairs = [(r, m) for r in args.recipes.split(",") for m in (False, True) if not (r == "mosaic" and m)]
        for recipe, masks in pairs:
            best: dict[str, float] = {}
            runs = {
                "trdata CocoDetection": trdata_epoch,
                "DataLoader + CocoDetection + v2": torchvision_epoch,
            }
            for r in range(args.rounds):
                for name, fn in runs.items():
                    rate, n = fn(images, ann, args.workers, args.size, masks, recipe)
                    best[name] = max(best.get(name, 0.0), rate)
                    print(
                        f"  {recipe} masks={masks!s:<5} round {r}: {name:<34} {rate:8.1f} img/s ({n} images)",
                        flush=True,
                    )
            ours, theirs = best["trdata CocoDetection"], best["DataLoader + CocoDetection + v2"]
            print(
                f"{recipe} masks={masks}: trdata {ours:,.1f} img/s, DataLoader + v2 {theirs:,.1f} img/s: "
                f"{ours / theirs:.2f}×\n",
                flush=True,
            )


if __name__ == "__main__":
    main()
