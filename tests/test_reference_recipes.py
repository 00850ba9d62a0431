"""torchvision's reference training recipes through trdata, against torchvision v2 on the same files.

* ``RandomResize`` (the segmentation recipe's op) runs natively: with a fixed draw (``max_size = min_size + 1``) the
  pixels are torchvision's within the stage-2 resize's ±1 level, label maps, masks and boxes exactly theirs; its
  sizes are drawn as ``torch.randint(min_size, max_size)`` draws them (χ², α = 0.001).
* masks and label maps follow the list's order of flips and resizes (the nearest rule does not commute with a
  flip), exactly.
* the presets of references/detection (hflip, multiscale, ssd, ssdlite, lsj) and references/segmentation, their
  ``v2.Compose`` as the files write them (dict fills and per-type ``ToDtype`` included; the two classes of the
  references' own, not in torchvision.transforms.v2, stand-ins named where they are), are the Loader's
  ``transforms=``: each row's draws replayed through torchvision's kernels give its targets exactly and its pixels
  within ±1 level; the random draws are torchvision's by distribution.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import trdata
from _fixtures import chi2_same, photo
from PIL import Image
from trdata import _core
from trdata.convert import from_torchvision

torch = pytest.importorskip("torch")
torchvision = pytest.importorskip("torchvision")
mask_api = pytest.importorskip("pycocotools.mask")
from torchvision import tv_tensors  # noqa: E402
from torchvision.transforms import v2  # noqa: E402
from torchvision.transforms.v2 import functional as F  # noqa: E402

N_IMAGES = 6


# --- datasets -----------------------------------------------------------------------------------------------------


def write_coco_masks(root: Path, n: int = N_IMAGES) -> tuple[Path, Path]:
    """``n`` PNG photos of different sizes and a COCO instances file: per image a compressed-RLE rectangle, a
    polygon and a noisy RLE (every pixel's column matters to it), with their boxes."""
    rng = np.random.default_rng(3)
    (root / "images").mkdir(parents=True)
    images, annotations = [], []
    for k in range(n):
        w, h = int(rng.integers(40, 90)), int(rng.integers(36, 80))
        name = f"{k:04d}.png"
        Image.fromarray(photo(k, w, h)).save(root / "images" / name)
        images.append({"id": k + 1, "file_name": name, "width": w, "height": h})
        rect = np.zeros((h, w), np.uint8)
        rect[int(h * 0.2) : int(h * 0.7), int(w * 0.3) : int(w * 0.9)] = 1
        noise = (rng.random((h, w)) < 0.4).astype(np.uint8)
        cx, cy, r = w * 0.4, h * 0.5, min(w, h) * 0.3
        poly = [
            float(round(v, 2))
            for a in np.linspace(0, 2 * np.pi, 7)[:-1]
            for v in (cx + r * np.cos(a), cy + r * np.sin(a))
        ]
        for seg, box in [
            (rect, [w * 0.3, h * 0.2, w * 0.6, h * 0.5]),
            (noise, [1.0, 2.0, w - 3.0, h - 4.0]),
            ([poly], [cx - r, cy - r, 2 * r, 2 * r]),
        ]:
            if isinstance(seg, np.ndarray):
                rle = mask_api.encode(np.asfortranarray(seg))
                seg = {"size": [h, w], "counts": rle["counts"].decode()}
            annotations.append(
                {"id": len(annotations) + 1, "image_id": k + 1, "category_id": 1, "iscrowd": 0,
                 "segmentation": seg, "bbox": [round(float(v), 2) for v in box], "area": 1.0}
            )  # fmt: skip
    ann = root / "instances.json"
    categories = [{"id": 1, "name": "thing", "supercategory": "x"}]
    ann.write_text(json.dumps({"images": images, "annotations": annotations, "categories": categories}))
    return root / "images", ann


def write_segmentation(root: Path, n: int = N_IMAGES) -> tuple[Path, Path, list[np.ndarray]]:
    """``n`` PNG photos and their ``L`` label maps (classes 0..20 in blobs, 255 borders, speckle)."""
    rng = np.random.default_rng(9)
    (root / "images").mkdir(parents=True)
    (root / "maps").mkdir()
    maps = []
    for k in range(n):
        w, h = int(rng.integers(40, 90)), int(rng.integers(36, 80))
        m = np.zeros((h, w), np.uint8)
        for _ in range(4):
            c = int(rng.integers(1, 21))
            x0, y0 = int(rng.integers(0, w - 4)), int(rng.integers(0, h - 4))
            x1, y1 = x0 + int(rng.integers(3, w // 2)), y0 + int(rng.integers(3, h // 2))
            m[y0:y1, x0:x1] = 255
            m[y0 + 1 : y1 - 1, x0 + 1 : x1 - 1] = c
        m[rng.random((h, w)) < 0.1] = rng.integers(0, 21)
        Image.fromarray(photo(50 + k, w, h)).save(root / "images" / f"{k:04d}.png")
        Image.fromarray(m, mode="L").save(root / "maps" / f"{k:04d}.png")
        maps.append(m)
    return root / "images", root / "maps", maps


@pytest.fixture(scope="module")
def coco(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return write_coco_masks(tmp_path_factory.mktemp("coco"))


@pytest.fixture(scope="module")
def seg(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, list[np.ndarray]]:
    return write_segmentation(tmp_path_factory.mktemp("seg"))


def coco_reference(images: Path, ann: Path) -> Any:
    from torchvision.datasets import wrap_dataset_for_transforms_v2

    ds = torchvision.datasets.CocoDetection(str(images), str(ann))
    return wrap_dataset_for_transforms_v2(ds, target_keys={"boxes", "labels", "masks"})


def seg_reference(images: Path, maps: list[np.ndarray], i: int) -> tuple[Any, Any]:
    """Sample ``i`` as torchvision's segmentation reference reads it: a PIL image and its map as a Mask."""
    img = Image.open(images / f"{i:04d}.png").convert("RGB")
    return img, tv_tensors.Mask(torch.from_numpy(maps[i])[None])


def rows(loader: Any) -> dict[int, tuple[np.ndarray, dict[str, Any]]]:
    """Every delivered row of one epoch by dataset index: its pixels (HWC uint8) and targets (numpy)."""
    out = {}
    for b in loader:
        imgs = np.asarray(b.images)
        for r, i in enumerate(b.indices.tolist()[: b.valid]):
            t = {k: (v.numpy() if hasattr(v, "numpy") else v) for k, v in b.targets[r].items()}
            out[i] = (imgs[r].copy(), t)
    return out


def hwc(x: Any) -> np.ndarray:
    """A PIL image or CHW tensor as HWC uint8."""
    return np.asarray(x) if isinstance(x, Image.Image) else x.permute(1, 2, 0).numpy()


def close_pixels(got: np.ndarray, want: np.ndarray) -> None:
    """The stage-2 resize's tolerance (tests/test_transforms_any_order.py): ±1 level on ≥ 99 % of the values."""
    assert got.shape == want.shape, (got.shape, want.shape)
    diff = np.abs(got.astype(int) - want.astype(int))
    assert np.mean(diff <= 1) >= 0.99, np.mean(diff <= 1)


# --- RandomResize -------------------------------------------------------------------------------------------------


def test_random_resize_converts_to_the_native_op() -> None:
    converted = from_torchvision([v2.RandomResize(20, 41, antialias=True), v2.RandomCrop(16)])
    assert converted.transforms[0] == trdata.RandomResize(20, 41, "bilinear", True)
    assert not any(isinstance(t, trdata.PythonStep) for t in converted.transforms)


def test_random_resize_draws_sizes_as_torch_randint() -> None:
    op = trdata.RandomResize(10, 17)
    ours = []
    for index in range(6000):
        got = _core.sample_op(
            op._spec(), seed=5, epoch=0, index=index, position=0, height=30, width=40, channels=3
        )
        ours.append(int(got[0]) if got else 30)  # the shorter side (an unchanged size is not resampled)
    g = torch.Generator().manual_seed(0)
    theirs = [int(torch.randint(10, 17, (), generator=g)) for _ in range(6000)]
    chi2_same(ours, theirs)
    assert set(ours) == set(range(10, 17))


@pytest.mark.parametrize("interpolation", ["bilinear", "nearest"])
def test_a_fixed_random_resize_moves_pixels_maps_masks_and_boxes_as_torchvision(
    coco: tuple[Path, Path], seg: tuple[Path, Path, list[np.ndarray]], interpolation: str
) -> None:
    """``RandomResize(s, s + 1)`` draws one size: trdata's rows are torchvision's on the same files (a flip and a
    crop after it fix the batch's size). A resize after the decode runs on the uint8 image, so the pixels are
    compared with torchvision's on the image as a tensor (its nearest rule is not Pillow's)."""
    mode = getattr(v2.InterpolationMode, interpolation.upper())
    ops = [v2.RandomResize(45, 46, interpolation=mode), v2.RandomHorizontalFlip(1.0), v2.CenterCrop((40, 44))]
    ref = v2.Compose(ops)
    images, maps_root, maps = seg
    src = trdata.SegmentationFolder(images, maps_root)
    with trdata.Loader(
        src, batch_size=4, transforms=list(ops), dtype="uint8", layout="NHWC", workers=2
    ) as ld:
        got = rows(ld)
    assert sorted(got) == list(range(N_IMAGES))
    for i, (pixels, t) in got.items():
        img, mask = seg_reference(images, maps, i)  # the folder's samples are its sorted file names
        img, mask = ref(F.pil_to_tensor(img), mask)
        close_pixels(pixels, hwc(img))
        np.testing.assert_array_equal(t["mask"], mask.numpy()[0])
    images, ann = coco
    cref = coco_reference(images, ann)
    src = trdata.CocoDetection(images, ann, masks=True)
    with trdata.Loader(
        src, batch_size=4, transforms=list(ops), dtype="uint8", layout="NHWC", workers=2
    ) as ld:
        got = rows(ld)
    for i, (pixels, t) in got.items():
        img, target = cref[i]
        img, want = ref(F.pil_to_tensor(img), target)
        close_pixels(pixels, hwc(img))
        np.testing.assert_array_equal(t["masks"], want["masks"].numpy())
        np.testing.assert_allclose(t["boxes"], want["boxes"].numpy(), atol=1e-3)


# --- masks follow the order of flips and resizes ------------------------------------------------------------------

ORDERS = {
    "hflip-resize": [v2.RandomHorizontalFlip(1.0), v2.Resize((37, 53))],
    "resize-hflip": [v2.Resize((37, 53)), v2.RandomHorizontalFlip(1.0)],
    "vflip-resize-crop": [v2.RandomVerticalFlip(1.0), v2.Resize(41), v2.CenterCrop((33, 35))],
    "hflip-resize-vflip-crop": [
        v2.RandomHorizontalFlip(1.0),
        v2.Resize((45, 61)),
        v2.RandomVerticalFlip(1.0),
        v2.CenterCrop((31, 37)),
    ],
    "resize-crop-hflip": [v2.Resize(47), v2.CenterCrop((30, 34)), v2.RandomHorizontalFlip(1.0)],
}


@pytest.mark.parametrize("order", list(ORDERS))
def test_masks_and_label_maps_follow_the_order_of_flips_and_resizes(
    coco: tuple[Path, Path], seg: tuple[Path, Path, list[np.ndarray]], order: str
) -> None:
    """The decode folds these lists (a flip mirrors the resized output, exact for the pixels' filter), but the
    nearest rule does not commute with a flip: a flip before the resize must mirror the source the nearest resize
    reads. Masks and label maps equal torchvision's (which runs the ops in list order), boxes within 1e-3 px."""
    ops = ORDERS[order]
    ref = v2.Compose(ops)
    images, ann = coco
    cref = coco_reference(images, ann)
    with trdata.Loader(
        trdata.CocoDetection(images, ann, masks=True), batch_size=4, transforms=list(ops)
    ) as ld:
        got = rows(ld)
    for i, (_, t) in got.items():
        _, want = ref(*cref[i])
        np.testing.assert_array_equal(t["masks"], want["masks"].numpy(), err_msg=f"row {i}")
        np.testing.assert_allclose(t["boxes"], want["boxes"].numpy(), atol=1e-3)
    images, maps_root, maps = seg
    with trdata.Loader(
        trdata.SegmentationFolder(images, maps_root), batch_size=4, transforms=list(ops)
    ) as ld:
        got = rows(ld)
    for i, (_, t) in got.items():
        _, mask = ref(*seg_reference(images, maps, i))
        np.testing.assert_array_equal(t["mask"], mask.numpy()[0], err_msg=f"row {i}")


# --- torchvision's reference recipes, as written --------------------------------------------------------------------

MEAN = (123.0, 117.0, 104.0)


def detection_preset(data_augmentation: str, hflip_prob: float = 0.5, mean: tuple[float, ...] = MEAN) -> Any:
    """references/detection/presets.py ``DetectionPresetTrain(data_augmentation=..., backend="pil", use_v2=True)``:
    its op list as written (``T`` is torchvision.transforms.v2). One exception: ``lsj`` ends with the references'
    own ``FixedSizeCrop`` (``reference_transforms.FixedSizeCrop`` even with ``use_v2=True``), which is not in
    torchvision.transforms.v2; ``T.RandomCrop(pad_if_needed=True)`` with the same size and fill stands in for it
    (it pads both sides where ``FixedSizeCrop`` pads right and bottom)."""
    T = v2
    transforms: list[Any] = []
    if data_augmentation == "hflip":
        transforms += [T.RandomHorizontalFlip(p=hflip_prob)]
    elif data_augmentation == "lsj":
        transforms += [
            T.ScaleJitter(target_size=(1024, 1024), antialias=True),
            T.RandomCrop(
                (1024, 1024), pad_if_needed=True, fill=mean
            ),  # for FixedSizeCrop(size=(1024, 1024), fill=mean)
            T.RandomHorizontalFlip(p=hflip_prob),
        ]
    elif data_augmentation == "multiscale":
        transforms += [
            T.RandomShortestSize(
                min_size=(480, 512, 544, 576, 608, 640, 672, 704, 736, 768, 800), max_size=1333
            ),
            T.RandomHorizontalFlip(p=hflip_prob),
        ]
    elif data_augmentation == "ssd":
        fill = defaultdict(lambda: mean, {tv_tensors.Mask: 0})
        transforms += [
            T.RandomPhotometricDistort(),
            T.RandomZoomOut(fill=fill),
            T.RandomIoUCrop(),
            T.RandomHorizontalFlip(p=hflip_prob),
        ]
    elif data_augmentation == "ssdlite":
        transforms += [
            T.RandomIoUCrop(),
            T.RandomHorizontalFlip(p=hflip_prob),
        ]
    transforms += [T.ToImage()]
    transforms += [T.ToDtype(torch.float, scale=True)]
    transforms += [
        T.ConvertBoundingBoxFormat(tv_tensors.BoundingBoxFormat.XYXY),
        T.SanitizeBoundingBoxes(),
        T.ToPureTensor(),
    ]
    return T.Compose(transforms)


def segmentation_preset(
    *, base_size: int, crop_size: int, hflip_prob: float = 0.5, mean: Any = (0.485, 0.456, 0.406),
    std: Any = (0.229, 0.224, 0.225),
) -> Any:  # fmt: skip
    """references/segmentation/presets.py ``SegmentationPresetTrain(..., backend="pil", use_v2=True)``, its op list
    as written, but for the references' own ``v2_extras.PadIfSmaller(crop_size, fill={Mask: 255, "others": 0})``
    before ``RandomCrop(crop_size)``, which is not in torchvision.transforms.v2: ``T.RandomCrop(crop_size,
    pad_if_needed=True)`` with that fill stands in for the pair (it pads both sides where ``PadIfSmaller`` pads
    right and bottom)."""
    T = v2
    transforms: list[Any] = []
    transforms += [T.RandomResize(min_size=int(0.5 * base_size), max_size=int(2.0 * base_size))]
    if hflip_prob > 0:
        transforms += [T.RandomHorizontalFlip(hflip_prob)]
    transforms += [T.RandomCrop(crop_size, pad_if_needed=True, fill={tv_tensors.Mask: 255, "others": 0})]
    transforms += [T.PILToTensor()]
    img_type = torch.Tensor
    transforms += [
        T.ToDtype(dtype={img_type: torch.float32, tv_tensors.Mask: torch.int64, "others": None}, scale=True)
    ]
    transforms += [T.Normalize(mean=mean, std=std)]
    transforms += [T.ToPureTensor()]
    return T.Compose(transforms)


#: Each detection preset's canvas (``Loader(pad_to=...)``) for this test's images (at most 90 × 80): multiscale
#: makes a side up to 1333, ssd's RandomZoomOut up to 4 × the image; lsj fixes 1024 × 1024.
CANVAS = {"hflip": (96, 96), "multiscale": (1344, 1344), "ssd": (384, 384), "ssdlite": (96, 96), "lsj": None}


def replay(plan: Any, img: Any, target: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    """torchvision v2's kernels under one row's replayed draws (its ``TargetPlan``: the workers' own), on the
    image as a tensor and its targets; masks nearest with zero fill, as the references ask. These presets fold
    nothing but leading flips into the decode (``plan.prefix``: the identity, mirrored or not)."""
    x = [F.pil_to_tensor(img) if isinstance(img, Image.Image) else img, target["boxes"], target["masks"]]
    if plan.prefix[10]:
        x = [F.horizontal_flip(a) for a in x]
    for op, v, _ in plan.draws:
        if op in ("RandomShortestSize", "RandomResize", "ScaleJitter"):
            x = [F.resize(a, [int(v[0]), int(v[1])], interpolation=F.InterpolationMode.NEAREST
                          if isinstance(a, tv_tensors.Mask) else F.InterpolationMode.BILINEAR, antialias=True)
                 for a in x]  # fmt: skip
        elif op in ("RandomZoomOut", "RandomCrop"):
            pad, (top, left) = [int(a) for a in v[:4]], (int(v[4]), int(v[5]))
            fill = [0, 0, 0] if op == "RandomZoomOut" else 0
            x = [
                F.pad(a, pad, fill=0 if isinstance(a, tv_tensors.Mask) else fill) if any(pad) else a
                for a in x
            ]
            if op == "RandomCrop":
                raise AssertionError("the detection presets' RandomCrop is lsj's, not replayed here")
        elif op == "RandomIoUCrop":
            top, left, h, w = (int(a) for a in v)
            b = x[1]
            cx, cy = (b[:, 0] + b[:, 2]) / 2, (b[:, 1] + b[:, 3]) / 2
            inside = (left < cx) & (cx < left + w) & (top < cy) & (cy < top + h)
            x = [F.crop(a, top, left, h, w) for a in x]
            x[1] = tv_tensors.wrap(torch.where(inside[:, None], x[1], torch.zeros_like(x[1])), like=x[1])
        elif op == "RandomHorizontalFlip":
            x = [F.horizontal_flip(a) for a in x]
        elif op == "SanitizeBoundingBoxes":
            pass  # applied once at the end (it comes last)
        else:
            raise AssertionError(f"no replay for {op}")
    out = {"boxes": x[1], "masks": x[2], "labels": target["labels"]}
    return x[0], v2.SanitizeBoundingBoxes()(out)


@pytest.mark.parametrize("preset", ["hflip", "multiscale", "ssd", "ssdlite"])
def test_detection_presets_as_written_equal_torchvision_under_the_same_draws(
    coco: tuple[Path, Path], preset: str
) -> None:
    """Each preset's v2.Compose, as the references write it, is the Loader's ``transforms=``; with the flip pinned
    (``hflip_prob=1.0``) each row's other draws are replayed through torchvision's kernels on the wrapped
    dataset's sample: masks and kept boxes equal (boxes within 1e-3 px), pixels ±1 level on ≥ 99 % (but for
    ssd's RandomPhotometricDistort, whose colours are covered by its own tests: there the canvas size)."""
    images, ann = coco
    src = trdata.CocoDetection(images, ann, masks=True)
    cref = coco_reference(images, ann)
    tv = detection_preset(preset, hflip_prob=1.0)
    checked = 0
    with trdata.Loader(src, batch_size=3, transforms=tv, pad_to=CANVAS[preset], workers=2, seed=4) as ld:
        for epoch in range(3):
            ld.set_epoch(epoch)
            for b in ld:
                idx = b.indices.tolist()[: b.valid]
                sizes = [tuple(int(v) for v in src._sizes[i]) for i in idx]
                plans = ld._native.target_plans(idx, b.epoch, sizes)
                imgs = b.images.numpy() if hasattr(b.images, "numpy") else np.asarray(b.images)
                for r, i in enumerate(idx):
                    img, want = replay(plans[r], *cref[i])
                    got = b.targets[r]
                    np.testing.assert_array_equal(
                        got["masks"].numpy(), want["masks"].numpy(), err_msg=f"{preset} row {i}"
                    )
                    np.testing.assert_allclose(got["boxes"].numpy(), want["boxes"].numpy(), atol=1e-3)
                    np.testing.assert_array_equal(got["labels"].numpy(), want["labels"].numpy())
                    h, w = img.shape[1:]
                    pixels = imgs[r][:, :h, :w]
                    assert not imgs[r][:, h:, :].any() and not imgs[r][:, :, w:].any()  # the canvas's padding
                    if preset != "ssd":
                        close_pixels(np.rint(pixels * 255).astype(np.uint8), img.numpy())
                    checked += 1
    assert checked == 3 * N_IMAGES


def test_the_ssd_presets_dict_fill_is_torchvisions() -> None:
    """``defaultdict(lambda: mean, {Mask: 0})``: torchvision looks the image's type up with ``in`` (never asking
    the factory) and pads the image with zeros; trdata does the same, and masks take 0."""
    converted = from_torchvision(detection_preset("ssd"))
    zoom = next(t for t in converted.transforms if isinstance(t, trdata.RandomZoomOut))
    img = Image.fromarray(np.full((10, 10, 3), 200, np.uint8))
    theirs = v2.RandomZoomOut(
        fill=defaultdict(lambda: MEAN, {tv_tensors.Mask: 0}), side_range=(2.0, 2.0), p=1.0
    )
    assert np.asarray(theirs(img))[0, 0].tolist() == [0, 0, 0]
    assert zoom.fill in (None, 0, (0.0,))
    seg = from_torchvision(segmentation_preset(base_size=64, crop_size=48))
    crop = next(t for t in seg.transforms if isinstance(t, trdata.RandomCrop))
    assert crop.fill == 0 and crop.pad_if_needed and seg.dtype == "float32"
    with pytest.raises(trdata.ConfigError, match="fill"):
        from_torchvision([v2.Pad(2, fill={tv_tensors.Mask: 7, "others": 0})])


def test_the_lsj_preset_runs_as_written_on_its_fixed_canvas(coco: tuple[Path, Path]) -> None:
    """ScaleJitter to 1024 × 1024 (the reference's own size), the crop that fixes it, the flip: every row is one
    1024 × 1024 float image, boxes inside it, masks of its size."""
    images, ann = coco
    src = trdata.CocoDetection(images, ann, masks=True)
    with trdata.Loader(src, batch_size=3, transforms=detection_preset("lsj"), workers=2) as ld:
        seen = 0
        for b in ld:
            assert tuple(b.images.shape[1:]) == (3, 1024, 1024) and str(b.images.dtype).endswith("float32")
            for t in b.targets[: b.valid]:
                boxes = t["boxes"].numpy()
                assert ((boxes >= 0) & (boxes <= 1024)).all() and t["masks"].shape[1:] == (1024, 1024)
                seen += 1
    assert seen == N_IMAGES


def test_the_random_draws_of_the_presets_are_torchvisions_by_distribution() -> None:
    """multiscale's RandomShortestSize and the segmentation preset's RandomResize, as converted from the presets,
    draw the sizes torchvision's ``make_params`` draws (χ², α = 0.001), and the presets' flip keeps p = 0.5."""
    (h, w) = (60, 90)
    multiscale = from_torchvision(detection_preset("multiscale")).transforms[0]
    segmentation = from_torchvision(segmentation_preset(base_size=64, crop_size=48)).transforms[0]
    flip = from_torchvision(detection_preset("hflip")).transforms[0]
    theirs_ms = v2.RandomShortestSize(
        min_size=(480, 512, 544, 576, 608, 640, 672, 704, 736, 768, 800), max_size=1333
    )
    theirs_seg = v2.RandomResize(32, 128)
    torch.manual_seed(0)
    image = tv_tensors.Image(torch.zeros(3, h, w, dtype=torch.uint8))
    for ours_op, theirs_op in [(multiscale, theirs_ms), (segmentation, theirs_seg)]:
        ours, theirs = [], []
        for index in range(5000):
            got = _core.sample_op(
                ours_op._spec(), seed=2, epoch=0, index=index, position=0, height=h, width=w, channels=3
            )
            ours.append(int(got[0]) if got else h)
            theirs.append(
                int(theirs_op.make_params([image])["size"][0])
            )  # (h, w), or RandomResize's shorter side
        chi2_same(ours, theirs)
    flips = [
        bool(
            _core.sample_op(flip._spec(), seed=2, epoch=0, index=i, position=0, height=h, width=w, channels=3)
        )
        for i in range(5000)
    ]
    assert abs(np.mean(flips) - 0.5) < 0.03


def test_the_segmentation_preset_as_written_equals_torchvision_under_the_same_draws(
    seg: tuple[Path, Path, list[np.ndarray]],
) -> None:
    """RandomResize, the flip, RandomCrop with ``fill={Mask: 255, "others": 0}``, PILToTensor, ToDtype with a
    per-type dtype, Normalize: each row's draws replayed through torchvision's kernels give its label map exactly
    (255 where the crop pads) and its normalized pixels within the stage-2 resize's ±1 level."""
    images, maps_root, maps = seg
    src = trdata.SegmentationFolder(images, maps_root)
    mean, std = np.array([0.485, 0.456, 0.406]), np.array([0.229, 0.224, 0.225])
    tv = segmentation_preset(base_size=64, crop_size=48)
    padded = flipped = 0
    with trdata.Loader(src, batch_size=3, transforms=tv, workers=2, seed=6) as ld:
        for epoch in range(4):
            ld.set_epoch(epoch)
            for b in ld:
                idx = b.indices.tolist()[: b.valid]
                sizes = [tuple(int(v) for v in src._sizes[i]) for i in idx]
                plans = ld._native.target_plans(idx, b.epoch, sizes)
                imgs = np.asarray(b.images)
                for r, i in enumerate(idx):
                    img, mask = seg_reference(images, maps, i)
                    x = [F.pil_to_tensor(img), mask]
                    if plans[r].prefix[10]:
                        x = [F.horizontal_flip(a) for a in x]
                    for op, v, _ in plans[r].draws:
                        if op == "RandomResize":
                            x = [F.resize(x[0], [int(v[0]), int(v[1])], antialias=True),
                                 F.resize(x[1], [int(v[0]), int(v[1])], interpolation=F.InterpolationMode.NEAREST)]  # fmt: skip
                        elif op == "RandomHorizontalFlip":
                            x = [F.horizontal_flip(a) for a in x]
                            flipped += 1
                        elif op == "RandomCrop":
                            pad, (top, left) = [int(a) for a in v[:4]], (int(v[4]), int(v[5]))
                            if any(pad):
                                x = [F.pad(x[0], pad, fill=0), F.pad(x[1], pad, fill=255)]
                                padded += 1
                            x = [F.crop(a, top, left, 48, 48) for a in x]
                        else:
                            raise AssertionError(f"no replay for {op}")
                    np.testing.assert_array_equal(
                        b.targets[r]["mask"].numpy(), x[1].numpy()[0], err_msg=f"row {i}"
                    )
                    unnormalized = (imgs[r] * std[:, None, None] + mean[:, None, None]) * 255
                    close_pixels(np.rint(unnormalized).astype(np.uint8), x[0].numpy())
    assert padded > 0 and 0 < flipped < 4 * N_IMAGES
