"""Loader-only GPU throughput: img/s of trdata with device='cuda:0' vs device='cpu' (+ an explicit
pinned .to('cuda') copy) on the same files and cores, plus trdata's H2D counters. No model.

    python benches/gpu/gpu_loader.py ROOT [--batch 256] [--steps 40] [--workers N] [--dtype float32|bfloat16|uint8]
        [--repeat K]
Prints one JSON object per configuration. The file list is repeated K times per epoch (default: enough for
≥ 100 batches) so that a small sample does not turn every step into an epoch boundary."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch
import trdata

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benches/: the shared `common` package
from common import IMAGENET_MEAN, IMAGENET_STD, allowed_cores, folder_files  # noqa: E402
from common.recipe import repeats_for  # noqa: E402


def run(root, device, dtype, batch, steps, workers, repeat=0):
    paths, labels = folder_files(root)
    repeat = repeat or repeats_for(len(paths), 100 * batch)
    src = trdata.FileList(paths * repeat, labels * repeat)
    norm = None if dtype == "uint8" else (list(IMAGENET_MEAN), list(IMAGENET_STD))
    ld = trdata.Loader(
        src,
        batch_size=batch,
        workers=workers,
        shuffle=True,
        dtype=dtype,
        layout="NCHW",
        transforms=[trdata.RandomResizedCrop(224), trdata.RandomHorizontalFlip()],
        normalize=norm,
        device=device,
        last_batch="drop",
        prefetch=3,
        max_held_batches=4,
    )
    n, t0, warm = 0, None, 5
    done = 0
    while done < steps + warm:
        for b in ld:
            imgs = b.images
            if device == "cpu":
                imgs = torch.from_dlpack(b).pin_memory().to("cuda", non_blocking=True)
            imgs.float().mean()  # touch on the GPU like a model would
            done += 1
            if done == warm:
                torch.cuda.synchronize()
                t0 = time.perf_counter()
            elif done > warm:
                n += imgs.shape[0]
            if done >= steps + warm:
                break
    torch.cuda.synchronize()
    dt = time.perf_counter() - t0
    s = ld.stats()
    ld.close()
    out = {
        "device": device,
        "dtype": dtype,
        "batch": batch,
        "workers": workers,
        "repeat": repeat,
        "img_per_s": round(n / dt, 1),
        "seconds": round(dt, 2),
    }
    for k in (
        "h2d_ns",
        "h2d_bytes",
        "h2d_batches",
        "h2d_wait_host_ns",
        "h2d_wait_slot_ns",
        "consumer_wait_ns",
        "unpinned_host_buffers",
    ):
        if k in s:
            out[k] = s[k]
    if s.get("h2d_batches"):
        out["h2d_ms_per_batch"] = round(s["h2d_ns"] / s["h2d_batches"] / 1e6, 3)
        out["h2d_GBps"] = round(s["h2d_bytes"] / max(1, s["h2d_ns"]), 2)
    return out


def main():
    p = argparse.ArgumentParser()
    p.add_argument("root")
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--workers", type=int, default=allowed_cores())
    p.add_argument("--dtype", default="float32")
    p.add_argument("--repeat", type=int, default=0)
    a = p.parse_args()
    for device in ("cuda:0", "cpu"):
        print(json.dumps(run(a.root, device, a.dtype, a.batch, a.steps, a.workers, a.repeat)), flush=True)


if __name__ == "__main__":
    main()
