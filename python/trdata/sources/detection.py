"""Detection and segmentation sources: an image plus boxes, labels, instance masks and keypoints per sample.

``CocoDetection(root, ann_file, masks=False, keypoints=False)`` reads COCO's ``instances_*.json`` /
``person_keypoints_*.json`` as ``torchvision.datasets.CocoDetection`` + ``wrap_dataset_for_transforms_v2`` present
them: the images in sorted-id order, each image's annotations in file order, ``boxes`` in XYXY (converted from the
file's XYWH), ``labels`` the ``category_id``\\ s, ``iscrowd``, ``image_id``; masks decoded from polygons and RLE
exactly as pycocotools decodes them. The annotation file is parsed by the Rust core with bounded allocations
(``src/annot/coco.rs``): a hostile file is a ``SourceError`` naming the file and the annotation, and so is, with
``masks=True``, a segmentation that is no mask of its image (every one is made when the source is made).

Targets move with the image (``batch.targets``): the worker that decodes a row reads its annotations from the
parsed file (src/sample/coco.rs) and moves boxes (clamped to the canvas), keypoints (points off the canvas get
visibility 0) and masks (nearest, decoded for the kept window only) with the row's own draws, as torchvision v2's
kernels move them. The crop/resize/flip ops that fold into the decode (RandomResizedCrop,
Resize, CenterCrop, RandomCrop, the flips) move targets; photometric ops after them leave targets alone; any
other geometric op after a pixel op is refused for a detection source (``ConfigError`` on ``transforms``).
The annotation file's ``width``/``height`` must be the images' own (as COCO's are): the geometry is replayed at
that size.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from .. import _core
from . import packed_targets
from .base import Source, refuse_url

#: Keys of one image's target (``batch.targets[i]``).
TARGET_KEYS = ("boxes", "labels", "iscrowd", "image_id", "orig_size", "size", "masks", "keypoints")


class CocoDetection(Source):
    """COCO detection/segmentation/keypoints (module docs). ``root`` holds the images named by ``file_name``;
    ``masks=True`` adds each instance's mask (uint8 ``(K, H, W)``), ``keypoints=True`` each instance's keypoints
    (float32 ``(K, P, 3)``: x, y, visibility). ``classes`` are the category names, ``class_to_idx`` maps a name
    to its ``category_id`` (COCO's ids, not contiguous: ``labels`` hold them as torchvision's wrapper does)."""

    def __init__(
        self,
        root: str | os.PathLike[str],
        ann_file: str | os.PathLike[str],
        *,
        masks: bool = False,
        keypoints: bool = False,
        storage_options: Any = None,
    ) -> None:
        from .._args import _bool_arg

        refuse_url("CocoDetection", "root", root, storage_options)
        refuse_url("CocoDetection", "ann_file", ann_file, None)

        self.root = os.fspath(root)
        self.ann_file = os.fspath(ann_file)
        self.masks = _bool_arg(masks, "masks")
        self.keypoints = _bool_arg(keypoints, "keypoints")
        self._ann = _core.CocoAnnotations(self.ann_file, masks=self.masks)  # masks: every one checked now
        images = self._ann.images()
        self.ids: list[int] = images["ids"].tolist()
        self._sizes = np.stack([images["widths"], images["heights"]], axis=1).astype(np.int64)
        self.paths = [os.path.join(self.root, name) for name in images["file_names"]]
        a = self._ann.annotations()
        self._offsets: np.ndarray = a["offsets"]
        self._boxes_xywh: np.ndarray = a["bboxes"]
        self._category_ids: np.ndarray = a["category_ids"]
        self._iscrowd: np.ndarray = a["iscrowd"]
        self._kp_offsets: np.ndarray = a["keypoints_offsets"]
        self._kp: np.ndarray = a["keypoints"]
        categories = self._ann.categories()
        self.classes = [name for _, name, _, _ in categories]
        self.class_to_idx = {name: cid for cid, name, _, _ in categories}
        self.labels = [0] * len(self.paths)  # the per-image class the core holds: none (targets are per box)
        if not self.paths:
            from ..errors import SourceError

            raise SourceError(f"{self.ann_file}: the annotation file lists no images", self.ann_file)
        # the boxes (XYXY, source pixels) go to the core too: RandomIoUCrop's draw depends on them
        xyxy = np.concatenate(
            [self._boxes_xywh[:, :2], self._boxes_xywh[:, :2] + self._boxes_xywh[:, 2:]], axis=1
        )
        # and the sizes the annotations were made for: the worker checks each decoded image against its own
        # and the annotations themselves: the workers read and move each row's (src/sample/coco.rs)
        self._native = (
            _core.NativeSource.files(self.paths, self.labels, [])
            .with_boxes(self._offsets.tolist(), np.ascontiguousarray(xyxy, np.float64).reshape(-1, 4))
            .with_sizes(self._sizes)
            .with_coco_targets(self._ann, self.masks, self.keypoints)
        )

    def __repr__(self) -> str:
        return f"CocoDetection({self.root!r}, {self.ann_file!r}, {len(self)} images, {len(self.classes)} categories)"

    def _native_source(self) -> _core.NativeSource:
        return self._native

    def _image_targets(self, i: int) -> dict[str, Any]:
        """Image ``i``'s annotations in source pixels (boxes XYXY float64), as ``trdata.pack`` stores them."""
        lo, hi = int(self._offsets[i]), int(self._offsets[i + 1])
        xywh = self._boxes_xywh[lo:hi]
        boxes = np.concatenate([xywh[:, :2], xywh[:, :2] + xywh[:, 2:]], axis=1)
        out: dict[str, Any] = {
            "boxes": boxes,
            "labels": self._category_ids[lo:hi].astype(np.int64),
            "iscrowd": self._iscrowd[lo:hi].astype(np.int64),
            "ann": np.arange(lo, hi),
        }
        if self.keypoints:
            k0, k1 = self._kp_offsets[lo:hi], self._kp_offsets[lo + 1 : hi + 1]
            points = [self._kp[a:b].reshape(-1, 3) for a, b in zip(k0, k1)]
            p = max((len(x) for x in points), default=0)
            kp = np.zeros((hi - lo, p, 3), np.float64)
            for r, x in enumerate(points):
                kp[r, : len(x)] = x
            out["keypoints"] = kp
        return out

    def _pack_extras(self, i: int) -> list[tuple[str, int, bytes]]:
        """Image ``i``'s annotations, as ``trdata.pack`` stores them (sources/packed_targets.py): masks as RLE
        strings (polygons rasterized once, here), keypoints when asked for."""
        t = self._image_targets(i)
        ann = t.pop("ann")
        if self.masks:
            t["masks"] = self._ann.rles(ann.tolist())
        return packed_targets.encode({**t, "size": self._sizes[i], "image_id": self.ids[i]})
