#!/usr/bin/env python3
"""GPU JPEG decode ceilings on the device machine: how fast the H200's hardware JPEG engines and
nvJPEG's CUDA backend decode the ImageNet sample through trdata's batch decoder (whole images and the centred
region a RandomResizedCrop typically needs), next to torchvision's batched ``decode_jpeg(device='cuda')`` and
trdata's CPU decode ceiling on every core, same files, one run.

    PYTHONPATH=<wheel dir> python3 benches/micro/gpu_decode.py --data devcarry/data [--batch 128] [--rounds 5]

Reports img/s (decode only, into device memory; no resize). Reported, never asserted.
"""

from __future__ import annotations

import argparse
import glob
import os
import time

from trdata import _bench
from trdata._cuda_libs import nvjpeg as _nvjpeg


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", required=True)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args()
    paths = sorted(p for p in glob.glob(os.path.join(a.data, "**", "*"), recursive=True) if os.path.isfile(p))
    files = [open(p, "rb").read() for p in paths]
    n = len(files)
    print(f"{n} files, {sum(map(len, files)) / 1e6:.1f} MB; nvJPEG {_nvjpeg.probe()['found']}")
    rows = []
    for name, hw, roi in (
        ("nvJPEG hardware engines, whole image", True, None),
        ("nvJPEG hardware engines, centred 0.6 region (ROI)", True, 0.6),
        ("nvJPEG CUDA backend, whole image", False, None),
    ):
        s, done, refused, (check, submit, wait) = _nvjpeg.decode_batches(files, 0, hw, a.batch, a.rounds, roi)
        per = 1e6 / max(done, 1)
        phases = f"µs/img: check {check * per:.0f}, submit {submit * per:.0f}, wait {wait * per:.0f}"
        rows.append(
            (
                name,
                done / s,
                f"{done // a.rounds} of {n} per pass; refused {dict(refused) or 'none'}; {phases}",
            )
        )
    try:
        import torch
        from torchvision.io import decode_jpeg

        tensors = [torch.frombuffer(bytearray(f), dtype=torch.uint8) for f in files]
        ok = []
        for t in tensors:
            try:
                decode_jpeg(t, device="cuda")
                ok.append(t)
            except RuntimeError:
                pass
        for _ in range(2):
            for i in range(0, len(ok), a.batch):
                decode_jpeg(ok[i : i + a.batch], device="cuda")
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(a.rounds):
            for i in range(0, len(ok), a.batch):
                decode_jpeg(ok[i : i + a.batch], device="cuda")
        torch.cuda.synchronize()
        rows.append(
            (
                "torchvision decode_jpeg(device='cuda'), batched",
                len(ok) * a.rounds / (time.perf_counter() - t0),
                f"{len(ok)} of {n} decodable",
            )
        )
    except ImportError as e:
        rows.append(("torchvision decode_jpeg(device='cuda')", 0.0, f"not installed: {e}"))
    cores = len(_bench.allowed_cpus())
    m = _bench.decode_ceiling([p for p in paths], cores, repeat=a.rounds)
    rows.append(
        (f"CPU decode ceiling (libjpeg-turbo, {cores} threads, full size)", m.img_per_s, m.note or "")
    )
    for name, rate, note in rows:
        print(f"  {name:<58} {rate:>9,.0f} img/s  {note}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
