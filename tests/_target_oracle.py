"""An independent oracle of the loader's target stage, for tests: the rows' plans replayed from Python
(``NativeLoader.target_plans``, ``mosaic_parts``) and a Mosaic's parts merged in numpy, as the package did on the
training thread before the workers made the targets (src/sample/). The tests compare the workers' targets with
what this second implementation makes of the same plans."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np


def target_plans(source: Any, idx: list[int], epoch: int, native_loader: Any) -> list[Any]:
    """Each row's ``TargetPlan``; when the transforms start with a Mosaic, made with its parts' image sizes (its
    ``mosaic`` then lists the parts). ``source._sizes[i]`` is image ``i``'s (width, height)."""
    sizes = [(int(w), int(h)) for w, h in source._sizes[idx]]
    parts = native_loader.mosaic_parts(idx, epoch)
    part_sizes = None if parts is None else [[(int(w), int(h)) for w, h in source._sizes[p]] for p in parts]
    return native_loader.target_plans(idx, epoch, sizes, part_sizes)


def plan_rows(
    source: Any,
    idx: list[int],
    epoch: int,
    native_loader: Any,
    image_targets: Callable[[int], dict[str, Any]] | None = None,
) -> tuple[list[Any], list[dict[str, Any]]]:
    """Each row's ``TargetPlan`` and its annotations in the plan's input pixels: the image's own
    (``image_targets(i)``, by default ``source._image_targets(i)``), or, when the transforms start with a Mosaic,
    its parts' merged on the canvas (module docs)."""
    of = source._image_targets if image_targets is None else image_targets
    plans = target_plans(source, idx, epoch, native_loader)
    rows = [mosaic_targets(of, p) if p.mosaic else of(i) for p, i in zip(plans, idx)]
    return plans, rows


def mosaic_targets(image_targets: Callable[[int], dict[str, Any]], plan: Any) -> dict[str, np.ndarray]:
    """A mosaic row's annotations on its canvas (module docs): every per-instance field of the parts'
    ``image_targets(j)``, concatenated in part order, boxes (XYXY float64) mapped and clipped, keypoints (float64
    ``(K, P, 3)``) mapped with visibility 0 outside the part's window and padded to the row's largest P (zeros),
    and ``part`` (int64: which part of ``plan.mosaic`` each instance came from)."""
    rows = []
    for k, (j, sx, sy, dx, dy, x0, y0, x1, y1) in enumerate(plan.mosaic):
        t = image_targets(int(j))
        b = np.asarray(t["boxes"], np.float64).reshape(-1, 4) * (sx, sy, sx, sy) + (dx, dy, dx, dy)
        b = np.clip(b, (x0, y0, x0, y0), (x1, y1, x1, y1))
        keep = (b[:, 2] > b[:, 0]) & (b[:, 3] > b[:, 1])
        row = {**{f: np.asarray(v)[keep] for f, v in t.items()}, "boxes": b[keep]}
        row["part"] = np.full(len(row["boxes"]), k, np.int64)
        if "keypoints" in row:
            kp = np.asarray(row["keypoints"], np.float64)
            x, y = kp[..., 0] * sx + dx, kp[..., 1] * sy + dy
            inside = (x >= x0) & (x < x1) & (y >= y0) & (y < y1)
            row["keypoints"] = np.stack([x, y, np.where(inside, kp[..., 2], 0.0)], axis=-1)
        rows.append(row)
    if "keypoints" in rows[0]:
        p = max(r["keypoints"].shape[1] for r in rows)
        for r in rows:
            kp = r["keypoints"]
            r["keypoints"] = np.concatenate([kp, np.zeros((len(kp), p - kp.shape[1], 3))], axis=1)
    return {f: np.concatenate([r[f] for r in rows]) for f in rows[0]}
