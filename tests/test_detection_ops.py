"""Detection targets through the ops that run after a pixel op (stage 2), against torchvision v2's kernels: each
row's replayed draws (``TargetPlan.draws``, the workers' own) given to torchvision's functional ops on the
wrapped dataset's boxes and masks and on the file's keypoints give trdata's targets — boxes within 1e-3 px,
masks identical (nearest), keypoints within 1e-3 px with points off the canvas invisible. Also: the pixels the
loader delivers are the ones the replayed draws give (a box drawn into the image lands where its box says)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import trdata
from _fixtures import (
    COCO_IMAGES,
    PADDED,
    PREFIX,
    RECIPES,
    apply_op,
    assert_masks_equal_but_for_ties,
    coco_reference,
    ks_same,
    size_of,
    write_coco,
)
from trdata.errors import ConfigError

torch = pytest.importorskip("torch")
torchvision = pytest.importorskip("torchvision")
pytest.importorskip("pycocotools.mask")
from torchvision import tv_tensors  # noqa: E402
from torchvision.transforms.v2 import functional as F  # noqa: E402

NEAR = F.InterpolationMode.NEAREST


@pytest.fixture(scope="module")
def coco_kp(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("coco_kp")
    return root / "images", write_coco(root, keypoints=True)


@pytest.mark.parametrize("recipe", list(RECIPES))
def test_stage2_ops_move_targets_as_torchvisions_kernels_with_the_same_draws(
    coco_kp: tuple[Path, Path], recipe: str
) -> None:
    images, ann = coco_kp
    src = trdata.CocoDetection(images, ann, masks=True, keypoints=True)
    ref = coco_reference(images, ann)
    transforms = [trdata.Resize(PREFIX), *RECIPES[recipe]]
    pad_to = PADDED[recipe][1] if recipe in PADDED else None
    expand = any(getattr(t, "expand", False) for t in RECIPES[recipe])
    seen_ops: set[str] = set()
    for epoch in range(3):
        with trdata.Loader(src, batch_size=4, transforms=transforms, workers=2, seed=3, pad_to=pad_to) as ld:
            ld.set_epoch(epoch)
            for b in ld:
                idx = b.indices.tolist()
                sizes = [tuple(int(v) for v in src._sizes[i]) for i in idx]
                plans = ld._native.target_plans(idx, b.epoch, sizes)
                assert b.image_sizes.tolist() == [list(p.canvas) for p in plans]
                if pad_to is not None:  # each image at the top left of the canvas, zeros elsewhere
                    assert tuple(b.images.shape[-2:]) == pad_to
                    for r, (h, w) in enumerate(b.image_sizes.tolist()):
                        img = np.asarray(b.images[r])
                        assert not img[:, h:, :].any() and not img[:, :, w:].any()
                for r, i in enumerate(idx):
                    _, want = ref[i]
                    got = {k: v.numpy() for k, v in b.targets[r].items() if hasattr(v, "numpy")}
                    got["size"] = b.targets[r]["size"]
                    if "boxes" not in want:
                        assert len(got["boxes"]) == 0
                        continue
                    h0, w0 = (int(v) for v in src._sizes[i][::-1])
                    kp_raw = src._image_targets(i)["keypoints"]
                    boxes = F.resize(want["boxes"], list(PREFIX))
                    masks = F.resize(want["masks"], list(PREFIX), interpolation=NEAR)
                    kp = tv_tensors.KeyPoints(
                        torch.tensor(kp_raw[..., :2].reshape(-1, 2), dtype=torch.float64),
                        canvas_size=(h0, w0),
                    )
                    kp = F.resize(kp, list(PREFIX))
                    labels = want["labels"]
                    for name, v, hw in plans[r].draws:
                        op = name.split("(")[0]  # "Resize((h, w))" is the stage-2 Resize's name
                        seen_ops.add(op)
                        if op == "SanitizeBoundingBoxes":  # drops instances: the whole sample at once
                            ours = next(t for t in RECIPES[recipe] if type(t).__name__ == op)
                            sanitize = torchvision.transforms.v2.SanitizeBoundingBoxes(
                                min_size=ours.min_size, labels_getter=lambda d: (d["labels"], d["kp"])
                            )  # "kp" numbers the instances to follow what it keeps
                            out = sanitize(
                                {
                                    "boxes": boxes,
                                    "masks": masks,
                                    "labels": labels,
                                    "kp": torch.arange(len(labels)),
                                }
                            )
                            keep = out["kp"]
                            boxes, masks, labels = out["boxes"], out["masks"], out["labels"]
                            kp = tv_tensors.wrap(kp.reshape(len(kp_raw), -1, 2)[keep].reshape(-1, 2), like=kp)
                            kp_raw = kp_raw[keep.numpy()]
                            continue
                        size = size_of(op, recipe)
                        boxes = apply_op(op, v, hw, boxes, size, expand)
                        masks = apply_op(op, v, hw, masks, size, expand)
                        kp = apply_op(op, v, hw, kp, size, expand)
                        if op == "RandomRotation" and expand:
                            # torchvision sizes an expanded canvas of boxes/keypoints from the matrix about the
                            # absolute centre, the image's about the relative one: the two can differ by a
                            # pixel. trdata's targets live on the image's canvas (the mask's here).
                            canvas_hw = tuple(masks.shape[-2:])
                            boxes = tv_tensors.wrap(boxes, like=boxes, canvas_size=canvas_hw)
                            kp = tv_tensors.wrap(kp, like=kp, canvas_size=canvas_hw)
                    canvas = plans[r].canvas
                    assert tuple(boxes.canvas_size) == canvas == tuple(got["size"])
                    if pad_to is None:
                        assert canvas == tuple(b.images.shape[-2:])
                    np.testing.assert_allclose(got["boxes"], boxes.numpy(), atol=1e-3)
                    assert_masks_equal_but_for_ties(got["masks"], masks.numpy())
                    np.testing.assert_array_equal(got["labels"], labels.numpy())
                    xy = kp.reshape(kp_raw.shape[0], -1, 2).numpy()
                    np.testing.assert_allclose(got["keypoints"][..., :2], xy, atol=1e-3)
                    inside = (xy[..., 0] >= 0) & (xy[..., 0] < canvas[1]) & (xy[..., 1] >= 0)
                    inside &= xy[..., 1] < canvas[0]
                    np.testing.assert_array_equal(
                        got["keypoints"][..., 2], np.where(inside, kp_raw[..., 2], 0)
                    )
    # every op of the recipe was drawn at least once over 3 epochs of COCO_IMAGES images
    names = {type(t).__name__ for t in RECIPES[recipe]} - {"ColorJitter", "RandomPhotometricDistort"}
    names -= {"RandomChoice", "RandomApply", "RandomOrder"}
    if recipe == "containers":
        names |= {"RandomRotation", "RandomAffine", "RandomVerticalFlip", "RandomPerspective"}
    assert names <= seen_ops | {"RandomHorizontalFlip", "RandomVerticalFlip"}, (names, seen_ops)
    assert COCO_IMAGES > 0


def test_a_box_drawn_into_the_image_lands_where_its_moved_box_says(tmp_path: Path) -> None:
    """The pixels and the targets agree: each image is black with one white rectangle, annotated by its box; after
    the affine/rotation/crop ops the white pixels' bounding box is the moved box (within the resampling's
    pixel)."""
    import json

    from PIL import Image

    (tmp_path / "images").mkdir()
    rng = np.random.default_rng(1)
    images, anns = [], []
    for k in range(6):
        w, h = 96, 80
        x0, y0 = int(rng.integers(20, 40)), int(rng.integers(20, 34))
        bw, bh = int(rng.integers(14, 24)), int(rng.integers(12, 20))
        a = np.zeros((h, w, 3), np.uint8)
        a[y0 : y0 + bh, x0 : x0 + bw] = 255
        Image.fromarray(a).save(tmp_path / "images" / f"{k}.png")
        images.append({"id": k + 1, "file_name": f"{k}.png", "width": w, "height": h})
        anns.append(
            {"id": k + 1, "image_id": k + 1, "category_id": 1, "bbox": [x0, y0, bw, bh], "iscrowd": 0}
        )
    ann = tmp_path / "instances.json"
    ann.write_text(
        json.dumps({"images": images, "annotations": anns, "categories": [{"id": 1, "name": "box"}]})
    )
    src = trdata.CocoDetection(tmp_path / "images", ann)
    transforms = [
        trdata.Resize((80, 96)),
        trdata.ColorJitter(0.0),
        trdata.RandomAffine(degrees=0, translate=(0.1, 0.1), scale=(0.9, 1.1)),
        trdata.RandomRotation((90, 90)),
        trdata.RandomCrop((72, 72)),
        trdata.RandomHorizontalFlip(),
    ]
    with trdata.Loader(src, batch_size=6, transforms=transforms, seed=4, dtype="uint8") as ld:
        b = next(iter(ld))
    imgs = np.asarray(b.images)
    for r in range(b.valid):
        on = np.argwhere(imgs[r].max(axis=0) > 127)
        box = b.targets[r]["boxes"].numpy()[0]
        if len(on) == 0:  # cropped away: its box is degenerate
            assert box[2] - box[0] < 1 or box[3] - box[1] < 1
            continue
        (ymin, xmin), (ymax, xmax) = on.min(axis=0), on.max(axis=0) + 1
        np.testing.assert_allclose(box, [xmin, ymin, xmax, ymax], atol=1.01)


@pytest.mark.parametrize(
    "name",
    ["RandomZoomOut", "ScaleJitter", "RandomShortestSize"],
)
def test_size_ops_draw_as_torchvision(name: str) -> None:
    """The detection ops' draws over 10,000 samples against torchvision v2's ``make_params`` on the same image
    size (KS at α = 0.001 per number; RandomZoomOut's gate rate too)."""
    v2 = torchvision.transforms.v2
    h, w, n = 60, 80, 10_000
    ours, theirs, key = {
        "RandomZoomOut": (
            trdata.RandomZoomOut(side_range=(1.0, 3.0), p=0.6),
            v2.RandomZoomOut(side_range=(1.0, 3.0)),
            "padding",
        ),
        "ScaleJitter": (
            trdata.ScaleJitter((90, 120), (0.1, 2.0)),
            v2.ScaleJitter((90, 120), (0.1, 2.0)),
            "size",
        ),
        "RandomShortestSize": (
            trdata.RandomShortestSize((40, 50, 64), max_size=100),
            v2.RandomShortestSize((40, 50, 64), max_size=100),
            "size",
        ),
    }[name]
    got = [
        trdata._core.sample_op(
            ours._spec(), seed=5, epoch=0, index=i, position=1, height=h, width=w, channels=3
        )
        for i in range(n)
    ]
    torch.manual_seed(0)
    img = tv_tensors.Image(torch.zeros(3, h, w, dtype=torch.uint8))
    ref = [list(theirs.make_params([img])[key]) for _ in range(n)]
    if name == "RandomZoomOut":
        applied = [g[:4] for g in got if g]
        assert abs(len(applied) / n - 0.6) < 0.02
        got = applied
    for k in range(len(ref[0])):
        ks_same([g[k] for g in got], [r[k] for r in ref])


def test_iou_crop_draws_from_the_boxes_as_torchvision(tmp_path: Path) -> None:
    """RandomIoUCrop's draw (replayed with the sample's boxes, as the workers make it) over 4,000 epochs of one
    image, against torchvision v2's ``make_params`` on the same boxes: the rate of leaving the image, and each
    crop number (KS)."""
    import json

    from PIL import Image

    (tmp_path / "images").mkdir()
    w, h = 120, 90
    Image.fromarray(np.zeros((h, w, 3), np.uint8)).save(tmp_path / "images" / "a.png")
    boxes = [[10.0, 12.0, 40.0, 30.0], [60.0, 20.0, 110.0, 80.0], [30.0, 50.0, 50.0, 85.0]]
    anns = [
        {
            "id": k + 1,
            "image_id": 1,
            "category_id": 1,
            "bbox": [b[0], b[1], b[2] - b[0], b[3] - b[1]],
            "iscrowd": 0,
        }
        for k, b in enumerate(boxes)
    ]
    ann = tmp_path / "instances.json"
    ann.write_text(json.dumps({"images": [{"id": 1, "file_name": "a.png", "width": w, "height": h}],
                               "annotations": anns, "categories": [{"id": 1, "name": "x"}]}))  # fmt: skip
    src = trdata.CocoDetection(tmp_path / "images", ann)
    n = 4000
    with trdata.Loader(src, batch_size=1, transforms=[trdata.RandomIoUCrop()], pad_to=(h, w)) as ld:
        got = [ld._native.target_plans([0], e, [(w, h)])[0].draws for e in range(n)]
    ours = [d[0][1] if d else None for d in got]
    theirs_op = torchvision.transforms.v2.RandomIoUCrop()
    torch.manual_seed(0)
    img = tv_tensors.Image(torch.zeros(3, h, w, dtype=torch.uint8))
    bb = tv_tensors.BoundingBoxes(torch.tensor(boxes), format="XYXY", canvas_size=(h, w))
    ref = []
    for _ in range(n):
        p = theirs_op.make_params([img, bb])
        ref.append(None if not p else [p["top"], p["left"], p["height"], p["width"]])
    from _fixtures import chi2_same

    chi2_same([o is None for o in ours], [r is None for r in ref])
    for k in range(4):
        ks_same([o[k] for o in ours if o], [r[k] for r in ref if r])


def test_ops_targets_cannot_follow_are_refused_naming_them(coco_kp: tuple[Path, Path]) -> None:
    images, ann = coco_kp
    src = trdata.CocoDetection(images, ann)
    for op, match in [
        (trdata.Pad(4, padding_mode="reflect"), "Pad with padding_mode"),
        (trdata.RandAugment(), "RandAugment may move pixels"),
        (trdata.RandomApply([trdata.TrivialAugmentWide()]), "TrivialAugmentWide may move pixels"),
    ]:
        with pytest.raises(ConfigError, match=match) as e:
            trdata.Loader(
                src, batch_size=2, transforms=[trdata.Resize((32, 32)), trdata.ColorJitter(0.1), op]
            )
        assert e.value.parameter == "transforms"


def test_pad_to_keeps_each_image_whole_at_the_top_left_and_zero_after_normalization(
    coco_kp: tuple[Path, Path],
) -> None:
    """torchvision's ``hflip`` recipe (images at their own sizes) on a ``pad_to`` canvas: each slot holds the image
    Pillow decodes, flipped as the draw says, at the top left; everything else is 0 after normalization (as
    torchvision's detection models pad their normalized batch); boxes as torchvision flips them."""
    from PIL import Image

    images, ann = coco_kp
    src = trdata.CocoDetection(images, ann)
    ref = coco_reference(images, ann)
    mean, std = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
    kw: dict[str, Any] = dict(
        batch_size=4, transforms=[trdata.RandomHorizontalFlip()], pad_to=(96, 96), seed=8
    )
    with trdata.Loader(src, dtype="float32", normalize=(mean, std), **kw) as ld:
        batches = [(np.asarray(b.images).copy(), b.image_sizes, b.targets, b.indices.tolist()) for b in ld]
    with trdata.Loader(src, dtype="uint8", **kw) as ld:
        raw = [np.asarray(b.images).copy() for b in ld]
    seen = 0
    for (imgs, sizes, targets, idx), u8 in zip(batches, raw):
        for r, i in enumerate(idx[: len(targets)]):
            h, w = sizes[r]
            pil = np.asarray(Image.open(src.paths[i]).convert("RGB")).transpose(2, 0, 1)
            assert (h, w) == pil.shape[1:] == tuple(targets[r]["orig_size"])
            flipped = pil[:, :, ::-1]
            got = u8[r, :, :h, :w]
            assert np.array_equal(got, pil) or np.array_equal(got, flipped)
            assert not u8[r, :, h:, :].any() and not u8[r, :, :, w:].any()
            assert not imgs[r, :, h:, :].any() and not imgs[r, :, :, w:].any()  # 0.0 after normalization
            want = (pil[:, 0, 0] / 255.0 - np.array(mean)) / np.array(std)
            if np.array_equal(got, pil):
                np.testing.assert_allclose(imgs[r, :, 0, 0], want, atol=1e-5)
            _, t = ref[i]
            if "boxes" in t:
                boxes = t["boxes"] if np.array_equal(got, pil) else F.horizontal_flip(t["boxes"])
                np.testing.assert_allclose(targets[r]["boxes"].numpy(), boxes.numpy(), atol=1e-3)
            seen += 1
    assert seen == COCO_IMAGES


def test_pad_to_refuses_what_does_not_fit(coco_kp: tuple[Path, Path]) -> None:
    images, ann = coco_kp
    src = trdata.CocoDetection(images, ann)
    # a list whose size is fixed must fit the canvas: ConfigError naming pad_to
    with pytest.raises(ConfigError, match="pad_to") as e:
        trdata.Loader(src, batch_size=2, transforms=[trdata.Resize((64, 64))], pad_to=(48, 64))
    assert e.value.parameter == "pad_to"
    for bad in (0, (10, -1), (1 << 20, 4)):
        with pytest.raises(ConfigError) as e:
            trdata.Loader(src, batch_size=2, transforms=[], pad_to=bad)
        assert e.value.parameter == "pad_to"
    # an image larger than the canvas: a DecodeError naming the file, or skipped and counted
    with trdata.Loader(src, batch_size=COCO_IMAGES, transforms=[], pad_to=(40, 40)) as ld:
        with pytest.raises(trdata.DecodeError, match="larger than pad_to"):
            next(iter(ld))
    big = sum(1 for w, h in src._sizes if w > 60 or h > 60)
    assert 0 < big < COCO_IMAGES
    with trdata.Loader(src, batch_size=1, transforms=[], pad_to=(60, 60), on_error="skip") as ld:
        n = sum(b.valid for b in ld)
        assert ld.stats()["errors_skipped"] == big
    assert n == COCO_IMAGES


def test_photometric_distort_draws_and_pixels_as_torchvision(coco_kp: tuple[Path, Path]) -> None:
    """RandomPhotometricDistort: its draws over 10,000 samples against torchvision v2's ``make_params`` (each
    adjustment's gate and factor, the contrast coin, the permutation), and the loader's pixels against
    torchvision's kernels run with the draw trdata made (±1 on ≥ 99 % of values, as the other colour ops)."""
    from _fixtures import chi2_same

    v2 = torchvision.transforms.v2
    ours, theirs = trdata.RandomPhotometricDistort(p=0.4), v2.RandomPhotometricDistort(p=0.4)
    n = 10_000
    got = [
        trdata._core.sample_op(
            ours._spec(), seed=2, epoch=0, index=i, position=1, height=8, width=8, channels=3
        )
        for i in range(n)
    ]
    torch.manual_seed(0)
    img = tv_tensors.Image(torch.zeros(3, 8, 8, dtype=torch.uint8))
    ref = [theirs.make_params([img]) for _ in range(n)]
    keys = ("brightness_factor", "contrast_factor", "saturation_factor", "hue_factor")
    for k, key in enumerate(keys):
        chi2_same([bool(np.isfinite(g[4 + k])) for g in got], [r[key] is not None for r in ref])
        ks_same([g[4 + k] for g in got if np.isfinite(g[4 + k])], [r[key] for r in ref if r[key] is not None])
    chi2_same([g[1] == 1 for g in got], [bool(r["contrast_before"]) for r in ref])
    chi2_same(
        [tuple(int(v) for v in g[8:11]) for g in got],
        [
            (0, 1, 2) if r["channel_permutation"] is None else tuple(r["channel_permutation"].tolist())
            for r in ref
        ],
    )
    # pixels: the loader's uint8 output vs torchvision's kernels with trdata's draws
    images, ann = coco_kp
    src = trdata.CocoDetection(images, ann)
    with trdata.Loader(src, batch_size=COCO_IMAGES, transforms=[trdata.Resize((40, 48)), ours], seed=6) as ld:
        b = next(iter(ld))
    with trdata.Loader(src, batch_size=COCO_IMAGES, transforms=[trdata.Resize((40, 48))], seed=6) as ld:
        plain = torch.from_numpy(np.asarray(next(iter(ld)).images).copy())
    close = []
    for r, i in enumerate(b.indices.tolist()):
        d = trdata._core.sample_op(
            ours._spec(), seed=6, epoch=b.epoch, index=i, position=1, height=40, width=48, channels=3
        )
        x = plain[r]
        adjust = [F.adjust_brightness, F.adjust_contrast, F.adjust_saturation, F.adjust_hue]
        for k in (int(v) for v in d[:4]):
            if np.isfinite(d[4 + k]):
                x = adjust[k](x, d[4 + k])
        x = x[[int(v) for v in d[8:11]]]
        diff = np.abs(np.asarray(b.images[r]).astype(int) - x.numpy().astype(int))
        close.append((diff <= 1).mean())
    assert min(close) >= 0.99, close


def test_lsj_folds_into_the_decode_with_the_pixel_ops_draws(coco_kp: tuple[Path, Path]) -> None:
    """``ScaleJitter`` + ``RandomCrop(pad_if_needed)`` leading the list fold into the decode (only the crop is
    resampled): the folded geometry holds the very draws the two pixel ops make (``sample_op`` on their streams),
    the targets equal torchvision's kernels under them, and the pixels are torchvision's resize + crop of the
    Pillow-decoded image within the resampler's rounding."""
    from PIL import Image

    images, ann = coco_kp
    src = trdata.CocoDetection(images, ann, masks=True)
    ref = coco_reference(images, ann)
    jitter, crop = (
        trdata.ScaleJitter((40, 48), scale_range=(0.3, 2.0)),
        trdata.RandomCrop((36, 40), pad_if_needed=True),
    )
    with trdata.Loader(src, batch_size=COCO_IMAGES, transforms=[jitter, crop], seed=9, dtype="uint8") as ld:
        b = next(iter(ld))
        idx = b.indices.tolist()
        sizes = [tuple(int(v) for v in src._sizes[i]) for i in idx]
        plans = ld._native.target_plans(idx, b.epoch, sizes)
    assert ld._native is not None
    diffs = []
    for r, i in enumerate(idx):
        assert plans[r].draws == []  # nothing left for stage 2: it folded
        w, h = sizes[r]
        key = dict(seed=9, epoch=b.epoch, index=i, channels=3)
        nh, nw = (
            int(v) for v in trdata._core.sample_op(jitter._spec(), position=0, height=h, width=w, **key)
        )
        pad_top_left = trdata._core.sample_op(crop._spec(), position=1, height=nh, width=nw, **key)
        pl, pt, _, _, top, left = (int(v) for v in pad_top_left)
        g = plans[r].prefix
        assert (g[2], g[3], g[7], g[8]) == (nw, left - pl, nh, top - pt)
        _, want = ref[i]
        if "boxes" in want:
            boxes = F.crop(F.resize(want["boxes"], [nh, nw]), top - pt, left - pl, 36, 40)
            masks = F.crop(F.resize(want["masks"], [nh, nw], interpolation=NEAR), top - pt, left - pl, 36, 40)
            np.testing.assert_allclose(b.targets[r]["boxes"].numpy(), boxes.numpy(), atol=1e-3)
            np.testing.assert_array_equal(b.targets[r]["masks"].numpy(), masks.numpy())
        pil = torch.from_numpy(np.asarray(Image.open(src.paths[i]).convert("RGB")).transpose(2, 0, 1).copy())
        want_px = F.crop(F.resize(pil, [nh, nw], antialias=True), top - pt, left - pl, 36, 40)
        diffs.append(np.abs(np.asarray(b.images[r]).astype(int) - want_px.numpy().astype(int)).mean())
    assert max(diffs) < 3.0, diffs
