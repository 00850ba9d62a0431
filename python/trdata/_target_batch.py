"""A batch's targets, as the core delivers them, turned into torchvision's per-image dicts.

The loader's workers make every row's targets beside its image (src/sample/: read from the source's target store,
moved with the row's own geometry, a Mosaic's parts merged) and the core hands the batch's targets over as ragged
columns: one flat array per field in row order, with per-row counts (``counts``: instances K, ``points``: keypoints
P; masks split by K·H·W and label maps by H·W, H and W the row's ``size``). Here they are only sliced: each row's
arrays are views of the columns (numpy), or of one host-to-device copy per column (torch on a device). No file is
read and nothing is computed per row on the training thread.

Per-image dict (``batch.targets[i]``), torchvision's detection/segmentation target form: instances ``boxes``
(float32 ``(K, 4)`` XYXY on the output canvas), ``labels``, ``iscrowd`` (int64 ``(K,)``), with masks ``masks``
(uint8 ``(K, H, W)``), with keypoints ``keypoints`` (float32 ``(K, P, 3)``); a label map ``mask`` (uint8
``(H, W)``); always ``image_id`` (int), ``orig_size`` and ``size`` ((height, width) ints).
"""

from __future__ import annotations

from typing import Any

import numpy as np


def _bounds(sizes: np.ndarray) -> list[int]:
    """Split points of a flat array whose rows hold ``sizes`` elements each."""
    return np.cumsum(sizes)[:-1].tolist()


def per_image(cols: dict[str, Any], device: Any = None, as_torch: bool = False) -> list[dict[str, Any]]:
    """The rows' dicts (module docs) from the core's columns: numpy views, or torch tensors (``as_torch``) on
    ``device`` (one copy per column, through pinned memory for CUDA: a copy from pageable memory would wait for
    the stream's queued work)."""
    size = cols["size"]
    hw = size[:, 0] * size[:, 1]
    split: dict[
        str, tuple[np.ndarray, list[int], tuple[int, ...]]
    ] = {}  # field → (flat, bounds, row shape tail)
    if cols["kind"] == "instances":
        counts = cols["counts"]
        split["boxes"] = (cols["boxes"], _bounds(counts), (4,))
        split["labels"] = (cols["labels"], _bounds(counts), ())
        split["iscrowd"] = (cols["iscrowd"], _bounds(counts), ())
        if "masks" in cols:
            split["masks"] = (cols["masks"], _bounds(counts * hw), ())
        if "keypoints" in cols:
            split["keypoints"] = (cols["keypoints"], _bounds(counts * cols["points"]), (3,))
    else:
        split["mask"] = (cols["label_map"], _bounds(hw), ())
    rows: dict[str, list[Any]] = {}
    for field, (flat, bounds, _) in split.items():
        if as_torch:
            import torch

            t = torch.from_numpy(flat)
            if device is not None and torch.device(device).type != "cpu":
                t = t.pin_memory().to(device, non_blocking=True)
            rows[field] = list(torch.tensor_split(t, bounds))
        else:
            rows[field] = np.split(flat, bounds)
    ids = cols["image_id"].tolist()
    orig = [tuple(s) for s in cols["orig_size"].tolist()]
    sizes = [tuple(s) for s in size.tolist()]
    k = cols["counts"].tolist() if "counts" in cols else None
    p = cols["points"].tolist() if "points" in cols else None
    out = []
    for r, (h, w) in enumerate(sizes):
        row: dict[str, Any] = {}
        for field, (_, _, tail) in split.items():
            v = rows[field][r]
            if field == "masks":
                row[field] = v.reshape(k[r], h, w)  # type: ignore[index]
            elif field == "keypoints":
                row[field] = v.reshape(k[r], p[r], 3)  # type: ignore[index]
            elif field == "mask":
                row[field] = v.reshape(h, w)
            else:
                row[field] = v.reshape(-1, *tail) if tail else v
        row["image_id"] = ids[r]
        row["orig_size"] = orig[r]
        row["size"] = (h, w)
        out.append(row)
    return out
