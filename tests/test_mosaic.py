"""Mosaic (YOLO's four-image mosaic, src/augment/mosaic.rs) and DetectionMixUp (python/trdata/batch_ops.py) on
real JPEGs with a white box drawn in each image and its COCO annotation: pixels against a Pillow composition of the
parts, merged boxes against the white boxes, the draws' distributions, worker counts, bad partners, refusals."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import trdata
from _fixtures import (
    MOSAIC_N,
    MOSAIC_S,
    assert_masks_equal_but_for_ties,
    chi2_same,
    ks_same,
    target_rows,
    targets_with_1_and_3_workers,
    write_mosaic_boxes,
    write_voc,
    write_yolo,
)
from _target_oracle import plan_rows, target_plans
from PIL import Image
from trdata.errors import ConfigError, DecodeError

S, N = MOSAIC_S, MOSAIC_N  # Mosaic(size): the canvas is 96 × 96


@pytest.fixture(scope="module")
def coco(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return write_mosaic_boxes(tmp_path_factory.mktemp("mosaic"))


def rows(loader: Any) -> dict[int, tuple[np.ndarray, dict[str, Any]]]:
    """One epoch: each row's (image, targets) by dataset index (numpy)."""
    out = {}
    for b in loader:
        images = np.asarray(b.images)
        for r, i in enumerate(b.indices.tolist()[: b.valid]):
            t = {k: (v.numpy() if hasattr(v, "numpy") else v) for k, v in b.targets[r].items()}
            out[i] = (images[r], t)
    return out


def test_pixels_are_the_parts_resized_and_placed_and_each_white_box_lands_in_its_merged_box(
    coco: tuple[Path, Path],
) -> None:
    images, ann = coco
    src = trdata.CocoDetection(images, ann)
    kw: dict[str, Any] = dict(batch_size=4, dtype="uint8", layout="NHWC", workers=2, seed=11)
    with trdata.Loader(src, transforms=[trdata.Mosaic(S, fill=114)], **kw) as ld:
        got = rows(ld)
        plans, _ = plan_rows(src, list(range(N)), 0, ld._native)
    worst = 0
    for i, plan in enumerate(plans):
        image, t = got[i]
        assert image.shape == (2 * S, 2 * S, 3)
        want = np.full((2 * S, 2 * S, 3), 114, np.uint8)
        kept = []
        for j, sx, sy, dx, dy, x0, y0, x1, y1 in plan.mosaic:
            part = Image.open(src.paths[j]).convert("RGB")
            rw, rh = round(part.width * sx), round(part.height * sy)
            assert max(rw, rh) == S
            resized = np.asarray(part.resize((rw, rh), Image.BILINEAR))
            bx, by = int(x0 - dx), int(y0 - dy)
            want[y0:y1, x0:x1] = resized[by : by + (y1 - y0), bx : bx + (x1 - x0)]
            # where the white box of part j lands: its bounds in the part's window
            window = image[y0:y1, x0:x1].min(axis=2) > 160
            ys, xs = np.nonzero(window)
            kept.append(
                (j, [xs.min() + x0, ys.min() + y0, xs.max() + 1 + x0, ys.max() + 1 + y0] if len(xs) else None)
            )
        worst = max(worst, int(np.abs(image.astype(int) - want).max()))
        # the merged boxes come in part order, one per part whose box the canvas cut leaves (labels: the parts'
        # categories); each lands on its part's white box, within a pixel
        boxes, labels = t["boxes"], t["labels"].tolist()
        at = 0
        for j, white in kept:
            if at < len(labels) and labels[at] == j + 1 and (white is not None or not _visible(boxes[at])):
                if white is not None:
                    np.testing.assert_allclose(boxes[at], white, atol=1.01)
                at += 1
            else:
                assert white is None, (i, j, labels)  # a visible white box always has its merged box
        assert at == len(labels)
        assert t["image_id"] == i + 1 and tuple(t["size"]) == (2 * S, 2 * S)
    # the kernel resizes as Pillow does (antialiased bilinear, full-size decode); ±1 from its pass order
    assert worst <= 1, worst


def _visible(box: np.ndarray) -> bool:
    """Whether a box is large enough for a pixel of its white to stay above 160 after resampling."""
    return bool(box[2] - box[0] >= 2 and box[3] - box[1] >= 2)


def test_the_rest_of_the_program_moves_the_merged_boxes_as_it_moves_any_rows(coco: tuple[Path, Path]) -> None:
    images, ann = coco
    src = trdata.CocoDetection(images, ann)
    tail = [trdata.RandomAffine(degrees=0, translate=(0.1, 0.1), scale=(0.5, 1.5)), trdata.CenterCrop(S)]
    transforms = [trdata.Mosaic(S), *tail, trdata.RandomHorizontalFlip()]
    with trdata.Loader(src, batch_size=3, transforms=transforms, workers=2, seed=4) as ld:
        got = target_rows(ld)
        idx = list(range(N))
        plans, merged = plan_rows(src, idx, 0, ld._native)
    for i, plan, t in zip(idx, plans, merged):
        moved, keep = plan.boxes(t["boxes"])
        assert keep.all()
        np.testing.assert_array_equal(got[i]["boxes"], moved)
        np.testing.assert_array_equal(got[i]["labels"], t["labels"])
        assert [s[0] for s in plan.steps][:2] == ["RandomAffine", "CenterCrop"]
        assert plan.steps[0][3] == (2 * S, 2 * S)  # the steps start from the canvas


def test_centre_partners_and_gate_are_drawn_uniformly_from_seed_epoch_index(coco: tuple[Path, Path]) -> None:
    images, ann = coco
    src = trdata.CocoDetection(images, ann)
    centres, partners, gates = [], [], []
    with trdata.Loader(src, batch_size=3, transforms=[trdata.Mosaic(S, p=0.5)], workers=1, seed=9) as ld:
        for epoch in range(1300):
            idx = list(range(N))
            parts = ld._native.mosaic_parts(idx, epoch)
            assert parts == ld._native.mosaic_parts(idx, epoch)  # a pure function of (seed, epoch, index)
            gates += [len(p) == 4 for p in parts]
            four = [i for i, p in zip(idx, parts) if len(p) == 4]
            partners += [j for i in four for j in parts[i][1:]]
            plans, _ = plan_rows(src, four, epoch, ld._native)
            # the row's own image ends at the centre: its window's bottom-right corner
            centres += [(p.mosaic[0][7], p.mosaic[0][8]) for p in plans]
    rng = np.random.default_rng(0)
    assert len(centres) >= 5000 and len(partners) >= 10000
    lo, hi = S // 2, 2 * S - S // 2
    ks_same([c[0] for c in centres], rng.integers(lo, hi, 20000).tolist())
    ks_same([c[1] for c in centres], rng.integers(lo, hi, 20000).tolist())
    chi2_same([c[0] for c in centres], rng.integers(lo, hi, 20000).tolist())
    chi2_same(partners, rng.integers(0, N, 20000).tolist())
    chi2_same(gates, (rng.random(20000) < 0.5).tolist())
    # x and y are drawn independently
    assert abs(np.corrcoef(np.array(centres, float).T)[0, 1]) < 0.05


def test_batches_are_identical_for_1_and_3_workers_and_every_row_comes_once(coco: tuple[Path, Path]) -> None:
    images, ann = coco
    src = trdata.CocoDetection(images, ann)
    transforms = [
        trdata.Mosaic(S),
        trdata.RandomAffine(degrees=10, translate=(0.1, 0.1), scale=(0.5, 1.5)),
        trdata.CenterCrop(S),
        trdata.RandomHorizontalFlip(),
        trdata.ColorJitter(0.3, 0.3),
    ]
    kw: dict[str, Any] = dict(batch_size=4, transforms=transforms, seed=5, reproducible=True, shuffle=True)
    runs = targets_with_1_and_3_workers(src, N, **kw)
    for i in range(N):
        for key in ("boxes", "labels", "iscrowd"):
            np.testing.assert_array_equal(runs[0][i][key], runs[1][i][key])
    pixels = []
    for workers in (1, 3):
        with trdata.Loader(src, workers=workers, dtype="uint8", **kw) as ld:
            pixels.append([(b.indices.copy(), np.asarray(b.images).copy()) for b in ld])
    for (ia, xa), (ib, xb) in zip(*pixels):
        np.testing.assert_array_equal(ia, ib)
        np.testing.assert_array_equal(xa, xb)


def test_a_partner_that_fails_to_decode_follows_on_error(tmp_path: Path) -> None:
    bad = 4
    images, ann = write_mosaic_boxes(tmp_path, bad=bad)
    src = trdata.CocoDetection(images, ann)
    kw: dict[str, Any] = dict(batch_size=3, transforms=[trdata.Mosaic(S)], workers=3, seed=2)
    with trdata.Loader(src, on_error="raise", **kw) as ld:
        with pytest.raises(DecodeError) as info:
            for _ in ld:
                pass
        assert info.value.path is not None and info.value.path.endswith(f"{bad:03d}.jpg")
        touched = [i for i, p in enumerate(ld._native.mosaic_parts(list(range(N)), 0)) if bad in p]
        assert touched  # some row's mosaic holds the bad image
    # skip: every row that holds the bad image is replaced by another row's whole mosaic, which decodes
    with trdata.Loader(src, on_error="skip", **kw) as ld:
        delivered = []
        for b in ld:
            delivered += b.indices.tolist()[: b.valid]
        assert len(delivered) == N
        parts = ld._native.mosaic_parts(delivered, 0)
        assert all(bad not in p for p in parts), parts
        assert ld.stats()["errors_skipped"] >= 1


def test_what_mosaic_refuses(coco: tuple[Path, Path]) -> None:
    images, ann = coco
    with pytest.raises(ConfigError) as info:
        trdata.Loader(
            trdata.CocoDetection(images, ann),
            batch_size=2,
            transforms=[trdata.Mosaic(S), trdata.RandomIoUCrop(), trdata.CenterCrop(S)],
        )
    assert "RandomIoUCrop cannot follow a Mosaic" in str(info.value)
    with pytest.raises(ConfigError) as info:
        trdata.Loader(
            trdata.FileList([str(p) for p in sorted(images.iterdir())]),
            batch_size=2,
            views=[[trdata.Mosaic(S)], [trdata.Mosaic(S)]],
        )
    assert info.value.parameter == "views"
    # a classification source is allowed: the row keeps its own label
    paths = [str(p) for p in sorted(images.iterdir())]
    with trdata.Loader(
        trdata.FileList(paths, list(range(N))),
        batch_size=3,
        transforms=[trdata.Mosaic(S), trdata.CenterCrop(S)],
        seed=1,
    ) as ld:
        seen = {i: int(y) for b in ld for i, y in zip(b.indices.tolist(), np.asarray(b.labels).tolist())}
    assert seen == {i: i for i in range(N)}


def test_detection_mixup_mixes_pixels_concatenates_targets_and_draws_r_from_beta(
    coco: tuple[Path, Path],
) -> None:
    images, ann = coco
    src = trdata.CocoDetection(images, ann)
    op = trdata.DetectionMixUp()  # alpha=32, p=1: ultralytics' Beta(32, 32)
    for dtype in ("uint8", "float32"):
        kw: dict[str, Any] = dict(
            batch_size=4,
            transforms=[trdata.Resize((S, S))],
            dtype=dtype,
            layout="NHWC",
            seed=3,
            normalize=None,
        )
        with trdata.Loader(src, **kw) as plain, trdata.Loader(src, batch_ops=[op], **kw) as mixed:
            for a, b in zip(plain, mixed):
                if len(a.indices) == 1:  # no partner: left as it is (the next test)
                    continue
                draw = trdata._core.batch_op_draw(
                    op._spec(), seed=mixed._seed, epoch=b.epoch, batch=mixed._global_batch(b, 0), position=0,
                    rows=len(a.indices), height=S, width=S,
                )  # fmt: skip
                assert draw[0] == 1.0
                r = draw[1]
                x = np.asarray(a.images).astype(np.float64)
                want = r * x + (1 - r) * np.roll(x, 1, axis=0)
                diff = np.asarray(b.images).astype(np.float64) - want
                if dtype == "uint8":  # mixed in float32, truncated as ultralytics' astype
                    assert diff.max() <= 1e-3 and diff.min() > -1.0 - 1e-3
                else:
                    assert np.abs(diff).max() < 1e-3
                for row, t in enumerate(b.targets):
                    prev = a.targets[row - 1]
                    own = a.targets[row]
                    for key in ("boxes", "labels", "iscrowd"):
                        np.testing.assert_array_equal(
                            np.asarray(t[key]), np.concatenate([own[key], prev[key]])
                        )
                    assert t["image_id"] == own["image_id"]
    rs = [
        trdata._core.batch_op_draw(
            op._spec(), seed=1, epoch=0, batch=b, position=0, rows=4, height=8, width=8
        )[1]
        for b in range(10000)
    ]
    ks_same(rs, np.random.default_rng(1).beta(32.0, 32.0, 20000).tolist())
    gates = [
        trdata._core.batch_op_draw(
            trdata.DetectionMixUp(p=0.3)._spec(),
            seed=1,
            epoch=0,
            batch=b,
            position=0,
            rows=4,
            height=8,
            width=8,
        )[0]
        for b in range(10000)
    ]
    chi2_same(gates, (np.random.default_rng(2).random(20000) < 0.3).astype(float).tolist())


def test_detection_mixup_leaves_a_batch_of_one_row_as_it_is(coco: tuple[Path, Path]) -> None:
    """A row without a partner (batch_size=1, a last partial batch of one) is not mixed with itself: its boxes are
    not doubled and its pixels are the plain loader's."""
    images, ann = coco
    src = trdata.CocoDetection(images, ann)
    for batch_size in (1, len(src) - 1):  # every batch of one, or a last partial batch of one
        kw: dict[str, Any] = dict(
            batch_size=batch_size, transforms=[trdata.Resize((S, S))], seed=3, normalize=None
        )
        with (
            trdata.Loader(src, **kw) as plain,
            trdata.Loader(src, batch_ops=[trdata.DetectionMixUp()], **kw) as mixed,
        ):
            pairs = list(zip(plain, mixed))
        ones = [(a, b) for a, b in pairs if len(a.indices) == 1]
        assert ones
        for a, b in ones:
            np.testing.assert_array_equal(np.asarray(b.images), np.asarray(a.images))
            np.testing.assert_array_equal(
                np.asarray(b.targets[0]["boxes"]), np.asarray(a.targets[0]["boxes"])
            )


def test_detection_mixup_on_torch_tensors_equals_numpy() -> None:
    """The CUDA loaders' path (torch tensors; run here on CPU tensors) gives the numpy path's images and targets."""
    torch = pytest.importorskip("torch")
    from trdata.batch_ops import _detection_mixup

    rng = np.random.default_rng(5)
    targets = [
        {
            "boxes": rng.random((k, 4)).astype(np.float32),
            "labels": np.arange(k),
            "size": (8, 8),
            "image_id": k,
        }
        for k in (2, 0, 3)
    ]
    t_targets = [
        {**t, "boxes": torch.from_numpy(t["boxes"]), "labels": torch.from_numpy(t["labels"])} for t in targets
    ]
    for dtype in (np.uint8, np.float32):
        x = (rng.random((3, 8, 8, 3)) * 255).astype(dtype)
        a, ta = _detection_mixup([1.0, 0.37], x, targets)
        b, tb = _detection_mixup([1.0, 0.37], torch.from_numpy(x), t_targets)
        np.testing.assert_array_equal(a, b.numpy())
        for u, v in zip(ta, tb):
            np.testing.assert_array_equal(u["boxes"], v["boxes"].numpy())
            np.testing.assert_array_equal(u["labels"], v["labels"].numpy())
    same, kept = _detection_mixup([0.0, 0.37], x, targets)  # the gate stayed shut
    assert same is x and kept is targets


# --- instance masks and keypoints under a Mosaic -------------------------------------------------------------------

KP = 5  # keypoints per instance


def write_instances(root: Path, n: int = N) -> Path:
    """``n`` JPEGs of varied sizes (long sides S/2 to 2S) and a COCO file of instances with masks (polygons, one
    compressed RLE per image) whose boxes are their masks' bounds (pycocotools' ``toBbox``), and ``KP`` keypoints
    each, some off the image, some unlabelled; image 2 has no annotations."""
    mask_api = pytest.importorskip("pycocotools.mask")
    rng = np.random.default_rng(5)
    (root / "images").mkdir(parents=True)
    images, anns = [], []
    for k in range(n):
        w, h = int(rng.integers(S // 2, 2 * S - 1)), int(rng.integers(S // 2, 2 * S - 1))
        Image.fromarray(rng.integers(0, 255, (h, w, 3)).astype(np.uint8)).save(
            root / "images" / f"{k:03d}.jpg"
        )
        images.append({"id": k + 1, "file_name": f"{k:03d}.jpg", "width": w, "height": h})
        for a in range(0 if k == 2 else int(rng.integers(1, 5))):
            if a == 0:  # a compressed RLE: a rectangle
                m = np.zeros((h, w), np.uint8, order="F")
                x0, y0 = int(rng.integers(0, w - 4)), int(rng.integers(0, h - 4))
                m[y0 : y0 + int(rng.integers(3, h // 2)), x0 : x0 + int(rng.integers(3, w // 2))] = 1
                rle = mask_api.encode(np.asfortranarray(m))
                seg: Any = {"size": [h, w], "counts": rle["counts"].decode()}
            else:  # a polygon around a random centre
                cx, cy, r = rng.uniform(0, w), rng.uniform(0, h), rng.uniform(4, max(w, h) / 3)
                t = np.sort(rng.uniform(0, 2 * np.pi, int(rng.integers(3, 9))))
                seg = [[float(round(v, 2)) for a_ in t for v in (cx + r * np.cos(a_), cy + r * np.sin(a_))]]
                rle = mask_api.merge(mask_api.frPyObjects(seg, h, w))
            pts = np.stack(
                [rng.uniform(-3, w + 3, KP), rng.uniform(-3, h + 3, KP), rng.integers(0, 3, KP)], 1
            )
            anns.append(
                {
                    "id": len(anns) + 1,
                    "image_id": k + 1,
                    "category_id": int(rng.integers(1, 4)),
                    "iscrowd": 0,
                    "segmentation": seg,
                    "bbox": [float(v) for v in mask_api.toBbox(rle)],
                    "area": float(mask_api.area(rle)),
                    "keypoints": [float(round(v, 2)) for v in pts.reshape(-1)],
                    "num_keypoints": int((pts[:, 2] > 0).sum()),
                }
            )
    names = [f"k{p}" for p in range(KP)]
    cats = [{"id": c, "name": f"c{c}", "supercategory": "x", "keypoints": names} for c in (1, 2, 3)]
    ann = root / "instances.json"
    ann.write_text(json.dumps({"images": images, "annotations": anns, "categories": cats}))
    return ann


@pytest.fixture(scope="module")
def instances(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("mosaic_instances")
    ann = write_instances(root)
    return root / "images", ann


def nearest(j: np.ndarray, n: int, m: int) -> np.ndarray:
    """ATen's nearest source index of output indices ``j`` of a resize from ``n`` to ``m`` pixels (float32)."""
    if n == m:
        return j
    if m == 2 * n:
        return j >> 1
    s = np.float32(n) / np.float32(m)
    return np.minimum(np.floor(j.astype(np.float32) * s).astype(np.int64), n - 1)


def paste(full: np.ndarray, part: tuple[Any, ...], side: int) -> np.ndarray:
    """A part's full-size mask on the ``side × side`` canvas: nearest-resized, only its window set."""
    _, sx, sy, dx, dy, x0, y0, x1, y1 = part
    h, w = full.shape
    rw, rh = round(w * sx), round(h * sy)
    out = np.zeros((side, side), np.uint8)
    ys = nearest(np.arange(y0, y1) - int(dy), h, rh)
    xs = nearest(np.arange(x0, x1) - int(dx), w, rw)
    out[y0:y1, x0:x1] = full[np.ix_(ys, xs)]
    return out


def coco_reference(ann: Path, plan: Any) -> dict[str, np.ndarray]:
    """A mosaic row's instances on its canvas, built from the COCO file with pycocotools (not trdata's merge):
    each part's boxes scaled, shifted and clipped to its window (empty ones dropped), its masks decoded full-size
    and pasted (``paste``), its keypoints mapped with visibility 0 outside the window; in part order."""
    mask_api = pytest.importorskip("pycocotools.mask")
    data = json.loads(ann.read_text())
    side = 2 * S
    out: dict[str, list[Any]] = {
        "boxes": [],
        "labels": [],
        "masks": [],
        "keypoints": [],
        "clipped": [],
        "hidden": [],
    }
    for part in plan.mosaic:
        j, sx, sy, dx, dy, x0, y0, x1, y1 = part
        image = data["images"][j]  # ids 1..N in file order: dataset index j is id j + 1
        h, w = image["height"], image["width"]
        for a in (a for a in data["annotations"] if a["image_id"] == image["id"]):
            bx, by, bw, bh = a["bbox"]
            placed = np.array([bx * sx + dx, by * sy + dy, (bx + bw) * sx + dx, (by + bh) * sy + dy])
            box = np.clip(placed, [x0, y0] * 2, [x1, y1] * 2)
            if box[2] <= box[0] or box[3] <= box[1]:
                continue
            out["clipped"].append(bool((box != placed).any()))
            seg = a["segmentation"]
            rle = mask_api.merge(mask_api.frPyObjects(seg, h, w)) if isinstance(seg, list) else seg
            full = mask_api.decode(
                rle if isinstance(seg, list) else {"size": [h, w], "counts": seg["counts"]}
            )
            kp = np.array(a["keypoints"], np.float64).reshape(-1, 3)
            x, y = kp[:, 0] * sx + dx, kp[:, 1] * sy + dy
            inside = (x >= x0) & (x < x1) & (y >= y0) & (y < y1)
            out["boxes"].append(box)
            out["labels"].append(a["category_id"])
            out["masks"].append(paste(full, part, side))
            out["keypoints"].append(np.stack([x, y, np.where(inside, kp[:, 2], 0)], 1))
            out["hidden"].append(int((~inside & (kp[:, 2] > 0)).sum()))
    return {
        "boxes": np.array(out["boxes"], np.float32).reshape(-1, 4),
        "labels": np.array(out["labels"], np.int64),
        "masks": np.array(out["masks"], np.uint8).reshape(-1, side, side),
        "keypoints": np.array(out["keypoints"], np.float64).reshape(-1, KP, 3),
        "clipped": np.array(out["clipped"], bool),
        "hidden": np.array(out["hidden"], np.int64),
    }


def torchvision_moved(ref: dict[str, np.ndarray], plan: Any) -> dict[str, np.ndarray]:
    """``ref`` (instances on the canvas) moved through the plan's drawn ops with torchvision v2's functional
    kernels (masks nearest, zero fill) and its SanitizeBoundingBoxes; keypoints off the output canvas invisible."""
    torch = pytest.importorskip("torch")
    tv = pytest.importorskip("torchvision")
    from torchvision import tv_tensors
    from torchvision.transforms.v2 import functional as F

    side = 2 * S
    boxes = tv_tensors.BoundingBoxes(torch.from_numpy(ref["boxes"]), format="XYXY", canvas_size=(side, side))
    masks = tv_tensors.Mask(torch.from_numpy(ref["masks"]))
    kp = tv_tensors.KeyPoints(
        torch.from_numpy(ref["keypoints"][..., :2].reshape(-1, 2)), canvas_size=(side, side)
    )
    idx = torch.arange(len(ref["labels"]))
    near = F.InterpolationMode.NEAREST
    for name, v, _ in plan.draws:
        if name == "RandomHorizontalFlip":
            boxes, masks, kp = (F.horizontal_flip(x) for x in (boxes, masks, kp))
        elif name == "RandomAffine":
            angle, tx, ty, scale, shx, shy = v
            boxes, masks, kp = (
                F.affine(x, angle, [tx, ty], scale, [shx, shy], interpolation=near, fill=0)
                for x in (boxes, masks, kp)
            )
        elif name == "SanitizeBoundingBoxes":
            s = tv.transforms.v2.SanitizeBoundingBoxes(
                min_size=2, labels_getter=lambda d: (d["labels"], d["idx"])
            )
            kept = s({"boxes": boxes, "labels": torch.from_numpy(ref["labels"])[idx], "idx": idx})
            keep = torch.isin(idx, kept["idx"])
            boxes, masks, idx = kept["boxes"], masks[keep], kept["idx"]
            kp = tv_tensors.wrap(kp.reshape(-1, KP, 2)[keep].reshape(-1, 2), like=kp)
        else:
            raise AssertionError(f"no reference for {name}")
    h, w = masks.shape[-2:]
    xy = kp.reshape(-1, KP, 2).numpy()
    on = (xy[..., 0] >= 0) & (xy[..., 0] < w) & (xy[..., 1] >= 0) & (xy[..., 1] < h)
    vis = np.where(on, ref["keypoints"][idx.numpy(), :, 2], 0)
    return {
        "boxes": boxes.numpy(),
        "labels": ref["labels"][idx.numpy()],
        "masks": masks.numpy(),
        "keypoints": np.concatenate([xy, vis[..., None]], axis=-1),
    }


MOSAIC_FLIP = [
    trdata.Mosaic(S, p=0.8),
    trdata.RandomHorizontalFlip(),
    trdata.SanitizeBoundingBoxes(min_size=2),
]
MOSAIC_AFFINE = [
    trdata.Mosaic(S),
    trdata.RandomAffine(degrees=15, translate=(0.1, 0.1), scale=(0.6, 1.3)),
    trdata.RandomHorizontalFlip(),
    trdata.SanitizeBoundingBoxes(min_size=2),
]


@pytest.mark.parametrize("warp", [False, True], ids=["flip", "affine"])
def test_masks_and_keypoints_are_the_parts_nearest_resized_in_their_windows_then_moved_as_torchvision_moves_them(
    instances: tuple[Path, Path], warp: bool
) -> None:
    images, ann = instances
    src = trdata.CocoDetection(images, ann, masks=True, keypoints=True)
    transforms = MOSAIC_AFFINE if warp else MOSAIC_FLIP
    seen = {"dropped": 0, "clipped": 0, "hidden": 0, "single": 0}
    with trdata.Loader(src, batch_size=4, transforms=transforms, workers=2, seed=3) as ld:
        for _ in range(3):
            for b in ld:
                idx = b.indices.tolist()[: b.valid]
                plans, _ = plan_rows(src, idx, b.epoch, ld._native)
                for r, (i, plan) in enumerate(zip(idx, plans)):
                    got = {k: (v.numpy() if hasattr(v, "numpy") else v) for k, v in b.targets[r].items()}
                    assert "part" not in got and got["image_id"] == i + 1
                    ref = coco_reference(ann, plan)
                    want = torchvision_moved(ref, plan)
                    seen["dropped"] += len(ref["labels"]) - len(want["labels"])
                    seen["single"] += len(plan.mosaic) == 1
                    seen["hidden"] += int(ref["hidden"].sum())
                    seen["clipped"] += int(ref["clipped"].sum())
                    np.testing.assert_array_equal(got["labels"], want["labels"])
                    np.testing.assert_allclose(got["boxes"], want["boxes"], atol=1e-3)
                    assert got["masks"].shape == want["masks"].shape and got["masks"].dtype == np.uint8
                    if warp:
                        assert_masks_equal_but_for_ties(got["masks"], want["masks"])
                    else:
                        np.testing.assert_array_equal(got["masks"], want["masks"])
                    # a row whose parts hold no instance has no keypoints either: (0, 0, 3)
                    assert got["keypoints"].shape in {(len(want["labels"]), KP, 3), (0, 0, 3)}
                    if len(want["labels"]):
                        np.testing.assert_allclose(
                            got["keypoints"][..., :2], want["keypoints"][..., :2], atol=1e-3
                        )
                        np.testing.assert_array_equal(got["keypoints"][..., 2], want["keypoints"][..., 2])
    # instances cut by their windows, dropped by SanitizeBoundingBoxes, keypoints hidden by the window
    assert seen["dropped"] > 0 and seen["hidden"] > 0 and seen["clipped"] > 0, seen
    if not warp:
        assert seen["single"] > 0, seen


def test_a_pack_of_the_source_gives_the_same_masks_and_keypoints_and_workers_change_nothing(
    instances: tuple[Path, Path], tmp_path: Path
) -> None:
    """The same seed gives the same batches (targets: boxes, labels, masks, keypoints) for 1 and 2 workers, each
    row exactly once, and a pack of the source (``trdata.pack`` → ``trdata.Packed``) gives them too."""
    images, ann = instances
    src = trdata.CocoDetection(images, ann, masks=True, keypoints=True)
    trdata.pack(src, tmp_path / "coco.trd", progress=False)
    kw: dict[str, Any] = dict(batch_size=4, transforms=MOSAIC_AFFINE, seed=8, reproducible=True, shuffle=True)
    runs = []
    for source, workers in [(src, 1), (src, 2), (trdata.Packed(tmp_path / "coco.trd"), 2)]:
        with trdata.Loader(source, workers=workers, **kw) as ld:
            for epoch in range(2):
                seen = []
                for b in ld:
                    seen += b.indices.tolist()[: b.valid]
                    runs.append((b.indices.copy(), [dict(b.targets[r]) for r in range(b.valid)]))
                assert sorted(seen) == list(range(N)), (workers, epoch)
    per_run = len(runs) // 3
    for other in (runs[per_run : 2 * per_run], runs[2 * per_run :]):
        for (ia, ta), (ib, tb) in zip(runs[:per_run], other):
            np.testing.assert_array_equal(ia, ib)
            for a, b in zip(ta, tb):
                assert a.keys() == b.keys() and "masks" in a and "keypoints" in a and "part" not in a
                for k in a:
                    va, vb = (np.asarray(v.numpy() if hasattr(v, "numpy") else v) for v in (a[k], b[k]))
                    assert va.dtype == vb.dtype and va.shape == vb.shape, k
                    np.testing.assert_array_equal(va, vb, err_msg=k)


def test_yolo_masks_under_a_mosaic_are_the_parts_masks_pasted_and_flipped(tmp_path: Path) -> None:
    """YoloDetection(masks=True): each delivered mask is its part's (the source's own RLE, decoded by
    pycocotools) nearest-resized into the part's window on the canvas, mirrored as torchvision mirrors a Mask, in
    the order of the merged boxes."""
    mask_api = pytest.importorskip("pycocotools.mask")
    torch = pytest.importorskip("torch")
    from torchvision import tv_tensors
    from torchvision.transforms.v2 import functional as F

    write_yolo(tmp_path)
    src = trdata.YoloDetection(tmp_path, "train", masks=True)
    n = len(src)
    total = 0
    with trdata.Loader(
        src, batch_size=3, transforms=[trdata.Mosaic(S), trdata.RandomHorizontalFlip()], seed=6
    ) as ld:
        for b in ld:
            idx = b.indices.tolist()[: b.valid]
            plans, _ = plan_rows(src, idx, b.epoch, ld._native)
            for r, plan in enumerate(plans):
                want, boxes = [], []
                for part in plan.mosaic:
                    j, sx, sy, dx, dy, x0, y0, x1, y1 = part
                    w, h = (int(v) for v in src._sizes[j])
                    t = src._image_targets(int(j))
                    for box, rle in zip(t["boxes"], t["masks"]):
                        bx = np.clip(
                            box * (sx, sy, sx, sy) + (dx, dy, dx, dy), (x0, y0, x0, y0), (x1, y1, x1, y1)
                        )
                        if bx[2] > bx[0] and bx[3] > bx[1]:
                            want.append(paste(mask_api.decode({"size": [h, w], "counts": rle}), part, 2 * S))
                            boxes.append(bx)
                masks = np.array(want, np.uint8).reshape(-1, 2 * S, 2 * S)
                xyxy = np.array(boxes, np.float64).reshape(-1, 4)
                if any(name == "RandomHorizontalFlip" for name, _, _ in plan.draws):
                    masks = F.horizontal_flip(tv_tensors.Mask(torch.from_numpy(masks))).numpy()
                    xyxy = np.stack([2 * S - xyxy[:, 2], xyxy[:, 1], 2 * S - xyxy[:, 0], xyxy[:, 3]], 1)
                got = b.targets[r]["masks"].numpy()
                np.testing.assert_array_equal(got, masks)
                np.testing.assert_allclose(b.targets[r]["boxes"].numpy(), xyxy, atol=1e-3)
                assert len(got) == len(b.targets[r]["boxes"]) and "part" not in b.targets[r]
                total += len(got)
    assert total > n  # the rows hold their partners' instances too


def test_label_maps_under_a_mosaic_are_the_parts_maps_pasted_on_ignore_and_a_pack_gives_the_same(
    tmp_path: Path,
) -> None:
    """SegmentationFolder: a mosaic row's map is 255 (ignore) on the canvas but for each part's window, which holds
    the part's map nearest-resized as its pixels, then mirrored as torchvision mirrors a Mask; a pack of the folder
    gives the same maps."""
    torch = pytest.importorskip("torch")
    from torchvision import tv_tensors
    from torchvision.transforms.v2 import functional as F

    write_voc(tmp_path)
    voc = trdata.SegmentationFolder(tmp_path / "JPEGImages", tmp_path / "SegmentationClass")
    trdata.pack(voc, tmp_path / "voc.trd", progress=False)
    kw: dict[str, Any] = dict(
        batch_size=3, transforms=[trdata.Mosaic(S, p=0.8), trdata.RandomHorizontalFlip()], seed=2
    )
    got = []
    for source in (voc, trdata.Packed(tmp_path / "voc.trd")):
        with trdata.Loader(source, **kw) as ld:
            rows_ = {}
            for b in ld:
                idx = b.indices.tolist()[: b.valid]
                for r, plan in enumerate(target_plans(voc, idx, b.epoch, ld._native)):
                    want = np.full((2 * S, 2 * S), 255, np.uint8)
                    for part in plan.mosaic:
                        covered = paste(np.ones_like(voc.label_map(part[0])), part, 2 * S).astype(bool)
                        want[covered] = paste(voc.label_map(part[0]), part, 2 * S)[covered]
                    if any(name == "RandomHorizontalFlip" for name, _, _ in plan.draws):
                        want = F.horizontal_flip(tv_tensors.Mask(torch.from_numpy(want))).numpy()
                    mask = np.asarray(b.targets[r]["mask"])
                    np.testing.assert_array_equal(mask, want)
                    rows_[idx[r]] = mask
            got.append(rows_)
    assert got[0].keys() == got[1].keys() == set(range(len(voc)))
    for i in got[0]:
        np.testing.assert_array_equal(got[0][i], got[1][i])
