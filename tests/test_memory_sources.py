"""In-memory sources: trdata.Arrays (raw uint8 pixels, no decode) and trdata.Bytes (encoded images in memory).

The reference is the file path of the same loader: an Arrays source must give exactly the bytes a FileList of
lossless PNGs of the same pixels gives (same geometry, same random draws, no decode on one side), and a Bytes
source exactly what a FileList of the same files gives."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
import trdata
from PIL import Image

RRC_FLIP = [trdata.RandomResizedCrop(24, scale=(0.3, 1.0)), trdata.RandomHorizontalFlip()]
KW = dict(
    batch_size=7, dtype="uint8", layout="NHWC", shuffle=True, seed=11, reproducible=True, last_batch="partial"
)


def images(n: int = 40, h: int = 37, w: int = 45, c: int | None = 3, seed: int = 0) -> np.ndarray:
    """Smooth random images (a gradient plus noise), so that resampling has structure to get wrong."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:h, 0:w]
    base = (xx * 255 // max(w - 1, 1) + yy * 97 // max(h - 1, 1)) % 256
    shape = (n, h, w) if c is None else (n, h, w, c)
    noise = rng.integers(0, 60, shape)
    base = base[None, :, :] if c is None else base[None, :, :, None]
    return ((base + noise) % 256).astype(np.uint8)


def png_bytes(a: np.ndarray) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(a).save(buf, format="PNG")
    return buf.getvalue()


def run(source: trdata.Source, workers: int = 2, **kw: object) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    with trdata.Loader(
        source, workers=workers, transforms=kw.pop("transforms", RRC_FLIP), **{**KW, **kw}
    ) as ld:
        bs = list(ld)
    return (
        np.concatenate([b.images for b in bs]),
        np.concatenate([b.labels for b in bs]),
        np.concatenate([b.indices for b in bs]),
    )


@pytest.fixture(scope="module")
def rgb() -> np.ndarray:
    return images()


@pytest.fixture(scope="module")
def rgb_files(tmp_path_factory: pytest.TempPathFactory, rgb: np.ndarray) -> list[str]:
    root = tmp_path_factory.mktemp("rgb_png")
    paths = []
    for i, a in enumerate(rgb):
        p = root / f"{i:03d}.png"
        p.write_bytes(png_bytes(a))
        paths.append(str(p))
    return paths


def test_arrays_equal_the_same_pixels_decoded_from_png(rgb: np.ndarray, rgb_files: list[str]) -> None:
    labels = list(range(100, 100 + len(rgb)))
    a_img, a_lab, a_idx = run(trdata.Arrays(rgb, labels))
    f_img, f_lab, f_idx = run(trdata.FileList(rgb_files, labels))
    assert np.array_equal(a_idx, f_idx) and np.array_equal(a_lab, f_lab)
    assert np.array_equal(a_img, f_img)
    # exactly once, and the random crops really differ from a plain resize
    assert sorted(a_idx.tolist()) == list(range(len(rgb)))
    assert not np.array_equal(a_img, run(trdata.Arrays(rgb, labels), transforms=[trdata.Resize((24, 24))])[0])


def test_arrays_full_size_centre_crop_is_the_identity(rgb: np.ndarray) -> None:
    out, labels, idx = run(trdata.Arrays(rgb), transforms=[trdata.CenterCrop((37, 45))], shuffle=False)
    assert np.array_equal(out, rgb) and np.array_equal(idx, np.arange(len(rgb))) and not labels.any()


def test_gray_arrays_with_channels_3_come_out_as_three_equal_channels(rgb: np.ndarray) -> None:
    gray = images(c=None, seed=3)
    gray_img, _, _ = run(trdata.Arrays(gray), channels=3)
    rgb_img, _, _ = run(trdata.Arrays(np.repeat(gray[..., None], 3, axis=-1)))
    assert np.array_equal(gray_img, rgb_img)
    one = run(trdata.Arrays(gray[..., None]), channels=3)[0]  # (N, H, W, 1) is gray too
    assert np.array_equal(one, gray_img)
    # by default a gray source keeps its one channel (tests/test_channels.py): the same values
    assert np.array_equal(run(trdata.Arrays(gray))[0], gray_img[..., :1])


def test_arrays_are_reproducible_across_worker_counts_and_resume(rgb: np.ndarray) -> None:
    src = trdata.Arrays(rgb, list(range(len(rgb))))
    one = run(src, workers=1)
    three = run(src, workers=3)
    assert all(np.array_equal(a, b) for a, b in zip(one, three))
    with trdata.Loader(src, workers=2, transforms=RRC_FLIP, **KW) as ld:
        it = iter(ld)
        first = [next(it).images.copy() for _ in range(2)]
        state = ld.state_dict()
    with trdata.Loader(src, workers=3, transforms=RRC_FLIP, **KW) as ld:
        ld.load_state_dict(state)
        rest = [b.images.copy() for b in ld]
    assert np.array_equal(np.concatenate(first + rest), one[0])


def test_arrays_copy_strided_views_correctly(rgb: np.ndarray) -> None:
    wide = np.zeros((len(rgb), 37, 90, 3), np.uint8)
    wide[:, :, ::2] = rgb  # a strided view: every other column
    view = wide[:, :, ::2]
    assert not view.flags.c_contiguous
    assert np.array_equal(run(trdata.Arrays(view))[0], run(trdata.Arrays(rgb))[0])


@pytest.mark.parametrize(
    ("images_", "targets", "param", "match"),
    [
        (np.zeros((4, 8, 8, 3), np.float32), None, "images", "uint8"),
        (np.zeros((4, 8), np.uint8), None, "images", r"\(N, H, W\)"),
        (np.zeros((4, 8, 8, 3, 1), np.uint8), None, "images", r"\(N, H, W\)"),
        (np.zeros((4, 8, 8, 2), np.uint8), None, "images", "channels must be 1"),
        (np.zeros((0, 8, 8, 3), np.uint8), None, "images", "at least one"),
        (np.zeros((4, 0, 8, 3), np.uint8), None, "images", "1..=65535"),
        (np.zeros((4, 8, 8, 3), np.uint8), [1, 2, 3], "labels", "one per image"),
        (np.zeros((4, 8, 8, 3), np.uint8), ["a"] * 4, "labels", "string"),
    ],
)
def test_bad_arrays_are_config_errors_naming_the_parameter(images_, targets, param, match) -> None:
    with pytest.raises(trdata.ConfigError, match=match) as e:
        trdata.Arrays(images_, targets)
    assert e.value.parameter == param


def test_bytes_equal_the_same_files(rgb_files: list[str], tmp_path: Path) -> None:
    blobs = [Path(p).read_bytes() for p in rgb_files]
    # a JPEG among the PNGs: both decoders run from memory
    jpeg = io.BytesIO()
    Image.fromarray(images(1, 40, 48, seed=5)[0]).save(jpeg, format="JPEG", quality=90)
    (tmp_path / "x.jpg").write_bytes(jpeg.getvalue())
    blobs.append(jpeg.getvalue())
    files = [*rgb_files, str(tmp_path / "x.jpg")]
    labels = [i % 5 for i in range(len(blobs))]
    b = run(trdata.Bytes(blobs, labels))
    f = run(trdata.FileList(files, labels))
    assert all(np.array_equal(x, y) for x, y in zip(b, f))
    assert sorted(b[2].tolist()) == list(range(len(blobs)))


def test_a_corrupt_blob_is_a_decode_error_naming_it_or_is_skipped_and_counted(rgb: np.ndarray) -> None:
    blobs = [png_bytes(a) for a in rgb[:10]]
    blobs[4] = blobs[4][:40]  # truncated
    with pytest.raises(trdata.DecodeError, match=r"<memory>\[4\]"):
        run(trdata.Bytes(blobs), shuffle=False)
    with trdata.Loader(trdata.Bytes(blobs), workers=2, transforms=RRC_FLIP, on_error="skip", **KW) as ld:
        idx = np.concatenate([b.indices for b in ld])
        assert ld.stats()["errors_skipped"] == 1
    assert 4 not in idx.tolist() and len(idx) == 10


@pytest.mark.parametrize(
    ("blobs", "targets", "param"),
    [
        ([], None, "blobs"),
        (b"abc", None, "blobs"),
        ({b"a", b"b"}, None, "blobs"),
        ([b"a", "b"], None, "blobs"),
        ([b"a", b"b"], [1], "labels"),
    ],
)
def test_bad_bytes_are_config_errors_naming_the_parameter(blobs, targets, param) -> None:
    with pytest.raises(trdata.ConfigError) as e:
        trdata.Bytes(blobs, targets)
    assert e.value.parameter == param


def test_classes_name_the_targets_as_torchvision_does(rgb: np.ndarray) -> None:
    src = trdata.Arrays(rgb[:3], [2, 0, 1], classes=["cat", "dog", "emu"])
    assert src.classes == ["cat", "dog", "emu"] and src.class_to_idx == {"cat": 0, "dog": 1, "emu": 2}
    assert trdata.Bytes([png_bytes(rgb[0])], classes=("a",)).class_to_idx == {"a": 0}
    for bad in ("abc", {"a", "b"}, ["a", 1], ["a", "a"]):
        with pytest.raises(trdata.ConfigError) as e:
            trdata.Arrays(rgb[:1], classes=bad)
        assert e.value.parameter == "classes"


def test_good_blobs_after_a_bad_one_on_the_same_worker_are_untouched(rgb: np.ndarray) -> None:
    """One worker decodes a truncated, a garbage and a huge-header blob among good ones (skip policy): every good
    sample's pixels equal those of a clean run — decoder state never survives a failure."""
    good = [png_bytes(a) for a in rgb[:12]]
    bad = list(good)
    bad[3] = good[3][: len(good[3]) // 3]  # truncated
    bad[6] = b"\xff\xd8\xff garbage" * 20  # a JPEG start, then nothing valid
    bad[9] = good[9][:16] + (60000).to_bytes(4, "big") * 2 + good[9][24:]  # IHDR claims 60000×60000
    clean = run(trdata.Bytes(good), workers=1, shuffle=False)
    with trdata.Loader(
        trdata.Bytes(bad), workers=1, transforms=RRC_FLIP, on_error="skip", **{**KW, "shuffle": False}
    ) as ld:
        bs = list(ld)
        assert ld.stats()["errors_skipped"] == 3
    images = np.concatenate([b.images for b in bs])
    indices = np.concatenate([b.indices for b in bs]).tolist()
    assert not {3, 6, 9} & set(indices)
    by_index = {int(j): clean[0][k] for k, j in enumerate(clean[2])}
    for row, j in zip(images, indices):
        assert np.array_equal(row, by_index[j])
