"""``trdata.SegmentationFolder`` against VOC's and ADE20K's layouts and torchvision v2's kernels: palette PNG label
maps (VOC's ``SegmentationClass``, written with ``putpalette``) are read as their indices, ``L`` maps (ADE20K) as
they are; each map moves with its image exactly as torchvision's kernels move a ``tv_tensors.Mask`` under the
row's replayed draws (stage 1: ``TargetPlan.prefix``; stage 2: ``TargetPlan.draws``), with 255 wherever the output
leaves the image (the kernels' zero fill observed on the map + 1, so every pad, crop and warp is covered); the
same maps for any worker count; wrong pairs and damaged maps are ``SourceError``\\ s naming the files."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import trdata
from _fixtures import (
    PADDED,
    PREFIX,
    RECIPES,
    VOC_IMAGES,
    apply_op,
    photo,
    run_or_fail_on_hang,
    size_of,
    target_rows,
    targets_with_1_and_3_workers,
    torchvision_moved,
    voc_label_map,
    voc_palette,
    write_voc,
)
from PIL import Image
from trdata.errors import ConfigError, SourceError

torch = pytest.importorskip("torch")
torchvision = pytest.importorskip("torchvision")
from torchvision import tv_tensors  # noqa: E402
from torchvision.transforms.v2 import functional as F  # noqa: E402

NEAR = F.InterpolationMode.NEAREST


@pytest.fixture(scope="module")
def voc(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, np.ndarray]]:
    root = tmp_path_factory.mktemp("voc")
    return root, write_voc(root)


def _source(root: Path, **kw: Any) -> trdata.SegmentationFolder:
    return trdata.SegmentationFolder(root / "JPEGImages", root / "SegmentationClass", **kw)


def _mask(m: np.ndarray) -> Any:
    """The map + 1 as a Mask: torchvision's kernels fill 0 where the output leaves the image (pads, crops larger
    than the image, warps); ``_unshift`` turns that 0 into 255 and the rest back."""
    return tv_tensors.Mask(torch.from_numpy(m.astype(np.int64) + 1)[None])


def _unshift(m: Any) -> np.ndarray:
    a = (m.numpy() if hasattr(m, "numpy") else m)[0]
    return np.where(a == 0, 255, a - 1).astype(np.uint8)


def test_order_and_maps_are_the_files_indices(voc: Any) -> None:
    root, maps = voc
    src = _source(root)
    assert src.keys == sorted(maps) and len(src) == VOC_IMAGES
    assert src.paths == [str(root / "JPEGImages" / f"{k}.jpg") for k in sorted(maps)]
    for i, key in enumerate(src.keys):
        np.testing.assert_array_equal(src.label_map(i), maps[key])  # palette indices, not colors
    split = (root / "ImageSets" / "Segmentation" / "train.txt").read_text().split()
    src = _source(root, ids=split, classes=[f"c{i}" for i in range(21)])
    assert src.keys == split and src.class_to_idx["c20"] == 20
    size = (37, 50)
    with trdata.Loader(src, batch_size=3, transforms=[trdata.Resize(size)], workers=2) as ld:
        got = target_rows(ld)
    for i, key in enumerate(split):
        h, w = maps[key].shape
        assert got[i]["image_id"] == i and got[i]["orig_size"] == (h, w) and got[i]["size"] == size
        want = F.resize(tv_tensors.Mask(torch.from_numpy(maps[key])[None]), list(size), interpolation=NEAR)
        np.testing.assert_array_equal(got[i]["mask"], want.numpy()[0])


@pytest.mark.parametrize(
    "transforms",
    [
        [trdata.Resize(40), trdata.CenterCrop(32), trdata.ColorJitter(0.4, 0.4)],
        [trdata.RandomResizedCrop(32, scale=(0.2, 1.0)), trdata.RandomHorizontalFlip()],
        [trdata.RandomVerticalFlip(), trdata.CenterCrop(70)],
        [trdata.RandomCrop(64, pad_if_needed=True), trdata.RandomHorizontalFlip()],
    ],
    ids=["resize-centercrop", "rrc-flip", "vflip-centercrop-pad", "randomcrop-pad-if-needed"],
)
def test_folded_geometry_moves_maps_as_torchvisions_kernels_with_the_same_draw(
    voc: Any, transforms: list[Any]
) -> None:
    root, maps = voc
    src = _source(root)
    for epoch in range(2):
        with trdata.Loader(src, batch_size=3, transforms=transforms, workers=2, seed=11) as ld:
            ld.set_epoch(epoch)
            for b in ld:
                idx = b.indices.tolist()
                sizes = [tuple(int(v) for v in src._sizes[i]) for i in idx]
                geometry = [p.prefix for p in ld._native.target_plans(idx, b.epoch, sizes)]
                for r, i in enumerate(idx):
                    w, h = sizes[r]
                    boxes = tv_tensors.BoundingBoxes(torch.zeros((0, 4)), format="XYXY", canvas_size=(h, w))
                    _, moved = torchvision_moved(boxes, _mask(maps[src.keys[i]]), geometry[r])
                    got = b.targets[r]["mask"].numpy()
                    assert got.shape == tuple(b.images.shape[-2:])
                    np.testing.assert_array_equal(got, _unshift(moved))


@pytest.mark.parametrize("recipe", list(RECIPES))
def test_stage2_ops_move_maps_as_torchvisions_kernels_with_the_same_draws(voc: Any, recipe: str) -> None:
    """test_detection_ops' recipes (affine, rotation with and without expand, perspective, pads and crops, zoom
    out, scale jitter, containers, padded batches) on label maps: equal to torchvision's, 255 outside."""
    root, maps = voc
    src = _source(root)
    transforms = [trdata.Resize(PREFIX), *RECIPES[recipe]]
    pad_to = PADDED[recipe][1] if recipe in PADDED else None
    if any(type(t).__name__ == "RandomIoUCrop" for t in RECIPES[recipe]):
        # its draw depends on the sample's boxes: a label-map source has none (refused when the Loader is made)
        with pytest.raises(ConfigError, match="RandomIoUCrop draws its crop from the sample's boxes") as info:
            trdata.Loader(src, batch_size=4, transforms=transforms, pad_to=pad_to)
        assert info.value.parameter == "transforms"
        return
    expand = any(getattr(t, "expand", False) for t in RECIPES[recipe])
    filled = 0
    for epoch in range(2):
        with trdata.Loader(src, batch_size=4, transforms=transforms, workers=2, seed=3, pad_to=pad_to) as ld:
            ld.set_epoch(epoch)
            for b in ld:
                idx = b.indices.tolist()
                sizes = [tuple(int(v) for v in src._sizes[i]) for i in idx]
                plans = ld._native.target_plans(idx, b.epoch, sizes)
                for r, i in enumerate(idx):
                    m = F.resize(_mask(maps[src.keys[i]]), list(PREFIX), interpolation=NEAR)
                    for name, v, hw in plans[r].draws:
                        op = name.split("(")[0]
                        if op != "SanitizeBoundingBoxes":  # a boxes-only op
                            m = apply_op(op, v, hw, m, size_of(op, recipe), expand)
                    got = b.targets[r]
                    assert tuple(got["size"]) == plans[r].canvas == tuple(m.shape[-2:])
                    want = _unshift(m)
                    np.testing.assert_array_equal(got["mask"].numpy(), want)
                    filled += int((want == 255).sum())
    assert filled > 0  # the maps have void (255) and pixels outside the image


def test_maps_are_the_same_for_any_worker_count_and_every_image_comes_once(voc: Any) -> None:
    root, _ = voc
    src = _source(root)
    kw: dict[str, Any] = dict(
        batch_size=3,
        transforms=[trdata.RandomResizedCrop(24), trdata.RandomHorizontalFlip(), trdata.RandomRotation(20)],
        seed=5,
        reproducible=True,
        shuffle=True,
    )
    runs = targets_with_1_and_3_workers(src, VOC_IMAGES, **kw)
    for i in range(VOC_IMAGES):
        np.testing.assert_array_equal(runs[0][i]["mask"], runs[1][i]["mask"])
    with trdata.Loader(src, batch_size=2, transforms=[trdata.Resize((8, 8))]) as ld:
        b = next(iter(ld))
    with pytest.raises(ValueError, match="no boxes .* stack its targets' 'mask'"):
        b.padded_targets()


def _eroded(m: np.ndarray) -> np.ndarray:
    """``m`` without its border pixels (a pixel stays when its 8 neighbours are in ``m`` too)."""
    out = m.copy()
    p = np.pad(m, 1)
    for dy in (0, 1, 2):
        for dx in (0, 1, 2):
            out &= p[dy : dy + m.shape[0], dx : dx + m.shape[1]]
    return out


def test_the_moved_map_lies_on_the_moved_pixels(tmp_path: Path) -> None:
    """The pixels and the maps agree (the workers' draws are the targets'): each image is black with a white
    rectangle labelled 1 in its map; after resizing, warping, cropping and flipping, the pixels labelled 1 are
    white and those labelled 0 or 255 (off the image) dark, away from the boundaries' resampled pixels."""
    images, masks = tmp_path / "img", tmp_path / "ann"
    images.mkdir()
    masks.mkdir()
    rng = np.random.default_rng(2)
    for k in range(6):
        w, h = int(rng.integers(70, 130)), int(rng.integers(60, 110))
        x0, y0 = int(rng.integers(w // 4, w // 2)), int(rng.integers(h // 4, h // 2))
        m = np.zeros((h, w), np.uint8)
        m[y0 : y0 + int(rng.integers(15, w // 3)), x0 : x0 + int(rng.integers(15, h // 3))] = 1
        Image.fromarray(np.repeat(m[..., None] * 255, 3, axis=2)).save(images / f"{k}.png")
        Image.fromarray(m, mode="L").save(masks / f"{k}.png")
    src = trdata.SegmentationFolder(images, masks)
    transforms = [
        trdata.Resize((80, 96)),
        trdata.ColorJitter(0.0),
        trdata.RandomAffine(degrees=15, translate=(0.1, 0.1), scale=(0.9, 1.1)),
        trdata.RandomRotation((90, 90)),
        trdata.RandomCrop((72, 72), padding=4),
        trdata.RandomHorizontalFlip(),
    ]
    checked = 0
    with trdata.Loader(src, batch_size=6, transforms=transforms, seed=4, dtype="uint8", workers=2) as ld:
        for b in ld:
            imgs = np.asarray(b.images).max(axis=1)
            for r in range(b.valid):
                m = b.targets[r]["mask"].numpy()
                assert set(np.unique(m).tolist()) <= {0, 1, 255}
                # two pixels from a boundary: bilinear pixels vs nearest labels under a rotated, scaled warp
                assert (imgs[r][_eroded(_eroded(m == 1))] > 127).all()
                assert (imgs[r][_eroded(_eroded(m != 1))] < 128).all()
                checked += int(_eroded(_eroded(m == 1)).sum())
    assert checked > 500  # the rectangles' insides were seen


def test_ade20k_and_cityscapes_layouts(tmp_path: Path) -> None:
    """ADE20K: images/training/*.jpg + annotations/training/*.png in mode L; Cityscapes: per-city folders and
    suffixes (leftImg8bit / gtFine_labelIds); 16-bit maps with values below 256 are accepted."""
    ade = tmp_path / "ade"
    (ade / "images" / "training").mkdir(parents=True)
    (ade / "annotations" / "training").mkdir(parents=True)
    for k in range(3):
        Image.fromarray(photo(k, 40 + k, 30)).save(ade / "images" / "training" / f"ADE_train_{k:08d}.jpg")
        Image.fromarray(voc_label_map(k, 40 + k, 30), mode="L").save(
            ade / "annotations" / "training" / f"ADE_train_{k:08d}.png"
        )
    src = trdata.SegmentationFolder(ade / "images" / "training", ade / "annotations" / "training")
    assert len(src) == 3 and src.label_map(2).tolist() == voc_label_map(2, 42, 30).tolist()
    city = tmp_path / "cityscapes"
    for c, town in enumerate(["aachen", "bochum"]):
        (city / "leftImg8bit" / "train" / town).mkdir(parents=True)
        (city / "gtFine" / "train" / town).mkdir(parents=True)
        stem = f"{town}_000000_00001{c}"
        Image.fromarray(photo(c, 64, 32)).save(
            city / "leftImg8bit" / "train" / town / f"{stem}_leftImg8bit.png"
        )
        Image.fromarray(voc_label_map(c, 64, 32).astype(np.uint16)).save(
            city / "gtFine" / "train" / town / f"{stem}_gtFine_labelIds.png"
        )
        # the color and instance maps beside it are not samples
        Image.fromarray(photo(c, 64, 32)).save(city / "gtFine" / "train" / town / f"{stem}_gtFine_color.png")
    src = trdata.SegmentationFolder(
        city / "leftImg8bit" / "train",
        city / "gtFine" / "train",
        image_suffix="_leftImg8bit.png",
        mask_suffix="_gtFine_labelIds.png",
    )
    assert src.keys == ["aachen/aachen_000000_000010", "bochum/bochum_000000_000011"]
    np.testing.assert_array_equal(src.label_map(1), voc_label_map(1, 64, 32))
    with trdata.Loader(src, batch_size=2, transforms=[trdata.Resize((16, 32))]) as ld:
        assert next(iter(ld)).targets[0]["mask"].shape == (16, 32)


def test_wrong_pairs_and_damaged_maps_are_source_errors_naming_the_files(tmp_path: Path) -> None:
    images, masks = tmp_path / "img", tmp_path / "ann"
    images.mkdir()
    masks.mkdir()
    Image.fromarray(photo(0, 40, 30)).save(images / "a.jpg")
    Image.fromarray(voc_label_map(0, 40, 30), mode="L").save(masks / "a.png")
    assert len(trdata.SegmentationFolder(images, masks)) == 1
    cases: list[tuple[Any, str]] = [
        (
            lambda: Image.fromarray(voc_label_map(0, 41, 30), mode="L").save(masks / "a.png"),
            "of 41x30 for the image",
        ),
        (
            lambda: Image.fromarray(photo(0, 40, 30)).save(masks / "a.png", format="JPEG"),
            "a JPEG file, not a PNG",
        ),
        (lambda: Image.fromarray(photo(0, 40, 30)).save(masks / "a.png"), "mode RGB is not a label map"),
        (lambda: (masks / "a.png").write_bytes(b"\x89PNG\r\n\x1a\n garbage"), "cannot read the image header"),
    ]
    for damage, message in cases:
        damage()
        with pytest.raises(SourceError, match=message) as e:
            trdata.SegmentationFolder(images, masks)
        assert e.value.path == str(masks / "a.png")
        assert "header" in message or str(images / "a.jpg") in str(e.value)  # both files named
    # a PNG whose header is sound and whose pixels are cut: the sample's error when a worker reads it (under
    # on_error: tests/test_sample_errors.py), naming the map
    Image.fromarray(voc_label_map(0, 40, 30), mode="L").save(masks / "a.png")
    data = (masks / "a.png").read_bytes()
    (masks / "a.png").write_bytes(data[: len(data) // 2])
    src = trdata.SegmentationFolder(images, masks)
    with pytest.raises(trdata.DecodeError, match="cannot decode the label map") as d:
        with trdata.Loader(src, batch_size=1, transforms=[trdata.Resize((8, 8))]) as ld:
            next(iter(ld))
    assert d.value.kind == "Target" and d.value.index == 0 and str(masks / "a.png") in str(d.value)
    # a map replaced after the source was made: its size is checked before it is decoded
    Image.fromarray(voc_label_map(0, 40, 30), mode="L").save(masks / "a.png")
    src = trdata.SegmentationFolder(images, masks)
    Image.fromarray(np.zeros((3000, 4000), np.uint8), mode="L").save(masks / "a.png")
    with pytest.raises(SourceError, match="a label map of 4000x3000 for the image") as e:
        src.label_map(0)
    assert e.value.path == str(masks / "a.png")
    # a 16-bit map with a class index above 255
    big = voc_label_map(0, 40, 30).astype(np.uint16)
    big[0, 0] = 300
    Image.fromarray(big).save(masks / "a.png")
    with pytest.raises(SourceError, match="class index 300 does not fit"):
        trdata.SegmentationFolder(images, masks).label_map(0)
    # keys: a missing map, an image twice, no image
    Image.fromarray(voc_label_map(0, 40, 30), mode="L").save(masks / "a.png")
    Image.fromarray(photo(1, 40, 30)).save(
        images / "b.jpg"
    )  # an image without a map: not a sample, unless named
    assert len(trdata.SegmentationFolder(images, masks)) == 1
    with pytest.raises(SourceError, match="no label map for the image") as e:
        trdata.SegmentationFolder(images, masks, ids=["a", "b"])
    assert e.value.path == str(masks / "b.png")
    Image.fromarray(photo(0, 40, 30)).save(images / "a.png")
    with pytest.raises(SourceError, match=r"2 images .* named a.<ext>"):
        trdata.SegmentationFolder(images, masks)
    trdata.SegmentationFolder(images, masks, image_suffix=".png")  # image_suffix= chooses
    Image.fromarray(voc_label_map(0, 40, 30), mode="L").save(masks / "z.png")
    (images / "a.png").unlink()
    with pytest.raises(SourceError, match=r"no image named z.<ext>") as e:
        trdata.SegmentationFolder(images, masks)
    assert e.value.path == str(masks / "z.png")
    # the parameters' types (their values are checked against the files above)
    bad: list[tuple[dict[str, Any], str]] = [
        ({"ids": "a"}, "ids"),
        ({"ids": [b"a"]}, "ids"),
        ({"mask_suffix": 1}, "mask_suffix"),
        ({"image_suffix": [".jpg"]}, "image_suffix"),
        ({"images": 3}, "images"),
        ({"masks": None}, "masks"),
    ]
    for kw, parameter in bad:
        args = {"images": images, "masks": masks, **kw}
        with pytest.raises(ConfigError, match=f"invalid {parameter}: ") as c:
            trdata.SegmentationFolder(**args)
        assert c.value.parameter == parameter


FUZZ_EXAMPLES = int(os.environ.get("TRDATA_FUZZ_EXAMPLES", "100"))


def test_fuzz_damaged_label_maps(tmp_path: Path) -> None:
    """A palette PNG label map with bytes replaced, inserted or cut (hypothesis): the source refuses it when made
    or when read with a SourceError naming the map, or reads indices of the image's size; never another
    exception."""
    hypothesis = pytest.importorskip("hypothesis")
    st = hypothesis.strategies
    images, masks = tmp_path / "img", tmp_path / "ann"
    images.mkdir()
    masks.mkdir()
    Image.fromarray(photo(0, 24, 16)).save(images / "a.jpg")
    m = Image.fromarray(voc_label_map(0, 24, 16), mode="P")
    m.putpalette(voc_palette())
    m.save(masks / "a.png")
    good = (masks / "a.png").read_bytes()
    outcomes = dict.fromkeys(("refused when made", "refused when read", "read"), 0)

    @hypothesis.settings(max_examples=FUZZ_EXAMPLES, deadline=None)
    @hypothesis.given(
        at=st.integers(0, len(good)), cut=st.integers(0, 8), new=st.binary(max_size=8), truncate=st.booleans()
    )
    def check(at: int, cut: int, new: bytes, truncate: bool) -> None:
        data = good[:at] if truncate else good[:at] + new + good[at + cut :]
        (masks / "a.png").write_bytes(data)
        try:
            src = trdata.SegmentationFolder(images, masks)
        except SourceError as e:
            assert e.path == str(masks / "a.png")
            outcomes["refused when made"] += 1
            return
        try:
            a = src.label_map(0)
        except SourceError as e:
            assert e.path == str(masks / "a.png")
            outcomes["refused when read"] += 1
            return
        assert a.shape == (16, 24) and a.dtype == np.uint8
        outcomes["read"] += 1

    check()
    print(f"label map fuzz: {outcomes}")
    assert outcomes["refused when made"] and outcomes["read"], outcomes


FIFO_SOURCE = """
    import os, sys, trdata
    root, suffix, late = sys.argv[1], sys.argv[2] or None, sys.argv[3]
    try:
        src = trdata.SegmentationFolder(root + "/images", root + "/masks", image_suffix=suffix)
        if late:  # the map swapped for a FIFO after the source was made: read when a batch is made
            os.unlink(late)
            os.mkfifo(late)
            src.label_map(0)
        print("accepted")
    except trdata.errors.SourceError as e:
        print(e.path)
        print(e)
"""


def test_a_fifo_where_a_label_map_or_an_image_belongs_is_refused_not_waited_on(tmp_path: Path) -> None:
    """A FIFO (no writer) as a label map was reported as a missing map ("no label map"), as an image named by
    ``image_suffix`` as a missing image, and an image found by its key blocked forever in Pillow's header read;
    a map swapped for a FIFO after the source was made blocked the batch. Every one is now opened by the core's
    rules: a SourceError naming the FIFO and saying what it is. In a subprocess: a regression fails at the
    timeout instead of hanging."""
    images, masks = tmp_path / "images", tmp_path / "masks"
    images.mkdir()
    masks.mkdir()
    Image.fromarray(photo(0, 40, 30)).save(images / "a.jpg")
    Image.fromarray(voc_label_map(0, 40, 30), mode="L").save(masks / "a.png")

    def refused(suffix: str = "", late: str = "") -> tuple[str, str]:
        out = run_or_fail_on_hang(FIFO_SOURCE, str(tmp_path), suffix, late).splitlines()
        assert len(out) == 2, out
        return out[0], out[1]

    fifo = "is a FIFO (named pipe), not a regular file"
    Image.fromarray(photo(1, 40, 30)).save(images / "b.jpg")
    os.mkfifo(masks / "b.png")  # a FIFO label map
    for suffix in ("", ".jpg"):
        path, message = refused(suffix)
        assert path == str(masks / "b.png") and fifo in message
    (masks / "b.png").unlink()
    (images / "b.jpg").unlink()
    Image.fromarray(voc_label_map(1, 40, 30), mode="L").save(masks / "b.png")
    os.mkfifo(images / "b.jpg")  # a FIFO image, found by its key or named by image_suffix
    for suffix in ("", ".jpg"):
        path, message = refused(suffix)
        assert path == str(images / "b.jpg") and fifo in message
    (images / "b.jpg").unlink()
    (masks / "b.png").unlink()
    path, message = refused("", str(masks / "a.png"))
    assert path == str(masks / "a.png") and fifo in message
