"""A Parquet source's first batches on cuda:0 equal a CPU loader's (same seed, same recipe): the device row's check.

python benches/tools/parquet_check.py FILE.parquet
"""

from __future__ import annotations

import sys

import numpy as np
import torch
import trdata


def batches(path: str, device: str) -> list[tuple[np.ndarray, np.ndarray]]:
    recipe = [trdata.RandomResizedCrop(224), trdata.RandomHorizontalFlip()]
    out = []
    with trdata.Loader(
        trdata.Parquet(path), batch_size=32, transforms=recipe, device=device, seed=3
    ) as loader:
        for k, b in enumerate(loader):
            out.append((torch.as_tensor(b.images).cpu().numpy(), torch.as_tensor(b.labels).cpu().numpy()))
            if k == 2:
                break
    return out


def main() -> int:
    path = sys.argv[1]
    cpu, gpu = batches(path, "cpu"), batches(path, "cuda:0")
    for (ci, cl), (gi, gl) in zip(cpu, gpu):
        assert np.array_equal(cl, gl), "labels differ"
        assert np.array_equal(ci, gi), f"pixels differ: max |Δ| {np.abs(ci - gi).max()}"
    print(f"parquet_check: {len(cpu)} batches equal on cuda:0 and cpu, labels {cpu[0][1][:8].tolist()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
