"""``trdata.YoloDetection`` against ultralytics' layout and torchvision v2's kernels: a layout written by the test
(``images/train/**`` JPEGs and PNGs of different sizes, ``labels/train/**`` txt files with boxes, a file of
segments, a missing and an empty label file, duplicates, CRLF and blank lines) is read in sorted-path order with
the boxes ultralytics derives (CXCYWH → XYXY by ``torchvision.ops.box_convert``, a segment's bounds); the boxes
move with the image as torchvision's kernels move ``BoundingBoxes`` under each row's replayed draws (stage 1:
``TargetPlan.prefix``; stage 2: ``TargetPlan.draws``) within 1e-3 px; the same for any worker count; hostile label
files are ``SourceError``\\ s naming the file and the line; the parser is fuzzed (hypothesis)."""

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
    YOLO_IMAGES,
    apply_op,
    photo,
    run_or_fail_on_hang,
    size_of,
    target_rows,
    targets_with_1_and_3_workers,
    torchvision_moved,
    write_yolo,
)
from PIL import Image
from trdata.errors import ConfigError, SourceError
from trdata.sources.yolo import MAX_LABEL_LINES, label_path, parse_labels

torch = pytest.importorskip("torch")
torchvision = pytest.importorskip("torchvision")
from torchvision import tv_tensors  # noqa: E402
from torchvision.transforms.v2 import functional as F  # noqa: E402

FUZZ_EXAMPLES = int(os.environ.get("TRDATA_FUZZ_EXAMPLES", "300"))


@pytest.fixture(scope="module")
def yolo(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, tuple[np.ndarray, np.ndarray]]]:
    root = tmp_path_factory.mktemp("yolo")
    return root, write_yolo(root)


def _boxes(want: tuple[np.ndarray, np.ndarray], w: int, h: int) -> Any:
    # float32, as torchvision's wrapped datasets give boxes (its kernels' rounding at the canvas edge, which
    # SanitizeBoundingBoxes' bounds check sees, is float32's)
    return tv_tensors.BoundingBoxes(
        torch.from_numpy(want[1]), format="XYXY", canvas_size=(h, w), dtype=torch.float32
    )


def test_order_and_boxes_are_ultralytics_and_move_as_torchvisions_resize(yolo: Any) -> None:
    root, want = yolo
    src = trdata.YoloDetection(root, "train", classes={i: f"c{i}" for i in range(80)})
    assert src.paths == sorted(want) and len(src) == YOLO_IMAGES
    assert src.classes[:2] == ["c0", "c1"] and src.class_to_idx["c79"] == 79
    for i, p in enumerate(src.paths):
        t = src._image_targets(i)
        np.testing.assert_array_equal(t["labels"], want[p][0])
        np.testing.assert_allclose(t["boxes"], want[p][1], atol=1e-9)
    size = (37, 50)
    with trdata.Loader(src, batch_size=4, transforms=[trdata.Resize(size)], workers=2) as ld:
        got = target_rows(ld)
    for i, p in enumerate(src.paths):
        w, h = (int(v) for v in src._sizes[i])
        assert got[i]["image_id"] == i and got[i]["orig_size"] == (h, w) and got[i]["size"] == size
        moved = F.resize(_boxes(want[p], w, h), list(size))
        np.testing.assert_allclose(got[i]["boxes"], moved.numpy(), atol=1e-3)
        np.testing.assert_array_equal(got[i]["labels"], want[p][0])
        assert got[i]["iscrowd"].shape == (len(want[p][0]),) and not got[i]["iscrowd"].any()


@pytest.mark.parametrize(
    "transforms",
    [
        [trdata.Resize(40), trdata.CenterCrop(32), trdata.ColorJitter(0.4, 0.4)],
        [trdata.RandomResizedCrop(32, scale=(0.2, 1.0)), trdata.RandomHorizontalFlip()],
        [trdata.RandomVerticalFlip(), trdata.CenterCrop(70)],
    ],
    ids=["resize-centercrop", "rrc-flip", "vflip-centercrop-pad"],
)
def test_folded_geometry_moves_boxes_as_torchvisions_kernels_with_the_same_draw(
    yolo: Any, transforms: list[Any]
) -> None:
    root, want = yolo
    src = trdata.YoloDetection(root, "train")
    for epoch in range(2):
        with trdata.Loader(src, batch_size=3, transforms=transforms, workers=2, seed=11) as ld:
            ld.set_epoch(epoch)
            for b in ld:
                idx = b.indices.tolist()
                sizes = [tuple(int(v) for v in src._sizes[i]) for i in idx]
                geometry = [p.prefix for p in ld._native.target_plans(idx, b.epoch, sizes)]
                for r, i in enumerate(idx):
                    w, h = sizes[r]
                    dummy = tv_tensors.Mask(torch.zeros((1, h, w), dtype=torch.uint8))
                    boxes, _ = torchvision_moved(_boxes(want[src.paths[i]], w, h), dummy, geometry[r])
                    np.testing.assert_allclose(b.targets[r]["boxes"].numpy(), boxes, atol=1e-3)


def test_masks_are_pycocotools_polygons_and_move_as_torchvisions_kernels(yolo: Any) -> None:
    """masks=True: a segment's mask is its polygon (in pixels) rasterized as pycocotools' frPyObjects rasterizes
    it, a box line's is its rectangle; the masks move with the image exactly as torchvision moves a Mask (nearest)
    under each row's folded geometry, and SanitizeBoundingBoxes drops them with their boxes."""
    mask_api = pytest.importorskip("pycocotools.mask")
    root, want = yolo
    src = trdata.YoloDetection(root, "train", masks=True)
    for i, p in enumerate(src.paths):
        w, h = (int(v) for v in src._sizes[i])
        got = src._image_targets(i)["masks"]
        parsed = (
            parse_labels(Path(src.label_paths[i]).read_bytes(), p)
            if os.path.exists(src.label_paths[i])
            else None
        )
        assert len(got) == len(want[p][0])
        for k, rle in enumerate(got):
            q = None if parsed is None else parsed.polygons[k]
            x1, y1, x2, y2 = want[p][1][k]
            poly = (q * [w, h]).reshape(-1) if q is not None else [x1, y1, x2, y1, x2, y2, x1, y2]
            ref = mask_api.decode(mask_api.frPyObjects([list(map(float, poly))], h, w))[:, :, 0]
            np.testing.assert_array_equal(mask_api.decode({"size": [h, w], "counts": rle}), ref)
    transforms = [trdata.RandomResizedCrop(32, scale=(0.2, 1.0)), trdata.RandomHorizontalFlip()]
    with trdata.Loader(src, batch_size=3, transforms=transforms, workers=2, seed=4) as ld:
        for b in ld:
            idx = b.indices.tolist()
            sizes = [tuple(int(v) for v in src._sizes[i]) for i in idx]
            for r, (i, plan) in enumerate(zip(idx, ld._native.target_plans(idx, b.epoch, sizes))):
                w, h = sizes[r]
                rles = src._image_targets(i)["masks"]
                full = (
                    np.stack([mask_api.decode({"size": [h, w], "counts": s}) for s in rles])
                    if len(rles)
                    else (np.zeros((0, h, w), np.uint8))
                )
                boxes, masks = torchvision_moved(
                    _boxes(want[src.paths[i]], w, h), tv_tensors.Mask(torch.from_numpy(full)), plan.prefix
                )
                np.testing.assert_array_equal(b.targets[r]["masks"].numpy(), masks)
                np.testing.assert_allclose(b.targets[r]["boxes"].numpy(), boxes, atol=1e-3)


@pytest.mark.parametrize("recipe", list(RECIPES))
def test_stage2_ops_move_boxes_as_torchvisions_kernels_with_the_same_draws(yolo: Any, recipe: str) -> None:
    """test_detection_ops' recipes (affine, rotation, perspective, pads and crops, zoom out, sanitize, scale
    jitter, containers, padded batches) on YOLO boxes."""
    root, want = yolo
    src = trdata.YoloDetection(root, "train")
    transforms = [trdata.Resize(PREFIX), *RECIPES[recipe]]
    pad_to = PADDED[recipe][1] if recipe in PADDED else None
    expand = any(getattr(t, "expand", False) for t in RECIPES[recipe])
    for epoch in range(2):
        with trdata.Loader(src, batch_size=4, transforms=transforms, workers=2, seed=3, pad_to=pad_to) as ld:
            ld.set_epoch(epoch)
            for b in ld:
                idx = b.indices.tolist()
                sizes = [tuple(int(v) for v in src._sizes[i]) for i in idx]
                plans = ld._native.target_plans(idx, b.epoch, sizes)
                for r, i in enumerate(idx):
                    w, h = sizes[r]
                    boxes = F.resize(_boxes(want[src.paths[i]], w, h), list(PREFIX))
                    labels = torch.from_numpy(want[src.paths[i]][0])
                    canvas = tv_tensors.Mask(
                        torch.zeros((1, *PREFIX), dtype=torch.uint8)
                    )  # the image's canvas
                    for name, v, hw in plans[r].draws:
                        op = name.split("(")[0]
                        if op == "SanitizeBoundingBoxes":
                            ours = next(t for t in RECIPES[recipe] if type(t).__name__ == op)
                            out = torchvision.transforms.v2.SanitizeBoundingBoxes(min_size=ours.min_size)(
                                {"boxes": boxes, "labels": labels}
                            )
                            boxes, labels = out["boxes"], out["labels"]
                            continue
                        rotate_expand = op == "RandomRotation" and expand
                        if rotate_expand:  # unclamped: torchvision clamps to its own canvas (below)
                            boxes = tv_tensors.wrap(boxes, like=boxes, clamping_mode=None)
                        boxes = apply_op(op, v, hw, boxes, size_of(op, recipe), expand)
                        canvas = apply_op(op, v, hw, canvas, size_of(op, recipe), expand)
                        if rotate_expand:
                            # torchvision sizes an expanded canvas of boxes from the matrix about the absolute
                            # centre, the image's about the relative one (a pixel apart at times) and clamps the
                            # boxes to the former: trdata's targets live on the image's canvas, clamped to it
                            hw_out = tuple(canvas.shape[-2:])
                            boxes = tv_tensors.wrap(
                                boxes, like=boxes, canvas_size=hw_out, clamping_mode="soft"
                            )
                            boxes = F.clamp_bounding_boxes(boxes)
                    got = b.targets[r]
                    assert tuple(boxes.canvas_size) == plans[r].canvas == tuple(got["size"])
                    np.testing.assert_allclose(got["boxes"].numpy(), boxes.numpy(), atol=1e-3)
                    np.testing.assert_array_equal(got["labels"].numpy(), labels.numpy())
                    assert got["iscrowd"].shape == labels.shape


def test_targets_are_the_same_for_any_worker_count_and_every_image_comes_once(yolo: Any) -> None:
    root, _ = yolo
    src = trdata.YoloDetection(root, "train")
    kw: dict[str, Any] = dict(
        batch_size=4,
        transforms=[
            trdata.RandomResizedCrop(24),
            trdata.RandomHorizontalFlip(),
            trdata.SanitizeBoundingBoxes(),
        ],
        seed=5,
        reproducible=True,
        shuffle=True,
    )
    runs = targets_with_1_and_3_workers(src, YOLO_IMAGES, **kw)
    for i in range(YOLO_IMAGES):
        for key in ("boxes", "labels", "iscrowd", "size"):
            np.testing.assert_array_equal(runs[0][i][key], runs[1][i][key])


def test_a_box_drawn_into_the_image_lands_where_its_moved_box_says(tmp_path: Path) -> None:
    """The pixels and the targets agree: each image (sizes differ, one PNG) is black with one white rectangle whose
    normalized CXCYWH line is its label; after resizing, warping, cropping and flipping, the white pixels' bounds
    are the moved box (within the resampling's pixel). Catches a wrong denormalization or image size."""
    rng = np.random.default_rng(1)
    for k in range(6):
        w, h = int(rng.integers(70, 130)), int(rng.integers(60, 110))
        x0, y0 = int(rng.integers(w // 4, w // 2)), int(rng.integers(h // 4, h // 2))
        bw, bh = int(rng.integers(12, w // 4)), int(rng.integers(10, h // 4))
        a = np.zeros((h, w, 3), np.uint8)
        a[y0 : y0 + bh, x0 : x0 + bw] = 255
        img = tmp_path / "images" / f"{k}.png"
        img.parent.mkdir(exist_ok=True)
        Image.fromarray(a).save(img)
        Path(label_path(str(img))).parent.mkdir(exist_ok=True)
        cx, cy = (x0 + bw / 2) / w, (y0 + bh / 2) / h
        Path(label_path(str(img))).write_text(f"0 {cx:.8f} {cy:.8f} {bw / w:.8f} {bh / h:.8f}\n")
    src = trdata.YoloDetection(tmp_path)
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


# ------------------------------------------------------------------ hostile label files

HOSTILE: dict[str, tuple[bytes, str]] = {
    "four-fields": (b"0 0.5 0.5 0.1 0.1\n1 0.5 0.5 0.1\n", r"line 2: 4 fields"),
    "six-fields": (b"0 0.5 0.5 0.1 0.1 0.2\n", r"line 1: 6 fields"),
    "truncated": (b"0 0.5 0.5 0.1 0.1\n0 0.5 0.", r"line 2: 3 fields"),
    "garbage": (
        b"0 0.5 0.5 0.1 0.1\n\n\x00\xff\x13 a b c d\n",
        r"line 3: field 1, .* is not a decimal number",
    ),
    "word": (b"person 0.5 0.5 0.1 0.1\n", r"line 1: field 1, b'person', is not a decimal"),
    "nan": (b"0 nan 0.5 0.1 0.1\n", r"line 1: field 2, b'nan', is not a decimal"),
    "inf-by-overflow": (b"0 0.5 1e999 0.1 0.1\n", r"line 1: field 3, b'1e999', is not finite"),
    "underscore": (b"0 0.5 0.5 0.1 1_0\n", r"line 1: field 5, b'1_0', is not a decimal"),
    "huge-class": (b"0 0.5 0.5 0.1 0.1\n2147483648 0.5 0.5 0.1 0.1\n", r"line 2: class b'2147483648' is not"),
    "huge-class-digits": (b"9" * 5000 + b" 0.5 0.5 0.1 0.1\n", r"line 1: field 1, .* is not finite"),
    "negative-class": (b"-1 0.5 0.5 0.1 0.1\n", r"line 1: class b'-1' is not an integer"),
    "fractional-class": (b"1.5 0.5 0.5 0.1 0.1\n", r"line 1: class b'1.5' is not an integer"),
    "out-of-range": (b"0 0.5 0.5 0.1 0.1\n0 1.2 0.5 0.1 0.1\n", r"line 2: field 2, b'1.2', is outside"),
    "negative-size": (b"0 0.5 0.5 -0.5 0.1\n", r"line 1: field 4, b'-0.5', is outside"),
    # within ultralytics' tolerance but an inverted box (ultralytics gives it no meaning): refused
    "negative-width-in-tolerance": (
        b"0 0.5 0.5 0.1 0.1\n0 0.5 0.5 -0.005 0.1\n",
        r"line 2: a negative width \(b'-0.005'\)",
    ),
    "negative-height-in-tolerance": (b"0 0.5 0.5 0.1 -1e-3\n", r"line 1: a negative height \(b'-1e-3'\)"),
    "box-in-segments": (
        b"0 0.1 0.1 0.2 0.1 0.2 0.2\n1 0.5 0.5 0.1 0.1\n",
        r"line 2: a box line in a file of segm",
    ),
    "odd-polygon": (b"0 0.1 0.1 0.2 0.1 0.2 0.2 0.3\n", r"line 1: 8 fields in a file of segments"),
    "too-many-lines": (b"\n" * MAX_LABEL_LINES + b"0 0.5 0.5 0.1 0.1\n", r"more than 100000 lines"),
    "long-line": (
        b"0 0.5 0.5 0.1 0.1\n0" + b" 0" * (1 << 19) + b"\n",
        r"line 2: a line of more than 1048576 bytes",
    ),
}


def _one_image(root: Path) -> Path:
    (root / "images").mkdir(parents=True, exist_ok=True)
    (root / "labels").mkdir(parents=True, exist_ok=True)
    Image.fromarray(photo(0, 32, 24)).save(root / "images" / "a.jpg")
    return root / "labels" / "a.txt"


@pytest.mark.parametrize("case", list(HOSTILE))
def test_a_hostile_label_file_is_a_source_error_naming_the_file_and_the_line(
    tmp_path: Path, case: str
) -> None:
    data, message = HOSTILE[case]
    label = _one_image(tmp_path)
    label.write_bytes(data)
    with pytest.raises(SourceError, match=message) as e:
        trdata.YoloDetection(tmp_path)
    assert e.value.path == str(label) and str(e.value).startswith(str(label))


def test_oversized_or_odd_label_files_and_images_are_refused(tmp_path: Path) -> None:
    label = _one_image(tmp_path)
    with open(label, "wb") as f:  # 20 MB of valid lines: refused by size before any is parsed
        f.write(b"0 0.5 0.5 0.1 0.1\n" * (20_000_000 // 18))
    with pytest.raises(SourceError, match="larger than 16777216") as e:
        trdata.YoloDetection(tmp_path)
    assert e.value.path == str(label)
    label.unlink()
    label.mkdir()  # a directory where the label file belongs
    with pytest.raises(SourceError, match="is a directory, not a regular file") as e:
        trdata.YoloDetection(tmp_path)
    assert e.value.path == str(label)
    label.rmdir()
    label.write_bytes(b"\xef\xbb\xbf3 0.5 0.5 0.1 0.1\n")  # a BOM is skipped
    assert trdata.YoloDetection(tmp_path)._image_targets(0)["labels"].tolist() == [3]
    with pytest.raises(SourceError, match=r"line 1: class 3 is not below the 2 classes given"):
        trdata.YoloDetection(tmp_path, classes=["a", "b"])
    label.unlink()  # no label file at all: warned (a misplaced labels folder), every image without objects
    with pytest.warns(UserWarning, match="no label file for any of the 1 images"):
        assert len(trdata.YoloDetection(tmp_path)._boxes) == 0
    label.write_bytes(b"3 0.5 0.5 0.1 0.1\n")
    with pytest.raises(ConfigError, match="keys must be the class ids"):
        trdata.YoloDetection(tmp_path, classes={1: "a"})
    with pytest.raises(SourceError, match="no such directory"):
        trdata.YoloDetection(tmp_path, "val")
    for kw, parameter in [({"split": 1}, "split"), ({"root": 3}, "root"), ({"classes": "ab"}, "classes")]:
        with pytest.raises(ConfigError, match=f"invalid {parameter}: ") as c:
            trdata.YoloDetection(**{"root": tmp_path, **kw})
        assert c.value.parameter == parameter
    # an image whose pixels a decoder would rotate: its labels are relative to the rotated image
    exif = Image.Exif()
    exif[0x0112] = 6
    Image.fromarray(photo(1, 32, 24)).save(tmp_path / "images" / "b.jpg", exif=exif)
    with pytest.raises(SourceError, match="EXIF orientation 6") as e:
        trdata.YoloDetection(tmp_path)
    assert e.value.path == str(tmp_path / "images" / "b.jpg")
    (tmp_path / "images" / "b.jpg").write_bytes(b"not an image")  # an image whose header cannot be read
    with pytest.raises(SourceError, match="cannot read the image header") as e:
        trdata.YoloDetection(tmp_path)
    assert e.value.path == str(tmp_path / "images" / "b.jpg")


def test_fuzz_the_label_parser() -> None:
    """Random label files (valid lines, mutated lines, random bytes): the parser returns objects that satisfy its
    rules or raises a SourceError naming the file; never another exception."""
    hypothesis = pytest.importorskip("hypothesis")
    st = hypothesis.strategies
    number = st.one_of(
        st.floats(-0.02, 1.02, allow_nan=False).map(lambda v: f"{v:.6g}"),
        st.sampled_from(
            ["nan", "-inf", "1e999", "0x10", "1_0", ".5", "5.", "-0", "+.5e-1", "", "١", "1e", "."]
        ),
        st.text(max_size=6),
    )
    line = st.one_of(
        st.lists(number, min_size=0, max_size=12).map(" ".join),
        st.builds(
            lambda c, xs: " ".join([str(c), *xs]), st.integers(-3, 2**32), st.lists(number, max_size=9)
        ),
    )
    coord = st.floats(0, 1).map(lambda v: f"{v:.6g}")
    box_line = st.builds(
        lambda c, xs: " ".join([str(c), *xs]), st.integers(0, 100), st.lists(coord, min_size=4, max_size=4)
    )
    segment_line = st.builds(
        lambda c, n, xs: " ".join([str(c), *xs[: 2 * n]]),
        st.integers(0, 100),
        st.integers(3, 8),
        st.lists(coord, min_size=16, max_size=16),
    )
    valid = st.one_of(st.lists(box_line, max_size=8), st.lists(segment_line, max_size=5)).map(
        lambda lines: "\n".join(lines).encode()
    )
    # a valid file with bytes replaced, inserted or cut somewhere: truncations, garbage, merged lines
    mutated = st.builds(
        lambda data, at, cut, new: data[:at] + new + data[at + cut :],
        valid,
        st.integers(0, 300),
        st.integers(0, 4),
        st.binary(max_size=4),
    )
    text = st.one_of(
        valid,
        mutated,
        st.lists(line, max_size=8).map("\n".join).map(lambda s: s.encode("utf-8", "surrogatepass")),
        st.binary(max_size=200),
    )

    outcomes = dict.fromkeys(("refused", "empty", "objects"), 0)

    @hypothesis.settings(max_examples=FUZZ_EXAMPLES, deadline=None)
    @hypothesis.given(data=text, crlf=st.booleans())
    def check(data: bytes, crlf: bool) -> None:
        if crlf:
            data = data.replace(b"\n", b"\r\n")
        try:
            out = parse_labels(data, "fuzz.txt")
        except SourceError as e:
            assert str(e).startswith("fuzz.txt") and e.path == "fuzz.txt"
            outcomes["refused"] += 1
            return
        k = len(out.classes)
        outcomes["objects" if k else "empty"] += 1
        assert out.boxes.shape == (k, 4) and len(out.polygons) == k and out.classes.dtype == np.int64
        assert np.isfinite(out.boxes).all() and ((out.classes >= 0) & (out.classes < 2**31)).all()
        assert (out.boxes[:, 2:] >= out.boxes[:, :2]).all()  # no inverted box (a negative w or h is refused)
        assert len({(int(c), tuple(b)) for c, b in zip(out.classes, out.boxes.tolist())}) == k  # no duplicate

    check()
    print(f"label parser fuzz: {outcomes}")
    assert all(outcomes.values()), outcomes  # every outcome was reached


def test_repeated_class_names_are_refused_as_every_source_refuses_them(tmp_path: Path) -> None:
    """``classes=["a", "a"]`` would collapse ``class_to_idx`` ({"a": 1}): a ConfigError on classes, as
    ImageFolder & co. give (sources/base.py ``_class_names``), for a list and for ultralytics' mapping."""
    _one_image(tmp_path).write_bytes(b"1 0.5 0.5 0.1 0.1\n")
    for classes in (["a", "a"], ("a", "b", "a"), {0: "a", 1: "a"}):
        with pytest.raises(ConfigError, match="invalid classes: the names must be distinct") as e:
            trdata.YoloDetection(tmp_path, classes=classes)
        assert e.value.parameter == "classes"
    src = trdata.YoloDetection(tmp_path, classes={1: "b", 0: "a"})
    assert src.classes == ["a", "b"] and src.class_to_idx == {"a": 0, "b": 1}


REFUSED = """
    import sys, trdata
    try:
        trdata.YoloDetection(sys.argv[1])
        print("accepted")
    except trdata.errors.SourceError as e:
        print(e.path)
        print(e)
"""


def test_a_fifo_where_a_label_file_or_an_image_belongs_is_refused_not_waited_on(tmp_path: Path) -> None:
    """A FIFO (no writer) as a label file or an image: YoloDetection blocked forever in ``open().read()`` and in
    Pillow's header read; now both are opened by the core's rules (regular files only, never blocking): a
    SourceError naming the FIFO and saying what it is. Run in a subprocess: a regression fails at the timeout."""
    label = _one_image(tmp_path)
    label.write_bytes(b"0 0.5 0.5 0.1 0.1\n")
    fifo_label = tmp_path / "labels" / "b.txt"
    Image.fromarray(photo(1, 32, 24)).save(tmp_path / "images" / "b.jpg")
    os.mkfifo(fifo_label)
    path, message = run_or_fail_on_hang(REFUSED, str(tmp_path)).splitlines()
    assert path == str(fifo_label) and "is a FIFO (named pipe), not a regular file" in message
    fifo_label.unlink()
    fifo_image = tmp_path / "images" / "c.png"
    os.mkfifo(fifo_image)
    path, message = run_or_fail_on_hang(REFUSED, str(tmp_path)).splitlines()
    assert path == str(fifo_image) and "is a FIFO (named pipe), not a regular file" in message
    fifo_image.unlink()
    assert run_or_fail_on_hang(REFUSED, str(tmp_path)).strip() == "accepted"
