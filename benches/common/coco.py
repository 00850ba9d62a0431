"""A COCO-style detection set over existing images (the CPU and GPU detection benches'): 2-6 boxes with an
8-point polygon each per image, a crowd RLE in every fourth image, 80 categories."""

from __future__ import annotations

import json
import os
from typing import Any

import numpy as np


def write_coco(paths: list[str], folder: str, max_side: int | None = None) -> tuple[str, str]:
    """A COCO instances file over the images at ``paths`` (symlinked into one folder): boxes with polygons. With
    ``max_side`` (COCO's images are at most 640 a side), a larger image is resized to it (longest side, Pillow's
    bilinear) and written as a JPEG (quality 90) instead of linked."""
    from PIL import Image

    rng = np.random.default_rng(0)
    images_dir = os.path.join(folder, "images")
    os.makedirs(images_dir)
    images, annotations = [], []
    for i, p in enumerate(paths):
        name = f"{i:012d}.jpg"
        with Image.open(p) as im:
            w, h = im.size
            if max_side is not None and max(w, h) > max_side:
                r = max_side / max(w, h)
                w, h = max(1, round(w * r)), max(1, round(h * r))
                im.convert("RGB").resize((w, h), Image.BILINEAR).save(
                    os.path.join(images_dir, name), quality=90
                )
            else:
                os.symlink(os.path.abspath(p), os.path.join(images_dir, name))
        images.append({"id": i + 1, "file_name": name, "width": w, "height": h})
        for k in range(int(rng.integers(2, 7))):
            bw, bh = rng.uniform(0.1, 0.5) * w, rng.uniform(0.1, 0.5) * h
            x, y = rng.uniform(0, w - bw), rng.uniform(0, h - bh)
            ann: dict[str, Any] = {"id": len(annotations) + 1, "image_id": i + 1, "category_id": int(rng.integers(1, 81)),
                                   "bbox": [x, y, bw, bh], "area": bw * bh, "iscrowd": 0}  # fmt: skip
            n = 8
            angles = np.linspace(0, 2 * np.pi, n, endpoint=False)
            ann["segmentation"] = [
                [
                    float(v)
                    for a in angles
                    for v in (x + bw / 2 * (1 + np.cos(a)), y + bh / 2 * (1 + np.sin(a)))
                ]
            ]
            if i % 4 == 0 and k == 0:  # a crowd region as uncompressed RLE
                m = np.zeros((h, w), np.uint8)
                m[int(y) : int(y + bh), int(x) : int(x + bw)] = 1
                flat = m.flatten(order="F")
                change = np.flatnonzero(np.diff(flat)) + 1
                bounds = np.concatenate([[0], change, [len(flat)]])
                counts = np.diff(bounds).tolist()
                if flat[0] == 1:
                    counts = [0, *counts]
                ann.update(segmentation={"size": [h, w], "counts": counts}, iscrowd=1)
            annotations.append(ann)
    ann_file = os.path.join(folder, "instances.json")
    with open(ann_file, "w") as f:
        json.dump({"images": images, "annotations": annotations,
                   "categories": [{"id": c, "name": f"c{c}"} for c in range(1, 81)]}, f)  # fmt: skip
    return images_dir, ann_file
