"""torchvision's reference training recipes through trdata, against torchvision v2 on the same files.

* ``RandomResize`` (the segmentation recipe's op) runs natively: with a fixed draw (``max_size = min_size + 1``) the
  pixels are torchvision's within the stage-2 resize's ±1 level, label maps, masks and boxes exactly theirs; its
  sizes are drawn as ``torch.randint(min_size, max_size)`` draws them (χ², α = 0.001).
"""

from __future__ import annotations

import json
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
