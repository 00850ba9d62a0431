"""The target stage runs in the workers: the training thread only slices what they made.

Each detection or segmentation source (COCO with masks and keypoints, YOLO with masks, a segmentation folder, a
pack of each) is iterated while another thread watches the training thread's read syscalls in
``/proc/self/task/<tid>/io`` (``syscr``: read, pread, readv … of any file or socket, counted by the kernel for
that one thread). Once the loader runs, the training thread makes none: every image, annotation, label map and
stored record is read by the loader's workers. And the targets are those the workers made for each row: their
``image_id`` names the row's sample.

Extras (a WebDataset shard's ``.txt``/``.json`` members, a pack's extras section) are read by the workers too, each
row's its own sample's, and a member that cannot be read is that sample's error under ``on_error``.
"""

from __future__ import annotations

import io
import json
import os
import tarfile
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


def _shard_with_extras(root: Path, n: int = 12, bad_json: int | None = None) -> str:
    """A WebDataset shard in webdataset's layout (``<key>.<ext>`` members in key order): a JPEG, a caption, a
    JSON document and a class per sample; sample ``bad_json``'s JSON is not JSON."""
    root.mkdir(parents=True, exist_ok=True)
    path = root / "train-000000.tar"
    with tarfile.open(path, "w") as tar:
        for k in range(n):
            img = io.BytesIO()
            Image.fromarray(photo(k, 40, 32)).save(img, format="JPEG", quality=90)
            doc = b"{not json" if k == bad_json else json.dumps({"k": k}).encode()
            for ext, data in (
                ("jpg", img.getvalue()),
                ("txt", f"caption {k}".encode()),
                ("json", doc),
                ("cls", b"1"),
            ):
                info = tarfile.TarInfo(f"s{k:04d}.{ext}")
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return str(path)


@pytest.mark.parametrize("where", ["shards", "pack-full", "pack-partial"])
def test_extras_are_read_by_the_workers_each_row_its_own(tmp_path: Path, where: str) -> None:
    source: Any = trdata.WebDataset(_shard_with_extras(tmp_path / "src"), extras=("txt", "json"))
    if where != "shards":
        trdata.pack(source, tmp_path / "data.trd", progress=False)
        source = trdata.Packed(tmp_path / "data.trd", mode=where.split("-")[1])
    tf = [trdata.RandomResizedCrop(32, scale=(0.5, 1.0))]
    with trdata.Loader(source, batch_size=4, transforms=tf, workers=2, seed=1, normalize=None) as loader:
        it = iter(loader)
        batches = [next(it)]
        tid = threading.get_native_id()
        reads = _watched_reads(tid, lambda: batches.extend(it))
    assert reads == 0, f"the training thread made {reads} read syscalls while iterating"
    seen = []
    for b in batches:
        for i, caption, doc in zip(b.indices.tolist(), b.extras["txt"], b.extras["json"]):
            assert (caption, doc) == (f"caption {i}", {"k": i})
            seen.append(i)
    assert sorted(seen) == list(range(12))


def test_an_extra_that_cannot_be_read_is_its_samples_error_under_on_error(tmp_path: Path) -> None:
    source = trdata.WebDataset(_shard_with_extras(tmp_path / "src", bad_json=5), extras=("txt", "json"))
    tf = [trdata.CenterCrop(32)]
    with pytest.raises(trdata.DecodeError, match="s0005") as e:
        with trdata.Loader(source, batch_size=4, transforms=tf, workers=2, normalize=None) as loader:
            list(loader)
    assert e.value.index == 5
    with trdata.Loader(
        source, batch_size=4, transforms=tf, workers=2, normalize=None, on_error="skip"
    ) as loader:
        rows = [
            (i, c) for b in loader for i, c in zip(b.indices[: b.valid].tolist(), b.extras["txt"][: b.valid])
        ]
        assert loader.stats()["errors_skipped"] == 1
    assert 5 not in [i for i, _ in rows] and all(c == f"caption {i}" for i, c in rows)
    assert len(rows) == 12  # the skipped sample's place is taken by another, as for a bad image
