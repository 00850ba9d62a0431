"""The target stage runs in the workers: the training thread only slices what they made.

Each detection or segmentation source (COCO with masks and keypoints, YOLO with masks, a segmentation folder, a
pack of each) is iterated while another thread watches the training thread's read syscalls in
``/proc/self/task/<tid>/io`` (``syscr``: read, pread, readv … of any file or socket, counted by the kernel for
that one thread). Once the loader runs, the training thread makes none: every image, annotation, label map and
stored record is read by the loader's workers. And the targets are those the workers made for each row: their
``image_id`` names the row's sample.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import trdata
from _fixtures import photo, write_coco_boxes
from PIL import Image

pytestmark = pytest.mark.skipif(not os.path.exists("/proc/self/task"), reason="needs Linux /proc")


def _reads_of(tid: int) -> int:
    """Thread ``tid``'s read syscalls so far (read from this thread, so the count is not its own)."""
    with open(f"/proc/self/task/{tid}/io") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("syscr:"))


def _watched_reads(tid: int, work: Any) -> int:
    """Read syscalls thread ``tid`` made while ``work()`` ran on it, counted from a helper thread."""
    out: dict[str, int] = {}
    start = threading.Event()
    done = threading.Event()

    def watch() -> None:
        out["before"] = _reads_of(tid)
        start.set()
        done.wait()
        out["after"] = _reads_of(tid)

    t = threading.Thread(target=watch)
    t.start()
    start.wait()
    try:
        work()
    finally:
        done.set()
        t.join()
    return out["after"] - out["before"]


def _coco_with_masks(root: Path) -> trdata.CocoDetection:
    images, ann = write_coco_boxes(root, 12, (64, 48))
    data = json.loads(ann.read_text())
    for a in data["annotations"]:
        x, y, w, h = a["bbox"]
        a["segmentation"] = [[x, y, x + w, y, x + w, y + h]]
        a["keypoints"] = [x + 1, y + 1, 2, x + w - 1, y + h - 1, 1]
    ann.write_text(json.dumps(data))
    return trdata.CocoDetection(images, ann, masks=True, keypoints=True)


def _yolo(root: Path) -> trdata.YoloDetection:
    for k in range(12):
        (root / "images").mkdir(parents=True, exist_ok=True)
        (root / "labels").mkdir(parents=True, exist_ok=True)
        Image.fromarray(photo(k, 48, 40)).save(root / "images" / f"{k}.jpg", quality=90)
        (root / "labels" / f"{k}.txt").write_text(f"{k % 3} 0.1 0.1 0.6 0.1 0.6 0.7 0.1 0.7\n")
    return trdata.YoloDetection(root, masks=True)


def _segmentation(root: Path) -> trdata.SegmentationFolder:
    (root / "img").mkdir(parents=True)
    (root / "map").mkdir(parents=True)
    for k in range(12):
        Image.fromarray(photo(k, 40, 30)).save(root / "img" / f"{k}.jpg", quality=90)
        m = np.full((30, 40), k % 21, np.uint8)
        m[:, :20] = 255
        Image.fromarray(m, mode="L").save(root / "map" / f"{k}.png")
    return trdata.SegmentationFolder(root / "img", root / "map")


SOURCES = {"coco": _coco_with_masks, "yolo": _yolo, "segmentation": _segmentation}


@pytest.mark.parametrize("packed", [False, True], ids=["files", "pack"])
@pytest.mark.parametrize("kind", sorted(SOURCES))
def test_the_training_thread_reads_nothing_and_each_row_gets_its_own_targets(
    tmp_path: Path, kind: str, packed: bool
) -> None:
    source: Any = SOURCES[kind](tmp_path / "src")
    if packed:
        trdata.pack(source, tmp_path / "data.trd")
        source = trdata.Packed(tmp_path / "data.trd")
    tf = [trdata.RandomResizedCrop(32, scale=(0.5, 1.0)), trdata.RandomHorizontalFlip()]
    with trdata.Loader(source, batch_size=4, transforms=tf, workers=2, seed=1, normalize=None) as loader:
        it = iter(loader)
        batches = [next(it)]  # the epoch started: from here on the workers read everything
        tid = threading.get_native_id()
        reads = _watched_reads(tid, lambda: batches.extend(it))
    assert reads == 0, f"the training thread made {reads} read syscalls while iterating"
    assert sum(b.valid for b in batches) == 12
    for b in batches:
        assert len(b.targets) == len(b)
        for i, t in zip(b.indices.tolist(), b.targets):
            want = i + 1 if kind == "coco" else i  # COCO's image ids; the index for the others
            assert t["image_id"] == want
            assert tuple(t["size"]) == (32, 32)
            if kind == "segmentation":
                assert t["mask"].shape == (32, 32)
            else:
                assert len(t["boxes"]) == len(t["labels"]) == len(t["masks"]) == 1
                assert t["masks"].shape[1:] == (32, 32)
