#!/usr/bin/env python3
"""On the GPU machine: a CUDA loader's pixels and targets (boxes, labels, instance masks) equal the CPU loader's under
torchvision's ``ssd`` recipe (photometric distort, zoom out, IoU crop, flip, sanitize, then Resize((300, 300))), on
the generated COCO-style set over ``--data``'s first 48 images, and the CUDA loader's targets are on the GPU. Exits
non-zero (an AssertionError) when they differ. Run by ``device_detection.sh`` and ``device_sample_whole.sh``.

    python3 benches/tools/cuda_cpu_targets.py --data DIR [--device cuda]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import torch
import trdata

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benches/: the shared `common` package
from common import folder_files  # noqa: E402
from common.coco import write_coco  # noqa: E402

KEYS = ("boxes", "labels", "masks")


def epoch(src: Any, device: str) -> list[tuple[np.ndarray, list[dict[str, Any]]]]:
    tf = [trdata.RandomPhotometricDistort(), trdata.RandomZoomOut(fill=(123, 117, 104)), trdata.RandomIoUCrop(),
          trdata.RandomHorizontalFlip(), trdata.SanitizeBoundingBoxes(), trdata.Resize((300, 300))]  # fmt: skip
    kw = dict(batch_size=16, transforms=tf, seed=3, reproducible=True, dtype="uint8")
    with trdata.Loader(src, device=device, **kw) as loader:
        return [
            (np.stack([np.asarray(torch.as_tensor(x).cpu()) for x in b.image_list()]), b.targets)
            for b in loader
        ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, required=True, help="an ImageFolder (the carried ImageNet sample)")
    ap.add_argument("--device", default="cuda")
    args = ap.parse_args()
    paths, _ = folder_files(str(args.data))
    with tempfile.TemporaryDirectory() as tmp:
        src = trdata.CocoDetection(*write_coco(paths[:48], tmp), masks=True)
        g, c = epoch(src, args.device), epoch(src, "cpu")
    assert len(g) == len(c) > 0, (len(g), len(c))
    first = g[0][1][0]
    kind = torch.device(args.device).type
    assert all(torch.as_tensor(first[k]).device.type == kind for k in ("boxes", "masks")), (
        "targets not on device"
    )
    for n, ((gi, gt), (ci, ct)) in enumerate(zip(g, c)):
        assert np.array_equal(gi, ci), f"batch {n}: pixels differ"
        for r, (a, b) in enumerate(zip(gt, ct)):
            for k in KEYS:
                assert torch.equal(torch.as_tensor(a[k]).cpu(), torch.as_tensor(b[k]).cpu()), (
                    f"batch {n} row {r}: {k}"
                )
    print(f"{args.device} loader: ssd recipe pixels and targets ({', '.join(KEYS)}) equal the CPU loader's over "
          f"{len(g)} batches; targets on {kind}: OK")  # fmt: skip


if __name__ == "__main__":
    main()
