"""Detection targets against torchvision: ``trdata.CocoDetection`` reads a COCO file written by the test in COCO's
own layout (polygons, uncompressed and compressed RLE, crowd, images without annotations, keypoints) in
torchvision ``CocoDetection``'s order, and its boxes, labels, masks and keypoints move with the image exactly
as torchvision v2's kernels move them under the same geometry (boxes within 1e-3 px, masks identical); the
targets are the same for any worker count; what cannot be done is refused."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import trdata
from _fixtures import (
    COCO_IMAGES,
    coco_reference,
    photo,
    target_rows,
    targets_with_1_and_3_workers,
    torchvision_moved,
    write_coco,
)
from PIL import Image
from trdata.errors import ConfigError, SourceError

torch = pytest.importorskip("torch")
torchvision = pytest.importorskip("torchvision")
mask_api = pytest.importorskip("pycocotools.mask")
from torchvision import tv_tensors  # noqa: E402
from torchvision.transforms.v2 import functional as F  # noqa: E402


@pytest.fixture(scope="module")
def coco(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("coco")
    return root / "images", write_coco(root)


def test_order_boxes_labels_and_masks_equal_torchvisions_wrapped_dataset(coco: tuple[Path, Path]) -> None:
    images, ann = coco
    src = trdata.CocoDetection(images, ann, masks=True)
    ref = coco_reference(images, ann)
    assert len(src) == len(ref) == COCO_IMAGES and src.ids == ref.ids
    assert src.classes == ["person", "car", "dog"] and src.class_to_idx["dog"] == 18
    # the identity geometry: a loader that keeps the size (CenterCrop of each image's own size needs one size,
    # so compare through Resize to a fixed size below; here the raw targets as the source holds them)
    for size in [(48, 64), (37, 50)]:
        with trdata.Loader(src, batch_size=4, transforms=[trdata.Resize(size)], workers=2) as ld:
            got = target_rows(ld)
        for i in range(COCO_IMAGES):
            img, want = ref[i]
            assert got[i]["image_id"] == want["image_id"]
            if "boxes" not in want:  # an image without annotations: torchvision gives only image_id
                assert len(got[i]["boxes"]) == 0
                continue
            moved = F.resize(want["boxes"], list(size))
            np.testing.assert_allclose(got[i]["boxes"], moved.numpy(), atol=1e-3)
            np.testing.assert_array_equal(got[i]["labels"], want["labels"].numpy())
            np.testing.assert_array_equal(got[i]["iscrowd"], np.asarray(want["iscrowd"]))
            masks = F.resize(want["masks"], list(size), interpolation=F.InterpolationMode.NEAREST)
            np.testing.assert_array_equal(got[i]["masks"], masks.numpy())


@pytest.mark.parametrize(
    "recipe",
    [
        "resize-centercrop",
        "rrc-flip",
        "vflip-centercrop-pad",
    ],
)
def test_random_geometry_moves_targets_as_torchvisions_kernels_with_the_same_draw(
    coco: tuple[Path, Path], recipe: str
) -> None:
    """Each row's geometry (the loader's replayed draw) applied with torchvision v2's functional kernels to the
    wrapped dataset's targets gives trdata's targets."""
    images, ann = coco
    transforms = {
        "resize-centercrop": [trdata.Resize(40), trdata.CenterCrop(32), trdata.ColorJitter(0.4, 0.4)],
        "rrc-flip": [trdata.RandomResizedCrop(32, scale=(0.2, 1.0)), trdata.RandomHorizontalFlip()],
        "vflip-centercrop-pad": [trdata.RandomVerticalFlip(), trdata.CenterCrop(70)],
    }[recipe]
    src = trdata.CocoDetection(images, ann, masks=True)
    ref = coco_reference(images, ann)
    for epoch in range(2):
        with trdata.Loader(src, batch_size=3, transforms=transforms, workers=2, seed=11) as ld:
            ld.set_epoch(epoch)
            for b in ld:
                idx = b.indices.tolist()
                sizes = [tuple(int(v) for v in src._sizes[i]) for i in idx]
                geometry = [p.prefix for p in ld._native.target_plans(idx, b.epoch, sizes)]
                for r, i in enumerate(idx):
                    _, want = ref[i]
                    if "boxes" not in want:
                        continue
                    boxes, masks = torchvision_moved(want["boxes"], want["masks"], geometry[r])
                    np.testing.assert_allclose(b.targets[r]["boxes"].numpy(), boxes, atol=1e-3)
                    np.testing.assert_array_equal(b.targets[r]["masks"].numpy(), masks)


def test_targets_are_the_same_for_any_worker_count_and_every_image_comes_once(
    coco: tuple[Path, Path],
) -> None:
    images, ann = coco
    src = trdata.CocoDetection(images, ann, masks=True)
    kw: dict[str, Any] = dict(
        batch_size=4,
        transforms=[trdata.RandomResizedCrop(24), trdata.RandomHorizontalFlip()],
        seed=5,
        reproducible=True,
        shuffle=True,
    )
    runs = targets_with_1_and_3_workers(src, COCO_IMAGES, **kw)
    for i in range(COCO_IMAGES):
        for key in ("boxes", "labels", "masks"):
            np.testing.assert_array_equal(runs[0][i][key], runs[1][i][key])


def test_keypoints_move_and_points_off_the_canvas_become_invisible(tmp_path: Path) -> None:
    ann = write_coco(tmp_path, keypoints=True)
    src = trdata.CocoDetection(tmp_path / "images", ann, keypoints=True)
    raw = json.loads(ann.read_text())
    by_image: dict[int, list[Any]] = {}
    for a in raw["annotations"]:
        by_image.setdefault(a["image_id"], []).append(a)
    with trdata.Loader(
        src, batch_size=3, transforms=[trdata.Resize((30, 40)), trdata.RandomHorizontalFlip()], seed=2
    ) as ld:
        for b in ld:
            idx = b.indices.tolist()
            sizes = [tuple(int(v) for v in src._sizes[i]) for i in idx]
            geometry = [p.prefix for p in ld._native.target_plans(idx, b.epoch, sizes)]
            for r, i in enumerate(idx):
                kp = b.targets[r]["keypoints"].numpy()
                anns = by_image.get(src.ids[i], [])
                if not anns:
                    assert kp.shape[0] == 0
                    continue
                want = torch.tensor([a["keypoints"] for a in anns], dtype=torch.float64).reshape(
                    len(anns), 5, 3
                )
                w, h = (int(v) for v in src._sizes[i])
                pts = tv_tensors.KeyPoints(want[..., :2].reshape(-1, 2), canvas_size=(h, w))
                pts = F.resize(pts, [30, 40])
                if geometry[r][10]:
                    pts = F.horizontal_flip(pts)
                xy = pts.reshape(len(anns), 5, 2).numpy()
                np.testing.assert_allclose(kp[..., :2], xy, atol=1e-3)
                inside = (xy[..., 0] >= 0) & (xy[..., 0] < 40) & (xy[..., 1] >= 0) & (xy[..., 1] < 30)
                np.testing.assert_array_equal(kp[..., 2], np.where(inside, want[..., 2].numpy(), 0))


def test_padded_targets_and_what_is_refused(coco: tuple[Path, Path], tmp_path: Path) -> None:
    images, ann = coco
    src = trdata.CocoDetection(images, ann)
    with trdata.Loader(src, batch_size=COCO_IMAGES, transforms=[trdata.Resize((32, 32))]) as ld:
        b = next(iter(ld))
    p = b.padded_targets()
    counts = [len(t["boxes"]) for t in b.targets]
    assert p["counts"].tolist() == counts and p["boxes"].shape == (COCO_IMAGES, max(counts), 4)
    assert all((p["labels"][r, c:] == -1).all() for r, c in enumerate(counts))
    # a geometric op after a pixel op would have to move the targets: refused, naming it
    with pytest.raises(ConfigError, match="AutoAugment may move pixels") as e:
        with trdata.Loader(
            src,
            batch_size=2,
            transforms=[trdata.Resize((32, 32)), trdata.ColorJitter(0.2), trdata.AutoAugment()],
        ) as ld:
            next(iter(ld))
    assert e.value.parameter == "transforms"
    # a hostile annotation file: a SourceError naming the file
    bad = tmp_path / "bad.json"
    bad.write_text('{"images": [{"id": 1, "file_name": "a.jpg", "width": -4, "height": 3}]}')
    with pytest.raises(SourceError, match="bad.json"):
        trdata.CocoDetection(images, bad)


def test_a_batchs_target_columns_become_per_image_views_of_one_tensor_per_field() -> None:
    """The core's ragged target columns (made by the workers) sliced into per-image dicts, as the loader does for
    a device batch (one copy per column, rows as views), run to the CPU device: every row's tensors equal the
    numpy slicing (empty rows included, masks and keypoints reshaped by the row's counts and size)."""
    torch = pytest.importorskip("torch")
    from trdata import _target_batch

    rng = np.random.default_rng(3)
    counts = np.array([3, 0, 2], np.int64)
    points = np.array([2, 2, 2], np.int64)
    size = np.array([[5, 7], [4, 4], [6, 3]], np.int64)
    k = int(counts.sum())
    cols = {
        "kind": "instances",
        "image_id": np.array([101, 102, 103], np.int64),
        "orig_size": np.array([[50, 70], [40, 40], [60, 30]], np.int64),
        "size": size,
        "counts": counts,
        "boxes": rng.random((k, 4), dtype=np.float32),
        "labels": rng.integers(0, 90, k),
        "iscrowd": rng.integers(0, 2, k),
        "points": points,
        "keypoints": rng.random((k * 2, 3), dtype=np.float32),
        # the dense fields come as the workers' per-row buffers
        "masks": [rng.integers(0, 2, int(n), dtype=np.uint8) for n in counts * size[:, 0] * size[:, 1]],
    }
    want = _target_batch.per_image(cols)
    got = _target_batch.per_image(cols, "cpu", as_torch=True)
    assert [w["masks"].shape for w in want] == [(3, 5, 7), (0, 4, 4), (2, 6, 3)]
    assert [w["keypoints"].shape for w in want] == [(3, 2, 3), (0, 2, 3), (2, 2, 3)]
    assert want[2]["boxes"].tolist() == cols["boxes"][3:].tolist()
    for g, w in zip(got, want):
        assert g.keys() == w.keys()
        assert (g["image_id"], g["orig_size"], g["size"]) == (w["image_id"], w["orig_size"], w["size"])
        for f in ("boxes", "labels", "iscrowd", "keypoints", "masks"):
            assert g[f].shape == w[f].shape and torch.equal(
                g[f], torch.from_numpy(np.ascontiguousarray(w[f]))
            ), f
    # one tensor per column: the rows' boxes share a storage; the masks are the workers' buffers, not copies
    assert got[0]["boxes"].untyped_storage().data_ptr() == got[2]["boxes"].untyped_storage().data_ptr()
    assert want[2]["masks"].base is cols["masks"][2] or want[2]["masks"].base is cols["masks"][2].base


def _one_image_coco(root: Path, annotations: list[dict[str, Any]], w: int = 40, h: int = 30) -> Path:
    """COCO's layout with one JPEG (``w`` x ``h``, image id 1) and ``annotations`` on it (ids 5, 6, …; each a
    polygon annotation in COCO's key order with the given fields replaced)."""
    (root / "images").mkdir(parents=True, exist_ok=True)
    Image.fromarray(photo(0, w, h)).save(root / "images" / "a.jpg")
    anns = []
    for k, fields in enumerate(annotations):
        ann: dict[str, Any] = {
            "segmentation": [[1.0, 1.0, 10.0, 1.0, 10.0, 10.0]],
            "area": 40.5,
            "iscrowd": 0,
            "image_id": 1,
            "bbox": [1.0, 1.0, 9.0, 9.0],
            "category_id": 1,
            "id": 5 + k,
        }
        anns.append({**ann, **fields})
    path = root / "instances.json"
    path.write_text(
        json.dumps(
            {
                "images": [{"id": 1, "file_name": "a.jpg", "width": w, "height": h}],
                "annotations": anns,
                "categories": [{"supercategory": "thing", "id": 1, "name": "thing"}],
            }
        )
    )
    return path


def test_boxes_that_would_reach_the_model_as_inf_or_inverted_are_refused_when_the_file_is_parsed(
    tmp_path: Path,
) -> None:
    """A finite bbox whose x + w overflows float64 (1e308 + 1e308), or whose corner is beyond float32 (the
    boxes' dtype), reached the model as an inf box; an inverted one (negative w or h) as x2 < x1. Both are
    refused when the file is parsed: a SourceError naming the file and the annotation (index and id)."""
    for bbox, message in [
        (
            [1e308, 0.0, 1e308, 1.0],
            "[1e308, 0.0, 1e308, 1.0]: x = 1e308 is beyond float32's range",
        ),  # x + w: inf
        ([0.0, 0.0, 1e308, 1.0], "x + width = 1e308 is beyond float32's range"),
        ([3e38, 0.0, 1e38, 1.0], "x + width = 4e38 is beyond float32's range"),
        ([0.0, -3.5e38, 1.0, 1.0], "y = -3.5e38 is beyond float32's range"),
        ([5.0, 5.0, -2.0, 3.0], "has a negative width or height"),
        ([5.0, 5.0, 2.0, -0.5], "has a negative width or height"),
    ]:
        ann = _one_image_coco(tmp_path, [{}, {"bbox": bbox}])
        for masks in (False, True):
            with pytest.raises(SourceError, match=rf"annotation 1 \(id 6\): .*{re.escape(message)}") as e:
                trdata.CocoDetection(tmp_path / "images", ann, masks=masks)
            assert e.value.path == str(ann) and str(e.value).startswith(str(ann))
    # up to float32's largest, and empty boxes, are boxes (SanitizeBoundingBoxes drops empty ones)
    ann = _one_image_coco(tmp_path, [{}, {"bbox": [3.4e38, 0.0, 0.0, 0.0]}])
    src = trdata.CocoDetection(tmp_path / "images", ann)
    assert np.isfinite(src._image_targets(0)["boxes"].astype(np.float32)).all()


def test_keypoint_visibilities_other_than_cocos_are_refused_naming_the_annotation(tmp_path: Path) -> None:
    """COCO's visibilities are 0 (not labeled), 1 (labeled, not visible) and 2 (visible); 7 or -1 passed through
    unchanged to the model. Refused when the file is parsed, naming the file, the annotation and the keypoint."""
    for v in (7, -1, 0.5):
        ann = _one_image_coco(tmp_path, [{"keypoints": [1, 2, 2, 3, 4, v], "num_keypoints": 2}])
        with pytest.raises(
            SourceError, match=rf"annotation 0 \(id 5\): keypoint 1's visibility is {float(v)}"
        ):
            trdata.CocoDetection(tmp_path / "images", ann, keypoints=True)
    ann = _one_image_coco(tmp_path, [{"keypoints": [1, 2, 2, 3, 4, 0, 5, 6, 1.0]}])
    kp = trdata.CocoDetection(tmp_path / "images", ann, keypoints=True)._image_targets(0)["keypoints"]
    assert kp[0, :, 2].tolist() == [2.0, 0.0, 1.0]


def test_an_rle_whose_size_is_not_its_images_is_refused_naming_the_annotation(tmp_path: Path) -> None:
    """An RLE segmentation of another size than its image's was decoded at its own size and placed at the
    top-left corner (or cut). The image's height and width are in the file: refused when it is parsed (masks or
    not), naming the file, the annotation, both sizes and the image."""
    w, h = 40, 30
    for mh, mw in [(h, w + 1), (w, h), (h - 1, w)]:
        m = np.asfortranarray(np.ones((mh, mw), np.uint8))
        compressed = {"size": [mh, mw], "counts": mask_api.encode(m)["counts"].decode()}
        uncompressed = {"size": [mh, mw], "counts": [0, mh * mw]}
        for seg in (compressed, uncompressed):
            ann = _one_image_coco(tmp_path, [{}, {"segmentation": seg, "iscrowd": 1}], w, h)
            for masks in (False, True):
                with pytest.raises(
                    SourceError, match=r"annotation 1 \(id 6\): its RLE segmentation's size"
                ) as e:
                    trdata.CocoDetection(tmp_path / "images", ann, masks=masks)
                assert e.value.path == str(ann)
                assert f'is [{mh}, {mw}] (height, width), but its image 1 ("a.jpg") is [{h}, {w}]' in str(
                    e.value
                )
    # its own image's size: a mask
    m = np.asfortranarray(np.ones((h, w), np.uint8))
    seg = {"size": [h, w], "counts": mask_api.encode(m)["counts"].decode()}
    ann = _one_image_coco(tmp_path, [{"segmentation": seg, "iscrowd": 1}], w, h)
    assert (
        trdata.CocoDetection(tmp_path / "images", ann, masks=True)._ann.rles([0])[0] == seg["counts"].encode()
    )


def test_with_masks_every_segmentation_is_checked_when_the_source_is_made(tmp_path: Path) -> None:
    """With masks=True a segmentation that is no mask of its image (RLE runs that do not cover h·w, a compressed
    string that is none, polygons pycocotools refuses, no segmentation) was a SourceError when its batch was made,
    ending the epoch. It is now one when the source is made, naming the file and the annotation; without masks
    the boxes are usable."""
    w, h = 40, 30
    bad = [
        ({"segmentation": {"size": [h, w], "counts": [5, 5]}, "iscrowd": 1}, r"runs sum to 10, not h·w"),
        ({"segmentation": {"size": [h, w], "counts": "~~~"}, "iscrowd": 1}, r"Encoding"),
        ({"segmentation": [[1.0, 2.0, 3.0, 4.0]]}, r"first polygon has 4 numbers"),
        ({"segmentation": []}, r"empty polygon list"),
        ({"segmentation": None}, r"has no segmentation"),
    ]
    for fields, message in bad:
        ann = _one_image_coco(tmp_path, [{}, {}, fields], w, h)
        assert len(trdata.CocoDetection(tmp_path / "images", ann)._image_targets(0)["boxes"]) == 3
        with pytest.raises(SourceError, match=rf"annotation id 7 \(image 1\).*{message}") as e:
            trdata.CocoDetection(tmp_path / "images", ann, masks=True)
        assert e.value.path == str(ann) and str(e.value).startswith(str(ann))
    # the masks made then are the ones the batches use (pycocotools' own)
    ann = _one_image_coco(
        tmp_path, [{}, {"segmentation": [[0.0, 0.0, 20.0, 0.0, 20.0, 15.0, 3.0, 12.0]]}], w, h
    )
    src = trdata.CocoDetection(tmp_path / "images", ann, masks=True)
    want = mask_api.merge(mask_api.frPyObjects([[0.0, 0.0, 20.0, 0.0, 20.0, 15.0, 3.0, 12.0]], h, w))
    assert src._ann.rles([1])[0] == want["counts"]
