"""Detection and segmentation data in packed files: ``trdata.pack`` of a CocoDetection (masks, keypoints), a
YoloDetection and a SegmentationFolder, written by the tests in those projects' own layouts, read back with
``trdata.Packed`` in both modes (and from an S3-compatible server on loopback) gives the loader over the source's
batches byte for byte and its ``batch.targets`` exactly — boxes, labels, iscrowd, masks, keypoints, label maps,
image ids and sizes — for 1 and 3 workers, with transforms that move every target (RandomIoUCrop included: its
draw reads the boxes the pack hands the core at open). A pack whose annotation fields disagree, or a resizing
reencode of a detection source, is refused with a typed error."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import trdata
from _fixtures import COCO_IMAGES, targets_with_1_and_3_workers, write_coco, write_voc, write_yolo
from trdata.errors import ConfigError, DecodeError

DETECTION = [
    trdata.RandomIoUCrop(sampler_options=[0.0, 0.3, 0.5, 1.0]),
    trdata.RandomAffine(degrees=15, translate=(0.1, 0.1)),
    trdata.RandomHorizontalFlip(),
    trdata.Resize((40, 48)),
    trdata.SanitizeBoundingBoxes(min_size=2),
]
KW: dict[str, Any] = dict(batch_size=4, seed=11, reproducible=True, shuffle=True, dtype="uint8")


def images_and_targets(source: Any, workers: int, **kw: Any) -> dict[int, tuple[bytes, dict[str, Any]]]:
    """One epoch of a Loader over ``source``: each row's image bytes and targets (numpy), by dataset index."""
    out: dict[int, tuple[bytes, dict[str, Any]]] = {}
    with trdata.Loader(source, workers=workers, **{**KW, **kw}) as ld:
        for b in ld:
            imgs = np.asarray(b.images)
            for r, i in enumerate(b.indices.tolist()[: b.valid]):
                t = {k: (v.numpy() if hasattr(v, "numpy") else v) for k, v in b.targets[r].items()}
                out[i] = (imgs[r].tobytes(), t)
    return out


def assert_same_targets(a: dict[str, Any], b: dict[str, Any]) -> None:
    assert a.keys() == b.keys()
    for k in a:
        if isinstance(a[k], np.ndarray):
            assert a[k].dtype == b[k].dtype and a[k].shape == b[k].shape, k
            np.testing.assert_array_equal(a[k], b[k], err_msg=k)
        else:
            assert a[k] == b[k], k


def assert_pack_serves_the_source(source: Any, pack: Path, n: int, **kw: Any) -> None:
    """Epoch 0 (images and targets, 2 workers vs 3) and epoch 1 (targets, 1 and 3 workers) of the pack, in both
    modes, equal the source's."""
    want = images_and_targets(source, 2, **kw)
    assert sorted(want) == list(range(n))
    want_epoch1 = targets_with_1_and_3_workers(source, n, **{**KW, **kw})[0]
    for mode in ("full", "partial"):
        packed = trdata.Packed(pack, mode, **({"window_blocks": 2} if mode == "partial" else {}))
        assert packed._has_targets and packed.extras == ()
        for run in targets_with_1_and_3_workers(packed, n, **{**KW, **kw}):
            for i in range(n):
                assert_same_targets(run[i], want_epoch1[i])
        got = images_and_targets(packed, 3, **kw)
        for i in range(n):
            assert got[i][0] == want[i][0], f"image {i} ({mode})"


@pytest.fixture(scope="module")
def coco_pack(tmp_path_factory: pytest.TempPathFactory) -> tuple[trdata.CocoDetection, Path]:
    root = tmp_path_factory.mktemp("coco")
    source = trdata.CocoDetection(root / "images", write_coco(root), masks=True)
    dst = root / "coco.trd"
    trdata.pack(source, dst, progress=False, block_bytes=8 << 10)
    return source, dst


def test_a_packed_coco_source_gives_its_images_boxes_and_masks(
    coco_pack: tuple[trdata.CocoDetection, Path],
) -> None:
    source, dst = coco_pack
    assert_pack_serves_the_source(source, dst, COCO_IMAGES, transforms=DETECTION)
    # padded canvases carry the same targets too
    assert_pack_serves_the_source(
        source, dst, COCO_IMAGES, transforms=[trdata.RandomShortestSize([24, 32], 40)], pad_to=(40, 40)
    )


def test_a_packed_coco_keypoints_source_gives_its_keypoints(tmp_path: Path) -> None:
    ann = write_coco(tmp_path, keypoints=True)
    source = trdata.CocoDetection(tmp_path / "images", ann, keypoints=True)
    dst = tmp_path / "kp.trd"
    trdata.pack(source, dst, progress=False)
    tf = [trdata.RandomRotation(20), trdata.RandomHorizontalFlip(), trdata.Resize((36, 36))]
    assert_pack_serves_the_source(source, dst, COCO_IMAGES, transforms=tf)


def test_a_packed_yolo_source_gives_its_boxes_and_masks(tmp_path: Path) -> None:
    write_yolo(tmp_path)
    source = trdata.YoloDetection(tmp_path, "train", masks=True)
    dst = tmp_path / "yolo.trd"
    trdata.pack(source, dst, progress=False)
    assert_pack_serves_the_source(source, dst, len(source), transforms=DETECTION)


def test_a_mosaic_over_a_packed_yolo_source_merges_the_same_boxes_and_masks(tmp_path: Path) -> None:
    """Mosaic's partners come from the pack as from the source: the same canvases, merged boxes and masks."""
    write_yolo(tmp_path)
    source = trdata.YoloDetection(tmp_path, "train")
    dst = tmp_path / "yolo.trd"
    trdata.pack(source, dst, progress=False)
    tf = [trdata.Mosaic(32), trdata.RandomAffine(degrees=0, translate=(0.1, 0.1)), trdata.CenterCrop(32)]
    assert_pack_serves_the_source(source, dst, len(source), transforms=tf)
    with_masks = trdata.YoloDetection(tmp_path, "train", masks=True)
    trdata.pack(with_masks, tmp_path / "m.trd", progress=False)
    assert_pack_serves_the_source(with_masks, tmp_path / "m.trd", len(with_masks), transforms=tf)


def test_a_packed_segmentation_source_gives_its_label_maps(tmp_path: Path) -> None:
    write_voc(tmp_path)
    source = trdata.SegmentationFolder(tmp_path / "JPEGImages", tmp_path / "SegmentationClass")
    dst = tmp_path / "voc.trd"
    trdata.pack(source, dst, progress=False)
    tf = [trdata.RandomResizedCrop(32), trdata.RandomRotation(10), trdata.RandomHorizontalFlip()]
    assert_pack_serves_the_source(source, dst, len(source), transforms=tf)


def test_resizing_a_detection_source_and_reserved_names_are_refused(
    coco_pack: tuple[trdata.CocoDetection, Path], tmp_path: Path
) -> None:
    source, _ = coco_pack
    with pytest.raises(ConfigError, match="annotations are in the pixels") as info:
        trdata.pack(source, tmp_path / "x.trd", reencode=trdata.Reencode(max_side=32), progress=False)
    assert info.value.parameter == "max_side"
    assert not (tmp_path / "x.trd").exists()
    # a classification source may not pose as a detection pack
    blob = io.BytesIO()
    from PIL import Image

    Image.new("RGB", (8, 8)).save(blob, "JPEG")
    fake = trdata.Bytes([blob.getvalue()], [0], extras={"target.boxes": [np.zeros((1, 4))]})
    with pytest.raises(ConfigError, match="reserved") as info:
        trdata.pack(fake, tmp_path / "y.trd", progress=False)
    assert info.value.parameter == "extras"


def test_a_pack_whose_annotation_fields_disagree_is_refused_naming_the_record(
    coco_pack: tuple[trdata.CocoDetection, Path], tmp_path: Path
) -> None:
    """A detection pack written by something else (the section's CRCs valid, the fields not): two labels for
    three boxes. The Packed source reads the fields when a batch needs them and names the record."""
    from trdata.sources import packed_targets

    source, _ = coco_pack

    class Forged(trdata.CocoDetection):
        def _pack_extras(self, i: int) -> list[tuple[str, int, bytes]]:
            t = self._image_targets(i)
            labels = t["labels"][:-1] if i == 2 else t["labels"]
            return packed_targets.encode(
                {
                    "boxes": t["boxes"],
                    "labels": labels,
                    "iscrowd": t["iscrowd"],
                    "size": self._sizes[i],
                    "image_id": 1,
                }
            )

    forged = Forged(source.root, source.ann_file)
    dst = tmp_path / "forged.trd"
    trdata.pack(forged, dst, progress=False)
    with pytest.raises(DecodeError, match=r"forged.trd#2: target.labels has shape") as info:
        images_and_targets(trdata.Packed(dst), 1, on_error="raise", transforms=[trdata.Resize((32, 32))])
    assert info.value.index == 2 and info.value.kind == "Target"  # read by a worker: the sample's error


def test_a_detection_pack_streams_from_s3(coco_pack: tuple[trdata.CocoDetection, Path]) -> None:
    pytest.importorskip("moto", reason="the S3 tests run moto's server (pip install 'moto[server]')")
    from _servers import s3_client, start_moto

    source, dst = coco_pack
    proc, endpoint = start_moto()
    try:
        s3_client(endpoint).create_bucket(Bucket="det")
        s3_client(endpoint).put_object(Bucket="det", Key="coco.trd", Body=dst.read_bytes())
        opts = {
            "aws_endpoint": endpoint,
            "aws_allow_http": True,
            "aws_access_key_id": "testing",
            "aws_secret_access_key": "testing",
            "aws_region": "us-east-1",
        }
        remote = trdata.Packed("s3://det/coco.trd", "partial", window_blocks=2, storage_options=opts)
        want = images_and_targets(source, 2, transforms=DETECTION)
        got = images_and_targets(remote, 3, transforms=DETECTION)
        for i in range(COCO_IMAGES):
            assert got[i][0] == want[i][0]
            assert_same_targets(got[i][1], want[i][1])
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_a_checkpoint_of_the_source_resumes_over_the_pack_with_the_same_targets(
    coco_pack: tuple[trdata.CocoDetection, Path],
) -> None:
    """Resume is exact for detection: a state_dict taken mid-epoch from a loader over the COCO source, loaded into
    a loader over its pack (full: the source's order; other worker count), gives the rest of the epoch's images
    and targets exactly; so does one of a partial-mode loader (its own block order) resumed over the pack."""
    source, dst = coco_pack
    kw: dict[str, Any] = {**KW, "batch_size": 2, "transforms": DETECTION}

    def rows(batches: list[Any]) -> list[tuple[int, bytes, dict[str, Any]]]:
        out = []
        for b in batches:
            imgs = np.asarray(b.images)
            for r, i in enumerate(b.indices.tolist()[: b.valid]):
                t = {k: (v.numpy() if hasattr(v, "numpy") else v) for k, v in b.targets[r].items()}
                out.append((i, imgs[r].tobytes(), t))
        return out

    def partial() -> trdata.Packed:
        return trdata.Packed(dst, "partial", window_blocks=2)

    for before, after in [(lambda: source, lambda: trdata.Packed(dst)), (partial, partial)]:
        with trdata.Loader(before(), workers=2, **kw) as ld:
            whole = rows(list(ld))
        with trdata.Loader(before(), workers=2, **kw) as ld:
            it = iter(ld)
            first = rows([next(it) for _ in range(2)])
            state = ld.state_dict()
        with trdata.Loader(after(), workers=3, **kw) as ld:
            ld.load_state_dict(state)
            rest = rows(list(ld))
        assert [r[0] for r in first + rest] == [r[0] for r in whole]
        for (i, img, t), (_, want_img, want_t) in zip(first + rest, whole):
            assert img == want_img, i
            assert_same_targets(t, want_t)
