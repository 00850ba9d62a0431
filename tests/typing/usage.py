"""Static typing of the public API, checked by mypy in `make lint` (never run: pytest collects no file here).

Calls that must type-check are plain. Each call that must be refused carries `# type: ignore[<code>]`: mypy
runs with warn_unused_ignores, so the day such a call starts to type-check (a choice typed `str` again, say)
its ignore is unused and `make lint` fails — this check cannot pass silently.
"""

from __future__ import annotations

from typing import assert_type

import numpy as np
import trdata
from trdata.batch import BatchArray, BatchImages


def accepted(src: trdata.Source) -> None:
    trdata.Loader(
        src,
        batch_size=8,
        transforms=[trdata.RandomResizedCrop(224, scale=(0.5, 1.0)), trdata.RandomHorizontalFlip(0.3)],
        normalize=trdata.IMAGENET,
        dtype="bfloat16",
        layout="NHWC",
        last_batch="drop",
        on_error="skip",
        pin="numa",
        device=["cuda:0", "cuda:1"],
        cpus={0, 1},
    )
    trdata.Loader(src, device="cuda:0", transforms=[trdata.Resize(256), trdata.CenterCrop((224, 200))])
    trdata.Loader(src, views=[[trdata.RandomResizedCrop(224)], [trdata.RandomResizedCrop(96)]])


def refused(src: trdata.Source) -> None:
    trdata.Loader(src, dtype="float23")  # type: ignore[arg-type]
    trdata.Loader(src, layout="nchw")  # type: ignore[arg-type]
    trdata.Loader(src, last_batch="keep")  # type: ignore[arg-type]
    trdata.Loader(src, on_error="ignore")  # type: ignore[arg-type]
    trdata.Loader(src, pin="roundrobin")  # type: ignore[arg-type]
    trdata.Loader(src, device=0)  # type: ignore[arg-type]
    trdata.Loader(src, batch_size="8")  # type: ignore[arg-type]
    trdata.RandomResizedCrop(224, scale="small")  # type: ignore[arg-type]


def batches(loader: trdata.Loader) -> None:
    batch = next(iter(loader))
    assert_type(batch.images, BatchImages)  # a tuple of BatchArray per view with Loader(views=[...])
    assert_type(batch.labels, BatchArray)
    if isinstance(batch.images, tuple):
        assert_type(batch.images[0], BatchArray)
    assert_type(batch.indices, np.ndarray)
    batch.images.mean()  # type: ignore[union-attr]  # a CUDA loader's images are torch tensors
    if isinstance(batch.images, np.ndarray):
        batch.images.mean()
    images, labels = batch
    assert_type(labels, BatchImages)


def layouts() -> None:
    # YOLO's txt layout and label-map folders: a names list or ultralytics' names mapping; keys as a list
    trdata.YoloDetection("data/coco8", "train", classes={0: "person", 1: "bicycle"})
    trdata.YoloDetection("data/coco8", classes=["person", "bicycle"])
    trdata.SegmentationFolder("VOC2012/JPEGImages", "VOC2012/SegmentationClass", ids=["2007_000032"])
    trdata.SegmentationFolder("city/leftImg8bit", "city/gtFine", image_suffix="_leftImg8bit.png")
    trdata.YoloDetection("data/coco8", "train", {0: "person"})  # type: ignore[call-arg]  # classes: keyword
    trdata.SegmentationFolder("img", "ann", ["2007_000032"])  # type: ignore[call-arg]  # ids: keyword
