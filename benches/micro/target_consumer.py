#!/usr/bin/env python3
"""The training thread's share of a detection batch: the time spent inside ``next(iterator)`` when the workers are
already ahead, so the queue holds finished batches and ``next()`` measures only what the consumer itself does
(handing over the images, and whatever target work is left to it).

A COCO-style set (benches/common/coco.py: 2-6 boxes with polygons per image, a crowd RLE in every fourth image)
over the ImageNet sample's images, resized to COCO's 640 a side; ``CocoDetection(masks=True)``, the ``ssd``-like
recipe (RandomZoomOut, RandomIoUCrop, flip, Sanitize, Resize 300) and the ``lsj`` one, batch 64. The first batch
is untimed (lazy imports); after every ``next()`` the script sleeps ``--gap`` seconds so the workers refill the
queue; the median and mean of the
``next()`` times over ``--batches`` batches are reported per recipe, with masks and without.

    PYTHONPATH=python python benches/micro/target_consumer.py [--data DIR] [--limit 640] [--batches 8]

Also counts the file opens made on the training thread during ``next()`` (``sys.audit`` ``open`` events from that
thread): none is the goal.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benches/: the shared `common` package
import trdata  # noqa: E402
from common import DEFAULT_DATA, folder_files  # noqa: E402
from common.coco import write_coco  # noqa: E402

BATCH = 64


def recipe(name: str) -> list[Any]:
    t = trdata
    if name == "ssd":
        return [
            t.RandomZoomOut(fill=(123, 117, 104)),
            t.RandomIoUCrop(),
            t.RandomHorizontalFlip(),
            t.SanitizeBoundingBoxes(),
            t.Resize((300, 300)),
        ]
    return [
        t.ScaleJitter((512, 512)),
        t.RandomCrop(512, pad_if_needed=True),
        t.RandomHorizontalFlip(),
        t.SanitizeBoundingBoxes(),
    ]


OPENS: list[int] = [0]
WATCHED: list[int | None] = [None]


def _audit(event: str, _args: Any) -> None:
    if event == "open" and threading.get_ident() == WATCHED[0]:
        OPENS[0] += 1


def measure(
    images: str, ann: str, masks: bool, name: str, batches: int, gap: float
) -> tuple[float, float, int]:
    source = trdata.CocoDetection(images, ann, masks=masks)
    times = []
    with trdata.Loader(
        source,
        batch_size=BATCH,
        transforms=recipe(name),
        normalize=None,
        shuffle=True,
        workers=2,
        last_batch="drop",
    ) as loader:
        it = iter(loader)
        next(it)  # first batch untimed: lazy imports (torch's) open files once
        time.sleep(gap)
        OPENS[0] = 0
        WATCHED[0] = threading.get_ident()
        for _ in range(batches):
            t0 = time.perf_counter()
            b = next(it)
            times.append(time.perf_counter() - t0)
            assert len(b.targets) == BATCH
            time.sleep(gap)
        WATCHED[0] = None
        for _ in it:
            pass
    return statistics.median(times), statistics.fmean(times), OPENS[0]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA)
    ap.add_argument("--limit", type=int, default=640)
    ap.add_argument("--batches", type=int, default=8)
    ap.add_argument("--gap", type=float, default=5.0, help="seconds between next() calls (workers refill)")
    a = ap.parse_args()
    sys.addaudithook(_audit)
    paths = folder_files(str(a.data))[0][: a.limit]
    with tempfile.TemporaryDirectory() as tmp:
        images, ann = write_coco(paths, tmp, max_side=640)
        print(f"trdata {trdata.__version__}, {len(paths)} images, batch {BATCH}, gap {a.gap}s")
        print("| recipe | masks | next() median ms | next() mean ms | opens on the training thread |")
        print("|---|---|---|---|---|")
        for name in ("ssd", "lsj"):
            for masks in (True, False):
                med, mean, opens = measure(images, ann, masks, name, a.batches, a.gap)
                print(f"| {name} | {masks} | {med * 1e3:.2f} | {mean * 1e3:.2f} | {opens} |", flush=True)


if __name__ == "__main__":
    main()
