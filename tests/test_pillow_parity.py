"""Pillow parity of the eval pipeline: trdata's Resize(256) + CenterCrop(224), uint8 NHWC, against what torchvision
computes with its PIL backend — ``img.convert('RGB').resize((w, h), Image.BILINEAR)`` followed by the centre crop
— on every image of ``imagenet_root`` (the 1,000-image ImageNet sample and/or the generated set, see conftest.py)
plus every edge-case file Pillow can decode. Acceptance: PSNR >= 35 dB on every image. (At full-size decode trdata is bit-exact with Pillow 13; the default eval pipeline may decode large
images at a DCT scale that keeps the crop >= 2x the output, which costs a little exactness, never 35 dB.)
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from _fixtures import psnr

Image = pytest.importorskip("PIL.Image")

import trdata  # noqa: E402  (after the importorskip)

MIN_PSNR_DB = 35.0
SIZE, CROP = 256, 224
# Edge cases Pillow itself refuses (the "Pillow:" column of the edge-cases README.txt): 12-bit samples and truncation.
PILLOW_REFUSES = {
    "precision12bit__monkey12.jpg",
    "truncated_progressive__truncated_jpeg.jpg",
    "truncated_baseline_ultrahdr__ultrahdr.jpg",
}


def _images(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.suffix.lower() in (".jpeg", ".jpg", ".png", ".mpo"))


def pillow_eval(path: str | Path) -> np.ndarray:
    """torchvision ``Resize(256)`` + ``CenterCrop(224)`` on a PIL image (no EXIF transpose, like ImageFolder)."""
    with Image.open(path) as im:
        img = im.convert("RGB")
    w, h = img.size
    short, long = (w, h) if w <= h else (h, w)
    new_short, new_long = SIZE, int(SIZE * long / short)
    nw, nh = (new_short, new_long) if w <= h else (new_long, new_short)
    img = img.resize((nw, nh), Image.BILINEAR)
    top, left = round((nh - CROP) / 2.0), round((nw - CROP) / 2.0)  # Python rounds halves to even
    return np.asarray(img.crop((left, top, left + CROP, top + CROP)))


def _pillow_decodes(path: Path) -> bool:
    try:
        with Image.open(path) as im:
            im.load()
        return True
    except OSError:  # Pillow cannot open 12-bit JPEGs (UnidentifiedImageError) and refuses truncated files
        return False


def run_parity(paths: list[str]) -> dict[str, float]:
    """PSNR of every image of `paths` (trdata vs Pillow), keyed by path."""
    loader = trdata.Loader(
        trdata.FileList(paths, list(range(len(paths)))),
        batch_size=32,
        transforms=[trdata.Resize(SIZE), trdata.CenterCrop(CROP)],
        normalize=None,
        dtype="uint8",
        layout="NHWC",
        shuffle=False,
        workers=2,
        reproducible=True,
        last_batch="partial",
    )
    scores: dict[str, float] = {}
    with loader:
        for batch in loader:
            images = np.asarray(batch.images)
            assert images.shape[1:] == (CROP, CROP, 3) and images.dtype == np.uint8
            for row, index in zip(images[: batch.valid], np.asarray(batch.indices)[: batch.valid]):
                path = paths[int(index)]
                assert path not in scores, f"{path} delivered twice"
                scores[path] = psnr(row, pillow_eval(path))
    assert len(scores) == len(paths), f"{len(paths) - len(scores)} images never delivered"
    return scores


def _report(scores: dict[str, float]) -> tuple[float, str]:
    worst = min(scores, key=scores.__getitem__)
    exact = sum(1 for v in scores.values() if v == math.inf)
    print(f"\n{len(scores)} images: {exact} bit-exact, worst {scores[worst]:.2f} dB ({Path(worst).name})")
    return scores[worst], worst


def test_eval_pipeline_matches_pillow_on_every_imagenet_image(imagenet_root):
    paths = [str(p) for p in _images(imagenet_root)]
    assert len(paths) == len(trdata.ImageFolder(imagenet_root)) >= 100
    scores = run_parity(paths)
    worst, name = _report(scores)
    below = {Path(p).name: round(v, 2) for p, v in scores.items() if v < MIN_PSNR_DB}
    assert not below, f"{len(below)} images below {MIN_PSNR_DB} dB: {below}"
    assert worst >= MIN_PSNR_DB, name


def test_eval_pipeline_matches_pillow_on_edge_cases(edge_dir):
    """Every edge case Pillow decodes (gray, CMYK, 4:4:0, progressive, PNG with alpha, the PNG named .JPEG, MPO,
    12 MP, 1x1, 284x25, ...) goes through trdata's eval pipeline within 35 dB of Pillow."""
    images = _images(edge_dir)
    paths = [str(p) for p in images if _pillow_decodes(p)]
    assert {p.name for p in images} - {Path(p).name for p in paths} == PILLOW_REFUSES
    scores = run_parity(paths)
    _report(scores)
    below = {Path(p).name: round(v, 2) for p, v in scores.items() if v < MIN_PSNR_DB}
    assert not below, f"below {MIN_PSNR_DB} dB: {below}"
