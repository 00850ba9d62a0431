"""A batch's targets, as the core delivers them, turned into torchvision's per-image dicts.

The loader's workers make every row's targets beside its image (src/sample/: read from the source's target store,
moved with the row's own geometry, a Mosaic's parts merged) and the core hands the batch's targets over as ragged
columns: one flat array per field in row order, with per-row counts (``counts``: instances K, ``points``: keypoints
P); the dense fields (instance masks, label maps) come as the workers' own per-row buffers, not concatenated.
Here they are only sliced or reshaped: each row's arrays are views of the columns or buffers (numpy, torch on the
CPU), or of one host-to-device copy per field (torch on a device). No file is read and nothing is computed per
row on the training thread.

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
    return [int(v) for v in np.cumsum(sizes)[:-1]]


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
    on_device = as_torch and device is not None and _is_device(device)
    rows: dict[str, list[Any]] = {}
    for field, (flat, bounds, _) in split.items():
        if isinstance(flat, list) and not on_device:  # per-row buffers: used as they are
            rows[field] = [_torch_of(a) for a in flat] if as_torch else flat
            continue
        if isinstance(flat, list):  # one copy to the device for the field: the rows' buffers gathered once
            flat = np.concatenate(flat) if flat else np.zeros(0, np.uint8)
        if as_torch:
            import torch

            t = torch.from_numpy(flat)
            if on_device:
                # through pinned memory: a copy from pageable memory would wait for the stream's queued work
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


def _is_device(device: Any) -> bool:
    import torch

    return torch.device(device).type != "cpu"


def _torch_of(a: np.ndarray) -> Any:
    import torch

    return torch.from_numpy(a)


def padded(cols: dict[str, Any] | None, targets: list[dict[str, Any]]) -> dict[str, Any]:
    """A batch's instance targets as fixed shapes: ``boxes`` float32 ``(B, Kmax, 4)`` (zeros past each image's
    count), ``labels`` int64 ``(B, Kmax)`` (-1 past the count), ``counts`` int64 ``(B,)``; torch tensors on the
    targets' device when the targets are tensors, else numpy. From the core's columns (``cols``) by one scatter,
    or, for a batch built by hand, from the per-image ``targets``."""
    if cols is None:
        counts = np.array([len(t["boxes"]) for t in targets], np.int64)
        boxes = [np.asarray(t["boxes"].cpu() if hasattr(t["boxes"], "cpu") else t["boxes"]) for t in targets]
        labels = [
            np.asarray(t["labels"].cpu() if hasattr(t["labels"], "cpu") else t["labels"]) for t in targets
        ]
        flat_boxes = np.concatenate(boxes).reshape(-1, 4) if boxes else np.zeros((0, 4), np.float32)
        flat_labels = np.concatenate(labels) if labels else np.zeros(0, np.int64)
    else:
        counts, flat_boxes, flat_labels = cols["counts"], cols["boxes"], cols["labels"]
    b, kmax = len(counts), int(counts.max(initial=0))
    row = np.repeat(np.arange(b), counts)
    pos = np.arange(len(row)) - np.repeat(np.cumsum(counts) - counts, counts)
    out_boxes = np.zeros((b, kmax, 4), np.float32)
    out_labels = np.full((b, kmax), -1, np.int64)
    out_boxes[row, pos] = flat_boxes
    out_labels[row, pos] = flat_labels
    out: dict[str, Any] = {"boxes": out_boxes, "labels": out_labels, "counts": np.asarray(counts, np.int64)}
    if targets and hasattr(targets[0]["boxes"], "device"):
        import torch

        device = targets[0]["boxes"].device
        out = {k: torch.from_numpy(v).to(device) for k, v in out.items()}
    return out
