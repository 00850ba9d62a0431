"""The test data tiers themselves (conftest.py): the fixture tier stands in faithfully for ../shared/data.

The properties of the generated edge-case stand-ins are checked against a table that the shared originals are
checked against too (when present), so the table cannot drift from the real files.
"""

from __future__ import annotations

import hashlib
import re
import struct
from pathlib import Path

import _fixtures
import numpy as np
import pytest
from _fixtures import psnr
from conftest import SHARED_EDGE, image_files

Image = pytest.importorskip("PIL.Image")
from PIL import ImageOps, JpegImagePlugin  # noqa: E402

SAMPLING = {0: "4:4:4", 1: "4:2:2", 2: "4:2:0", -1: None}

# name → (format, mode, size, subsampling, progressive, EXIF orientation), as read by Pillow from the shared
# originals (the "format:" lines of their README.txt).
STAND_IN_PROPERTIES = {
    **{
        f"exif_orient{n}_photo__Landscape_{n}.jpg": (
            "JPEG",
            "RGB",
            (1800, 1200) if n < 5 else (1200, 1800),
            "4:2:0",
            False,
            n,
        )
        for n in (0, 2, 3, 4, 5, 6, 7, 8)
    },
    "large_12mp_422__42_IndexError.jpg": ("JPEG", "RGB", (4032, 3024), "4:2:2", False, 1),
    "progressive444_big_icc__icc_profile_big.jpg": ("JPEG", "RGB", (425, 250), "4:4:4", True, None),
    "imagenet_png_disguised_as_jpeg__n02105855_2933.JPEG": ("PNG", "RGBA", (213, 189), None, False, None),
}


def properties(path: Path) -> tuple:
    with Image.open(path) as im:
        sampling = SAMPLING[JpegImagePlugin.get_sampling(im)] if im.format == "JPEG" else None
        return (
            im.format,
            im.mode,
            im.size,
            sampling,
            bool(im.info.get("progressive")),
            im.getexif().get(0x0112),
        )


def jpeg_segments(data: bytes) -> dict[int, list[bytes]]:
    """Marker → payloads of the JPEG segments before the first SOS."""
    segments: dict[int, list[bytes]] = {}
    i = 2
    while i + 4 <= len(data) and data[i] == 0xFF:
        marker, length = data[i + 1], struct.unpack(">H", data[i + 2 : i + 4])[0]
        segments.setdefault(marker, []).append(data[i + 4 : i + 2 + length])
        if marker == 0xDA:
            break
        i += 2 + length
    return segments


def test_edge_case_set_is_complete(edge_dir):
    names = sorted(p.name for p in edge_dir.iterdir() if p.name != "README.txt")
    assert names == _fixtures.edge_case_names()
    assert (edge_dir / "README.txt").is_file()


@pytest.mark.parametrize("name", sorted(STAND_IN_PROPERTIES))
def test_stand_ins_have_the_properties_of_the_originals(edge_dir, name):
    assert properties(edge_dir / name) == STAND_IN_PROPERTIES[name]


def test_stand_in_details(fixture_edge_dir):
    big = jpeg_segments((fixture_edge_dir / "large_12mp_422__42_IndexError.jpg").read_bytes())
    assert struct.unpack(">H", big[0xDD][0])[0] == 4, "restart interval of 4 MCUs"
    icc = jpeg_segments((fixture_edge_dir / "progressive444_big_icc__icc_profile_big.jpg").read_bytes())
    chunks = [s for s in icc.get(0xE2, []) if s.startswith(b"ICC_PROFILE\0")]
    assert len(chunks) >= 6 and sum(len(c) - 14 for c in chunks) >= 390_000
    with Image.open(fixture_edge_dir / "imagenet_png_disguised_as_jpeg__n02105855_2933.JPEG") as im:
        alpha = np.asarray(im)[..., 3]
    assert alpha.min() < 160 and alpha.max() == 255, "a real alpha channel, not an opaque one"


@pytest.mark.parametrize("n", [0, 2, 3, 4, 5, 6, 7, 8])
def test_orientation_stand_ins_show_the_upright_photo(fixture_edge_dir, n):
    """Like the originals: a viewer that applies the EXIF orientation shows the upright photo (orientation 1)."""
    with Image.open(fixture_edge_dir / _fixtures.BASE_PHOTO) as im:
        upright = np.asarray(im.convert("RGB"))
    with Image.open(fixture_edge_dir / f"exif_orient{n}_photo__Landscape_{n}.jpg") as im:
        shown = np.asarray((im if n == 0 else ImageOps.exif_transpose(im)).convert("RGB"))
    assert shown.shape == upright.shape
    assert psnr(shown, upright) > 30.0, n


def test_committed_files_are_the_documented_originals():
    """README.txt lists every committed file with its byte count; with ../shared present, the bytes match it."""
    readme = (_fixtures.COMMITTED_EDGE / "README.txt").read_text()
    documented = dict(re.findall(r"^(\S+)\n    bytes:\s+(\d+)$", readme, flags=re.M))
    committed = _fixtures.committed_edge_files()
    assert {p.name for p in committed} == set(documented)
    for p in committed:
        assert p.stat().st_size == int(documented[p.name]), p.name
        if SHARED_EDGE.is_dir():
            assert p.read_bytes() == (SHARED_EDGE / p.name).read_bytes(), p.name
    assert set(_fixtures.GENERATED_EDGE).isdisjoint(documented)
    assert sum(p.stat().st_size for p in committed) < 1_500_000, "keep the repository small"


def test_generated_imagenet_is_deterministic_and_varied(generated_imagenet, tmp_path):
    files = image_files(generated_imagenet)
    assert len(files) == _fixtures.GENERATED_COUNT
    assert len({p.parent.name for p in files}) >= 5, "several classes"
    kinds = set()
    for p in files:
        with Image.open(p) as im:
            kinds.add((im.mode, SAMPLING[JpegImagePlugin.get_sampling(im)] if im.mode != "L" else None))
    assert {("RGB", "4:2:0"), ("RGB", "4:4:4"), ("L", None)} <= kinds
    # Same seed, same bytes (here with one thread against the session's default thread count).
    from trdata import _core

    again = tmp_path / "again"
    _core.generate_synthetic_dataset(str(again), 20, _fixtures.GENERATED_SEED, threads=1, progress=None)
    first = {p.relative_to(again): hashlib.sha1(p.read_bytes()).hexdigest() for p in image_files(again)}
    other = tmp_path / "other"
    _core.generate_synthetic_dataset(str(other), 20, _fixtures.GENERATED_SEED, threads=2, progress=None)
    assert first == {
        p.relative_to(other): hashlib.sha1(p.read_bytes()).hexdigest() for p in image_files(other)
    }
    assert len(first) == 20
