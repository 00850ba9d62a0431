#!/usr/bin/env python3
"""What a Python map-style dataset costs against the native source of the same data: the same JPEGs in memory,
given as ``trdata.Bytes`` (native), as a ``Dataset`` whose ``__getitem__`` returns the encoded bytes (the cheap
form: only the call holds the GIL), and as one that decodes with Pillow and returns the pixels (what a
torchvision-style ``__getitem__`` does: decode under the GIL, then trdata's pipeline on the full image).
RandomResizedCrop 224 + flip, uint8 NHWC, batch 64, 1 and 2 workers, interleaved rounds, best of each.

    .venv/bin/python benches/micro/python_source.py                 # ../shared/data/imagenet-sample
    .venv/bin/python benches/micro/python_source.py --data DIR --rounds 3 --limit 500
"""

from __future__ import annotations

import argparse
import io
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import trdata
from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benches/: the shared `common` package
from common import DEFAULT_DATA, folder_files  # noqa: E402

TRANSFORMS = [trdata.RandomResizedCrop(224), trdata.RandomHorizontalFlip()]


class EncodedDataset:
    """``__getitem__`` returns the file's bytes and its label."""

    def __init__(self, blobs: list[bytes], labels: list[int]) -> None:
        self.blobs, self.labels = blobs, labels

    def __len__(self) -> int:
        return len(self.blobs)

    def __getitem__(self, i: int) -> tuple[bytes, int]:
        return self.blobs[i], self.labels[i]


class DecodingDataset(EncodedDataset):
    """``__getitem__`` decodes with Pillow (RGB) and returns the pixels, as torchvision's datasets do."""

    def __getitem__(self, i: int) -> tuple[Any, int]:  # type: ignore[override]
        return np.asarray(Image.open(io.BytesIO(self.blobs[i])).convert("RGB")), self.labels[i]


def rate(source: Any, workers: int, epochs: int) -> float:
    return rate_with(source, TRANSFORMS, workers, epochs)


def rate_with(source: Any, transforms: list[Any], workers: int, epochs: int) -> float:
    with trdata.Loader(source, batch_size=64, transforms=transforms, workers=workers, shuffle=True) as loader:
        for _ in loader:  # warm-up epoch
            pass
        n, t0 = 0, time.perf_counter()
        for e in range(epochs):
            loader.set_epoch(e + 1)
            for batch in loader:
                n += batch.valid
        return n / (time.perf_counter() - t0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA, help="ImageFolder root (default: %(default)s)")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--epochs", type=int, default=1, help="timed epochs per measurement")
    ap.add_argument("--limit", type=int, default=1000, help="images used")
    args = ap.parse_args()
    paths, labels = folder_files(str(args.data))
    paths, labels = paths[: args.limit], labels[: args.limit]
    blobs = [Path(p).read_bytes() for p in paths]
    contenders = {
        "native trdata.Bytes": lambda: trdata.Bytes(blobs, labels),
        "Dataset → encoded bytes": lambda: EncodedDataset(blobs, labels),
        "Dataset → Pillow-decoded pixels": lambda: DecodingDataset(blobs, labels),
    }
    print(f"{len(blobs)} JPEGs from {args.data}; RRC 224 + flip, uint8, batch 64")
    best: dict[tuple[str, int], float] = {}
    for r in range(args.rounds):
        for workers in (1, 2):
            for name, make in contenders.items():
                v = rate(make(), workers, args.epochs)
                best[name, workers] = max(best.get((name, workers), 0.0), v)
                print(f"  round {r}: {workers} worker(s) {name:<34} {v:8.0f} img/s", flush=True)
    # A Python step's per-sample cost: the native source with an identity (v2.Lambda-style) step in the pipeline.
    step = [TRANSFORMS[0], trdata.PythonStep(lambda image: image, "identity"), TRANSFORMS[1]]
    with_step = max(rate_with(trdata.Bytes(blobs, labels), step, 1, args.epochs) for _ in range(args.rounds))
    # the same position held by a native op that does nothing (RandomInvert(p=0)): the unfused pass alone
    noop = [TRANSFORMS[0], trdata.RandomInvert(p=0.0), TRANSFORMS[1]]
    with_noop = max(rate_with(trdata.Bytes(blobs, labels), noop, 1, args.epochs) for _ in range(args.rounds))
    native_1 = best["native trdata.Bytes", 1]
    print("\n| source | 1 worker | 2 workers | 2 workers ÷ native |\n|---|--:|--:|--:|")
    for name in contenders:
        one, two = best[name, 1], best[name, 2]
        print(
            f"| {name} | {one:,.0f} img/s | {two:,.0f} img/s | {two / best['native trdata.Bytes', 2]:.2f}× |"
        )

    cost, unfused = (1 / with_step - 1 / native_1) * 1e6, (1 / with_noop - 1 / native_1) * 1e6
    print(
        f"native + a no-op native op there, 1 worker: {with_noop:,.0f} img/s: {unfused:.0f} µs per sample "
        f"(the pass a mid-pipeline op adds); the Python call itself: {cost - unfused:.0f} µs"
    )
    print(
        f"\nnative + an identity PythonStep, 1 worker: {with_step:,.0f} img/s: {cost:.0f} µs per sample for the step"
    )


if __name__ == "__main__":
    main()
