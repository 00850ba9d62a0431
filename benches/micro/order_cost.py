#!/usr/bin/env python3
"""What in-order delivery costs: an unshuffled loader (eval, feature extraction) delivers dataset order by
default (fixed slots: a batch is published when all its rows are written), while ``reproducible=False`` lets
finished samples take the next free slot. Same files, same CPUs, same pipeline, interleaved rounds in one run.

    .venv/bin/python benches/micro/order_cost.py                       # ../shared/data/imagenet-sample, 2 workers
    .venv/bin/python benches/micro/order_cost.py --data DIR --workers 2 --rounds 5

Pipelines: the eval recipe (Resize 256 + CenterCrop 224, float16 NCHW, ImageNet normalize) and the training
recipe (RandomResizedCrop 224 + flip), batch 64, shuffle=False. Prints img/s per round, the best of each, and
the ratio ordered ÷ out-of-order (1.0 = free).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import trdata

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benches/: the shared `common` package
from common import DEFAULT_DATA  # noqa: E402

RECIPES = {
    "eval": [trdata.Resize(256), trdata.CenterCrop(224)],
    "train": [trdata.RandomResizedCrop(224), trdata.RandomHorizontalFlip()],
}


def rate(source: trdata.Source, transforms: list, workers: int, ordered: bool, epochs: int) -> float:
    with trdata.Loader(
        source,
        batch_size=64,
        transforms=transforms,
        normalize=trdata.IMAGENET,
        dtype="float16",
        workers=workers,
        shuffle=False,
        reproducible=ordered,
    ) as loader:
        for _ in loader:  # warm-up epoch: page cache, buffers, decoder scratch
            pass
        n, t0 = 0, time.perf_counter()
        for _ in range(epochs):
            for batch in loader:
                n += len(batch)
        return n / (time.perf_counter() - t0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA, help="ImageFolder root (default: %(default)s)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--epochs", type=int, default=2, help="timed epochs per measurement")
    args = ap.parse_args()
    source = trdata.ImageFolder(args.data)
    cpus = sorted(os.sched_getaffinity(0))
    print(f"{len(source)} images from {args.data}, {args.workers} workers, CPUs {cpus}")
    for name, transforms in RECIPES.items():
        best = {}
        for r in range(args.rounds):
            for ordered in (False, True):
                v = rate(source, transforms, args.workers, ordered, args.epochs)
                best[ordered] = max(best.get(ordered, 0.0), v)
                label = "in order (default)" if ordered else "out of order"
                print(f"  {name} round {r}: {label:<19} {v:8.0f} img/s")
        print(
            f"{name}: out of order {best[False]:.0f} img/s, in order {best[True]:.0f} img/s, "
            f"ratio {best[True] / best[False]:.3f}"
        )


if __name__ == "__main__":
    main()
