"""``exif_transpose=True``: every image is shown as Pillow's ``ImageOps.exif_transpose(Image.open(f))`` shows it.

Compared pixel for pixel with Pillow at full size (CenterCrop to the oriented size: identity geometry) on the real
orientation fixtures (``exif_orient*``) and on files written here by Pillow for all 8 orientations in JPEG, PNG,
WebP and TIFF; on hand-made EXIF/XMP blocks (types, counts, duplicates, offsets out of range, truncation,
split APP1 segments, broken headers) against what Pillow does with the same bytes; and through random crops:
an oriented file gives exactly the batch its upright twin gives (the crop is planned on the oriented size, and the
JPEG region decoded is the stored preimage of the crop).
"""

from __future__ import annotations

import io
import struct
from pathlib import Path

import numpy as np
import PIL
import pytest
import trdata
from _fixtures import photo
from PIL import Image, ImageOps

# Pillow warns about the malformed EXIF blocks made here (that is what they are for).
pytestmark = pytest.mark.filterwarnings("ignore::UserWarning:PIL.TiffImagePlugin")

TRANSPOSE_FOR_STORAGE = {  # stored = upright.transpose(op): a viewer applying orientation n shows `upright`
    1: None,
    2: Image.Transpose.FLIP_LEFT_RIGHT,
    3: Image.Transpose.ROTATE_180,
    4: Image.Transpose.FLIP_TOP_BOTTOM,
    5: Image.Transpose.TRANSPOSE,
    6: Image.Transpose.ROTATE_90,
    7: Image.Transpose.TRANSVERSE,
    8: Image.Transpose.ROTATE_270,
}


def load(path: Path | str, size: tuple[int, int], exif_transpose: bool = True, **kw) -> np.ndarray:
    """The image at full size (`size` = (w, h) as the loader must see it) as uint8 HWC."""
    w, h = size
    with trdata.Loader(
        trdata.FileList([str(path)]),
        batch_size=1,
        workers=1,
        transforms=[trdata.CenterCrop((h, w))],
        dtype="uint8",
        layout="NHWC",
        exif_transpose=exif_transpose,
        **kw,
    ) as ld:
        (batch,) = list(ld)
    return np.array(batch.images[0])


def pillow(path: Path | str, transpose: bool = True) -> np.ndarray:
    with Image.open(path) as im:
        return np.asarray((ImageOps.exif_transpose(im) if transpose else im).convert("RGB"))


def pillow_or_stored(path: Path) -> np.ndarray:
    """Pillow's exif_transpose, or the stored pixels where Pillow raises on a broken block (trdata: orientation 1)."""
    try:
        return pillow(path)
    except Exception:  # noqa: BLE001 - SyntaxError, struct.error...: Pillow's reactions to a broken block
        return pillow(path, transpose=False)


def test_the_default_is_stored_order(edge_dir: Path) -> None:
    assert trdata.loader.DEFAULTS["exif_transpose"] is False
    path = edge_dir / "exif_orient8_2x1__orientation_rectangle.jpg"
    with Image.open(path) as im:
        assert im.size == (2, 1) and im.getexif().get(0x0112) == 8
    with trdata.Loader(
        trdata.FileList([str(path)]),
        batch_size=1,
        workers=1,
        transforms=[trdata.CenterCrop((1, 2))],
        dtype="uint8",
    ) as ld:
        (b,) = list(ld)
    assert b.images.shape == (1, 3, 1, 2)
    np.testing.assert_array_equal(b.images[0].transpose(1, 2, 0), pillow(path, transpose=False))


def test_real_orientation_fixtures_equal_pillow(edge_dir: Path) -> None:
    names = sorted(p.name for p in edge_dir.iterdir() if p.name.startswith("exif_orient"))
    assert len(names) >= 9
    for name in names:
        path = edge_dir / name
        with Image.open(path) as im:
            oriented = ImageOps.exif_transpose(im)
            stored_size = im.size
        got = load(path, oriented.size)
        np.testing.assert_array_equal(got, pillow(path), err_msg=name)
        if oriented.size != stored_size or name.startswith(("exif_orient2", "exif_orient3", "exif_orient4")):
            # the transpose did something visible: the stored order differs
            assert not np.array_equal(load(path, stored_size, exif_transpose=False), got) or got.size <= 3, (
                name
            )


def upright(w: int = 45, h: int = 29) -> Image.Image:
    """A small non-square photo-like image; odd sizes so that no orientation maps it onto itself."""
    return Image.fromarray(photo(11, w, h))


def write(img: Image.Image, path: Path, fmt: str, orientation: int) -> Path:
    exif = Image.Exif()
    exif[0x0112] = orientation
    kw: dict = {"exif": exif.tobytes()}
    if fmt == "JPEG":
        kw.update(quality=95, subsampling="4:4:4")
    elif fmt == "WEBP":
        kw.update(lossless=True)
    img.save(path, fmt, **kw)
    return path


@pytest.mark.parametrize("fmt", ["JPEG", "PNG", "WEBP", "TIFF"])
def test_all_eight_orientations_written_by_pillow(tmp_path: Path, fmt: str) -> None:
    base = upright()
    for n, op in TRANSPOSE_FOR_STORAGE.items():
        stored = base if op is None else base.transpose(op)
        path = write(stored, tmp_path / f"o{n}.{fmt.lower()}", fmt, n)
        with Image.open(path) as im:
            assert im.getexif().get(0x0112) == n, (fmt, n)  # Pillow wrote the tag where Pillow reads it
            assert ImageOps.exif_transpose(im).size == base.size
        got = load(path, base.size)
        np.testing.assert_array_equal(got, pillow(path), err_msg=f"{fmt} orientation {n}")
        if fmt != "JPEG":  # lossless: the oriented image is the upright one
            np.testing.assert_array_equal(got, np.asarray(base), err_msg=f"{fmt} orientation {n}")


RRC = [trdata.RandomResizedCrop(40, scale=(0.2, 1.0)), trdata.RandomHorizontalFlip()]


def batches(paths: list[str], transforms: list, workers: int = 1, **kw) -> np.ndarray:
    with trdata.Loader(
        trdata.FileList(paths),
        batch_size=4,
        workers=workers,
        seed=5,
        transforms=transforms,
        dtype="uint8",
        exif_transpose=True,
        reproducible=True,
        **kw,
    ) as ld:
        return np.concatenate([b.images for b in ld])


@pytest.mark.parametrize("fmt", ["PNG", "WEBP"])
def test_random_crops_are_planned_on_the_oriented_image(tmp_path: Path, fmt: str) -> None:
    """Sample i of a list of oriented files = sample i of their upright twins (same seed: same crop and flip drawn
    from the oriented width and height)."""
    base = upright(61, 37)
    oriented, twins = [], []
    for n, op in TRANSPOSE_FOR_STORAGE.items():
        stored = base if op is None else base.transpose(op)
        oriented.append(str(write(stored, tmp_path / f"o{n}.{fmt.lower()}", fmt, n)))
        twins.append(str(write(base, tmp_path / f"u{n}.{fmt.lower()}", fmt, 1)))
    got = batches(oriented, RRC)
    np.testing.assert_array_equal(got, batches(twins, RRC))
    # and the crops really differ per sample (the comparison is not between constant images)
    assert len({g.tobytes() for g in got}) == len(got)
    np.testing.assert_array_equal(batches(oriented, RRC, workers=2), got)


def test_jpeg_regions_map_through_the_orientation(tmp_path: Path) -> None:
    """JPEG with every orientation, random crops decoded as regions of the stored image (RandomResizedCrop
    upsamples here, so the full-scale decode is used: bit-exact): equal to the same crops over a lossless copy of
    Pillow's exif_transpose of the same files."""
    base = Image.fromarray(photo(4, 83, 50))
    jpegs, pngs = [], []
    for n, op in TRANSPOSE_FOR_STORAGE.items():
        stored = base if op is None else base.transpose(op)
        j = write(stored, tmp_path / f"o{n}.jpg", "JPEG", n)
        jpegs.append(str(j))
        p = tmp_path / f"o{n}.png"
        Image.fromarray(pillow(j)).save(p)
        pngs.append(str(p))
    crops = [trdata.RandomResizedCrop(96, scale=(0.05, 0.6)), trdata.RandomHorizontalFlip()]
    np.testing.assert_array_equal(batches(jpegs, crops), batches(pngs, crops))
    # Resize + CenterCrop (the eval pipeline, full-scale decode for this upsampling size) as well
    ev = [trdata.Resize(120), trdata.CenterCrop(100)]
    np.testing.assert_array_equal(batches(jpegs, ev), batches(pngs, ev))


# ---- hand-made EXIF / XMP blocks against Pillow -------------------------------------------------------------


def ifd(
    endian: str, entries: list[tuple[int, int, int, bytes]], tail: bytes = b"", ifd_offset: int = 8
) -> bytes:
    """A TIFF header + IFD0 of (tag, type, count, 4 value bytes) entries, then `tail` (out-of-line values)."""
    e = "<" if endian == "II" else ">"
    head = (b"II*\0" if endian == "II" else b"MM\0*") + struct.pack(e + "I", ifd_offset)
    body = struct.pack(e + "H", len(entries))
    for tag, typ, count, value in entries:
        body += struct.pack(e + "HHI", tag, typ, count) + value.ljust(4, b"\0")[:4]
    return head + body + struct.pack(e + "I", 0) + tail


def short(v: int, endian: str = "II") -> bytes:
    return struct.pack("<H" if endian == "II" else ">H", v)


def app1(payload: bytes) -> bytes:
    return b"\xff\xe1" + struct.pack(">H", len(payload) + 2) + payload


XMP_NS = b"http://ns.adobe.com/xap/1.0/\0"
_BLOCK_END = 8 + 2 + 12 * 2 + 4  # where `tail` starts in a two-entry IFD


def block_cases() -> dict[str, list[bytes]]:
    """Name → APP1 payloads inserted after SOI, in order."""
    cases: dict[str, list[bytes]] = {}
    for en in ("II", "MM"):
        p = "<" if en == "II" else ">"
        cases[f"{en}-short-6"] = [b"Exif\0\0" + ifd(en, [(0x0112, 3, 1, short(6, en))])]
        cases[f"{en}-long-8"] = [b"Exif\0\0" + ifd(en, [(0x0112, 4, 1, struct.pack(p + "I", 8))])]
        cases[f"{en}-sshort-5"] = [b"Exif\0\0" + ifd(en, [(0x0112, 8, 1, struct.pack(p + "h", 5))])]
        cases[f"{en}-sshort-neg"] = [b"Exif\0\0" + ifd(en, [(0x0112, 8, 1, struct.pack(p + "h", -6))])]
        cases[f"{en}-two-shorts"] = [b"Exif\0\0" + ifd(en, [(0x0112, 3, 2, short(7, en) + short(1, en))])]
        cases[f"{en}-first-wins"] = [
            b"Exif\0\0" + ifd(en, [(0x0112, 3, 1, short(3, en)), (0x0112, 3, 1, short(6, en))])
        ]
        cases[f"{en}-rational-12-over-2"] = [
            b"Exif\0\0"
            + ifd(
                en,
                [(0x0112, 5, 1, struct.pack(p + "I", _BLOCK_END)), (0x010F, 2, 1, b"a")],
                struct.pack(p + "II", 12, 2),
            )
        ]
        cases[f"{en}-rational-den0"] = [
            b"Exif\0\0"
            + ifd(
                en,
                [(0x0112, 5, 1, struct.pack(p + "I", _BLOCK_END)), (0x010F, 2, 1, b"a")],
                struct.pack(p + "II", 6, 0),
            )
        ]
        cases[f"{en}-float-6"] = [b"Exif\0\0" + ifd(en, [(0x0112, 11, 1, struct.pack(p + "f", 6.0))])]
        cases[f"{en}-float-6.5"] = [b"Exif\0\0" + ifd(en, [(0x0112, 11, 1, struct.pack(p + "f", 6.5))])]
        cases[f"{en}-double-3"] = [
            b"Exif\0\0"
            + ifd(
                en,
                [(0x0112, 12, 1, struct.pack(p + "I", _BLOCK_END)), (0x010F, 2, 1, b"a")],
                struct.pack(p + "d", 3.0),
            )
        ]
        cases[f"{en}-value-9"] = [b"Exif\0\0" + ifd(en, [(0x0112, 3, 1, short(9, en))])]
    cases["byte-6"] = [b"Exif\0\0" + ifd("II", [(0x0112, 1, 1, b"\x06")])]
    cases["ascii-6"] = [b"Exif\0\0" + ifd("II", [(0x0112, 2, 2, b"6\0")])]
    cases["unknown-type-then-valid"] = [
        b"Exif\0\0" + ifd("II", [(0x0112, 99, 1, short(3)), (0x0112, 3, 1, short(8))])
    ]
    cases["count-0-then-valid"] = [
        b"Exif\0\0" + ifd("II", [(0x0112, 3, 0, short(3)), (0x0112, 3, 1, short(2))])
    ]
    cases["value-past-end-stops"] = [
        b"Exif\0\0" + ifd("II", [(0x010F, 2, 5, struct.pack("<I", 4000)), (0x0112, 3, 1, short(6))])
    ]
    cases["value-larger-than-block-skipped"] = [
        b"Exif\0\0" + ifd("II", [(0x010F, 2, 10**9, struct.pack("<I", 30)), (0x0112, 3, 1, short(6))])
    ]
    cases["ifd-offset-past-end"] = [b"Exif\0\0" + ifd("II", [(0x0112, 3, 1, short(6))], ifd_offset=5000)]
    cases["truncated-entries"] = [
        b"Exif\0\0" + ifd("II", [(0x010F, 2, 1, b"a"), (0x0112, 3, 1, short(6))])[:25]
    ]
    cases["double-prefix"] = [b"Exif\0\0Exif\0\0" + ifd("II", [(0x0112, 3, 1, short(6))])]
    cases["prefix-only"] = [b"Exif\0\0"]
    cases["garbage-header"] = [b"Exif\0\0" + b"XY*\0\x08\0\0\0" + bytes(20)]
    cases["short-header"] = [b"Exif\0\0II*\0"]
    cases["bigtiff-in-exif"] = [b"Exif\0\0II+\0\x08\0\0\0" + bytes(24)]
    whole = ifd("MM", [(0x010F, 2, 4, b"abc\0"), (0x0112, 3, 1, short(5, "MM"))])
    cases["split-over-two-app1"] = [b"Exif\0\0" + whole[:13], b"Exif\0\0" + whole[13:]]
    xmp_attr = XMP_NS + b'<x:xmpmeta><rdf:Description tiff:Orientation="6"/></x:xmpmeta>'
    xmp_elem = XMP_NS + b"<x:xmpmeta><tiff:Orientation>8</tiff:Orientation></x:xmpmeta>"
    cases["xmp-attr-only"] = [xmp_attr]
    cases["xmp-element-only"] = [xmp_elem]
    cases["xmp-last-wins"] = [xmp_attr, xmp_elem]
    cases["exif-without-orientation-then-xmp"] = [b"Exif\0\0" + ifd("II", [(0x010F, 2, 2, b"a\0")]), xmp_attr]
    cases["exif-orientation-1-hides-xmp"] = [b"Exif\0\0" + ifd("II", [(0x0112, 3, 1, short(1))]), xmp_attr]
    cases["broken-exif-hides-xmp"] = [b"Exif\0\0garbage!", xmp_attr]
    return cases


@pytest.fixture(scope="module")
def plain_jpeg() -> bytes:
    buf = io.BytesIO()
    Image.fromarray(photo(8, 37, 22)).save(buf, "JPEG", quality=95, subsampling="4:4:4")
    return buf.getvalue()


#: Hostile blocks that Pillow 12 and Pillow 13 read differently (a repeated Orientation entry: 13 takes the first;
#: an entry whose value runs past the block: 13 skips it and reads on). trdata follows Pillow 13; the expected
#: outcomes are pinned in test_expected_outcomes_of_a_few_blocks, and the differential test skips them under
#: an older Pillow.
PILLOW_13_RULES = {"II-first-wins", "MM-first-wins", "value-larger-than-block-skipped"}


@pytest.mark.parametrize("case", sorted(block_cases()))
def test_exif_blocks_as_pillow_reads_them(tmp_path: Path, plain_jpeg: bytes, case: str) -> None:
    if case in PILLOW_13_RULES and int(PIL.__version__.split(".")[0]) < 13:
        pytest.skip(
            f"Pillow {PIL.__version__} reads this block by older rules; trdata follows Pillow 13 (pinned below)"
        )
    segments = b"".join(app1(p) for p in block_cases()[case])
    path = tmp_path / f"{case}.jpg"
    path.write_bytes(plain_jpeg[:2] + segments + plain_jpeg[2:])
    want = pillow_or_stored(path)
    got = load(path, (want.shape[1], want.shape[0]))
    np.testing.assert_array_equal(got, want)


def test_expected_outcomes_of_a_few_blocks(tmp_path: Path, plain_jpeg: bytes) -> None:
    """The differential test above must not pass vacuously: these cases do transpose (in Pillow and here)."""
    stored = pillow(io.BytesIO(plain_jpeg), transpose=False)  # type: ignore[arg-type]
    for case, op in [
        ("II-short-6", Image.Transpose.ROTATE_270),
        ("MM-rational-12-over-2", Image.Transpose.ROTATE_270),
        ("II-float-6", Image.Transpose.ROTATE_270),
        ("II-two-shorts", Image.Transpose.TRANSVERSE),
        ("split-over-two-app1", Image.Transpose.TRANSPOSE),
        ("xmp-attr-only", Image.Transpose.ROTATE_270),
        ("exif-without-orientation-then-xmp", Image.Transpose.ROTATE_270),
        ("value-larger-than-block-skipped", Image.Transpose.ROTATE_270),
        ("II-first-wins", Image.Transpose.ROTATE_180),
        ("MM-first-wins", Image.Transpose.ROTATE_180),
    ]:
        path = tmp_path / "x.jpg"
        path.write_bytes(plain_jpeg[:2] + b"".join(app1(p) for p in block_cases()[case]) + plain_jpeg[2:])
        want = np.asarray(Image.fromarray(stored).transpose(op))
        np.testing.assert_array_equal(load(path, (want.shape[1], want.shape[0])), want, err_msg=case)
    for case in ("II-value-9", "byte-6", "garbage-header", "broken-exif-hides-xmp", "value-past-end-stops"):
        path = tmp_path / "y.jpg"
        path.write_bytes(plain_jpeg[:2] + b"".join(app1(p) for p in block_cases()[case]) + plain_jpeg[2:])
        np.testing.assert_array_equal(load(path, (37, 22)), stored, err_msg=case)


def test_orientation_in_memory_and_with_skip(tmp_path: Path, plain_jpeg: bytes) -> None:
    """Bytes sources apply it too; a broken block never makes a sample an error (on_error='raise' passes)."""
    blobs = [
        plain_jpeg[:2] + app1(block_cases()["II-short-6"][0]) + plain_jpeg[2:],
        plain_jpeg[:2] + app1(b"Exif\0\0\xff\xff\xff") + plain_jpeg[2:],
    ]
    with trdata.Loader(
        trdata.Bytes(blobs),
        batch_size=2,
        workers=2,
        transforms=[trdata.Resize((30, 30))],
        dtype="uint8",
        exif_transpose=True,
        on_error="raise",
    ) as ld:
        (b,) = list(ld)
    assert b.images.shape == (2, 3, 30, 30) and ld.stats()["errors_skipped"] == 0
    assert not np.array_equal(b.images[0], b.images[1])  # one rotated, one as stored


def test_exif_transpose_must_be_a_bool(edge_dir: Path) -> None:
    for bad in ("yes", 1, None):
        with pytest.raises(
            trdata.ConfigError, match=r"^invalid exif_transpose: .* must be True or False"
        ) as e:
            trdata.Loader(trdata.FileList([str(edge_dir / "gray__hopper_gray.jpg")]), exif_transpose=bad)
        assert e.value.parameter == "exif_transpose"


def test_webp_metadata_counts_only_when_its_vp8x_flag_is_set(tmp_path: Path) -> None:
    """libwebp's demuxer (Pillow's reader) drops an EXIF or XMP chunk whose VP8X flag is clear."""
    base = upright()
    path = write(base.transpose(Image.Transpose.ROTATE_90), tmp_path / "o6.webp", "WEBP", 6)
    data = bytearray(path.read_bytes())
    assert data[12:16] == b"VP8X" and data[20] & 0x08
    for flags in (data[20], data[20] & ~0x08):
        p = tmp_path / f"f{flags}.webp"
        p.write_bytes(bytes(data[:20]) + bytes([flags]) + bytes(data[21:]))
        want = pillow(p)
        np.testing.assert_array_equal(load(p, (want.shape[1], want.shape[0])), want)
    assert want.shape[:2] == (base.size[0], base.size[1])  # flag cleared: stored (rotated) order


# -------------------- hostile inputs and their regressions -------------------------------------------------


def many_app1_jpeg(segments: int, chunk: int, w: int = 37, h: int = 22) -> bytes:
    """A real JPEG whose EXIF TIFF block is split over `segments` APP1 segments of `chunk` bytes; IFD0's only entry
    is Orientation as RATIONAL 6/1, its value stored straddling the boundary of the last two segments."""
    total = segments * chunk
    at = total - chunk - 4
    head = b"II*\0" + struct.pack("<I", 8) + struct.pack("<H", 1) + struct.pack("<HHII", 0x0112, 5, 1, at)
    block = bytearray(head + struct.pack("<I", 0))
    block += bytes(total - len(block))
    block[at : at + 8] = struct.pack("<II", 6, 1)
    buf = io.BytesIO()
    Image.fromarray(photo(11, w, h)).save(buf, "JPEG", quality=95, subsampling="4:4:4")
    jpeg = buf.getvalue()
    out = bytearray(jpeg[:2])
    for i in range(segments):
        payload = b"Exif\0\0" + bytes(block[i * chunk : (i + 1) * chunk])
        out += b"\xff\xe1" + struct.pack(">H", len(payload) + 2) + payload
    return bytes(out + jpeg[2:])


def full_size(path: Path, size: tuple[int, int], **kw: object) -> np.ndarray:
    """The image through a Loader at full size (`size` = (w, h) as the loader sees it), uint8 HWC."""
    w, h = size
    with trdata.Loader(
        trdata.FileList([str(path)]),
        batch_size=1,
        workers=1,
        transforms=[trdata.CenterCrop((h, w))],
        dtype="uint8",
        layout="NHWC",
        **kw,
    ) as ld:
        (batch,) = list(ld)
    return np.array(batch.images[0])


@pytest.mark.parametrize("segments", [2, 300, 800])
def test_exif_split_over_many_app1_segments_equals_pillow(tmp_path: Path, segments: int) -> None:
    # 1,000 TIFF bytes per segment keeps Pillow's own concatenation (also one copy per segment) quick.
    path = tmp_path / f"many-{segments}.jpg"
    path.write_bytes(many_app1_jpeg(segments, 1000))
    with Image.open(path) as im:
        assert im.getexif().get(0x0112) == 6  # Pillow reads the value from the last two segments
        want = np.asarray(ImageOps.exif_transpose(im).convert("RGB"))
    assert want.shape == (37, 22, 3)
    got = full_size(path, (22, 37), exif_transpose=True)
    np.testing.assert_array_equal(got, want)
    # And without exif_transpose, the stored pixels.
    with Image.open(path) as im:
        stored = np.asarray(im.convert("RGB"))
    np.testing.assert_array_equal(full_size(path, (37, 22)), stored)


def test_a_49_mb_exif_of_800_segments_decodes_oriented(tmp_path: Path) -> None:
    """The report's file (800 segments, 49 MB): oriented as the small ones are (no Pillow here: its own
    concatenation of this file copies ~20 GB)."""
    path = tmp_path / "many-big.jpg"
    path.write_bytes(many_app1_jpeg(800, 61_000))
    assert path.stat().st_size > 48_000_000
    small = tmp_path / "one.jpg"
    small.write_bytes(many_app1_jpeg(2, 1000))
    np.testing.assert_array_equal(
        full_size(path, (22, 37), exif_transpose=True), full_size(small, (22, 37), exif_transpose=True)
    )
