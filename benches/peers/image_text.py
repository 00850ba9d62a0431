#!/usr/bin/env python3
"""Image–text shards on the CPU box: trdata against webdataset's own pipeline + torch DataLoader, on the same
shards (jpg + txt per sample, img2dataset's layout, written from the ImageNet sample with synthetic captions) and
the same CPUs: RandomResizedCrop 224 + flip, float32 NCHW normalized, batch 64, the captions delivered with each
batch (trdata: ``WebDataset(extras=("txt",))`` → ``batch.extras["txt"]``; webdataset: ``.decode("pil")
.to_tuple("jpg", "txt")`` + torchvision v2 in the DataLoader's worker processes). 1 warm-up epoch, then the best
of ``--rounds`` timed epochs, interleaved.

    PYTHONPATH=python python benches/peers/image_text.py [--data DIR] [--workers 2] [--rounds 2]

Target: trdata ≥ 2× webdataset + DataLoader. Reported, never asserted.
"""

from __future__ import annotations

import argparse
import io
import os
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any

import trdata

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benches/: the shared `common` package
from common import DEFAULT_DATA, IMAGENET_MEAN, IMAGENET_STD, folder_files  # noqa: E402

BATCH = 64


def write_shards(paths: list[str], folder: str, per_shard: int = 250) -> list[str]:
    shards = []
    for s in range(0, len(paths), per_shard):
        name = os.path.join(folder, f"{s // per_shard:06d}.tar")
        with tarfile.open(name, "w") as tar:
            for i in range(s, min(len(paths), s + per_shard)):
                caption = f"a photo of item {i} from {os.path.basename(os.path.dirname(paths[i]))}".encode()
                for ext, data in (("jpg", Path(paths[i]).read_bytes()), ("txt", caption)):
                    info = tarfile.TarInfo(f"{i:09d}.{ext}")
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))
        shards.append(name)
    return shards


def trdata_epoch(shards: list[str], workers: int) -> tuple[float, int]:
    source = trdata.WebDataset(shards, target_key=None, extras=("txt",), cache_dir=False)
    with trdata.Loader(
        source,
        batch_size=BATCH,
        transforms=[trdata.RandomResizedCrop(224), trdata.RandomHorizontalFlip()],
        normalize=trdata.IMAGENET,
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
            assert len(b.extras["txt"]) == len(b)
        return n / (time.perf_counter() - t0), n


def webdataset_epoch(shards: list[str], workers: int) -> tuple[float, int]:
    import torch
    import webdataset as wds
    from torchvision.transforms import v2

    tf = v2.Compose(
        [
            v2.PILToTensor(),
            v2.RandomResizedCrop(224, antialias=True),
            v2.RandomHorizontalFlip(),
            v2.ToDtype(torch.float32, scale=True),
            v2.Normalize(IMAGENET_MEAN, IMAGENET_STD),
        ]
    )
    ds = (
        wds.WebDataset(shards, shardshuffle=len(shards), empty_check=False)
        .shuffle(1000)
        .decode("pil")
        .to_tuple("jpg", "txt")
        .map_tuple(tf, lambda t: t)
        .batched(BATCH, partial=True)
    )
    loader = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=workers, persistent_workers=True)
    for _ in loader:  # warm-up
        pass
    n, t0 = 0, time.perf_counter()
    for images, captions in loader:
        n += len(images)
        assert len(captions) == len(images)
    return n / (time.perf_counter() - t0), n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA, help="ImageFolder root (default: %(default)s)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    cpus = sorted(os.sched_getaffinity(0))[: args.workers]
    os.sched_setaffinity(0, cpus)  # both contenders on the same CPUs (DataLoader's workers inherit it)
    paths, _ = folder_files(str(args.data))
    with tempfile.TemporaryDirectory() as tmp:
        shards = write_shards(paths, tmp)
        print(
            f"{len(paths)} samples in {len(shards)} shards (jpg + txt), {args.workers} workers on CPUs {cpus}"
        )
        best: dict[str, float] = {}
        runs: dict[str, Any] = {"trdata WebDataset(extras=txt)": trdata_epoch,
                                "webdataset + DataLoader + v2": webdataset_epoch}  # fmt: skip
        for r in range(args.rounds):
            for name, fn in runs.items():
                rate, n = fn(shards, args.workers)
                best[name] = max(best.get(name, 0.0), rate)
                print(f"  round {r}: {name:<32} {rate:8.0f} img/s ({n} images)", flush=True)
    ours, theirs = best["trdata WebDataset(extras=txt)"], best["webdataset + DataLoader + v2"]
    print(f"\ntrdata {ours:,.0f} img/s, webdataset + DataLoader {theirs:,.0f} img/s: {ours / theirs:.2f}×")


if __name__ == "__main__":
    main()
