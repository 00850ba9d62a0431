"""Decoder hardening: one hostile file never changes another file's pixels, truncated JPEGs fail in every
epoch whatever the crop, decode bombs are refused, and 16-bit PNGs convert exactly like Pillow's .convert('RGB').

Every input is written by the test itself (Pillow, zlib), so this runs from any clone.
"""

from __future__ import annotations

import io
import struct
import zlib

import numpy as np
import pytest
import trdata
from _fixtures import photo
from PIL import Image

EVAL = [trdata.Resize(40), trdata.CenterCrop(32)]


def write_jpeg(path, seed: int, w: int = 72, h: int = 56, **kw) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(photo(seed, w, h)).save(buf, "JPEG", quality=90, **kw)
    path.write_bytes(buf.getvalue())
    return buf.getvalue()


def segment(data: bytes, code: int) -> int:
    """Offset of the first header segment with marker `code` (walking segment lengths from SOI)."""
    pos = 2
    while data[pos] == 0xFF and data[pos + 1] != 0xDA:
        if data[pos + 1] == code:
            return pos
        pos += 2 + struct.unpack(">H", data[pos + 2 : pos + 4])[0]
    raise AssertionError(f"no marker {code:#x}")


def hostile_variants(good: bytes) -> dict[str, bytes]:
    sof, dht = segment(good, 0xC0), segment(good, 0xC4)
    b = bytearray(good)
    out = {}
    z = bytearray(good)
    z[sof + 5 : sof + 9] = b"\0\0\0\0"
    out["zero_dims"] = bytes(z)
    z = bytearray(good)
    z[sof + 11] = 0
    out["zero_sampling"] = bytes(z)
    z = bytearray(good)
    z[sof + 9] = 7
    out["sof_7_components"] = bytes(z)
    z = bytearray(good)
    z[dht + 5] ^= 0x40
    out["bitflip_dht"] = bytes(z)
    out["truncated_dht"] = bytes(b[: dht + 12])
    return out


def loader(paths, **kw):
    kw.setdefault("transforms", EVAL)
    kw.setdefault("dtype", "uint8")
    kw.setdefault("layout", "NHWC")
    kw.setdefault("workers", 1)
    return trdata.Loader(trdata.FileList([str(p) for p in paths], list(range(len(paths)))), **kw)


def rows_by_path(paths, **kw):
    """{path: image row} over one epoch, plus the stats."""
    got = {}
    with loader(paths, **kw) as ld:
        for b in ld:
            for i, img in zip(b.indices.tolist(), b.images):
                got.setdefault(str(paths[i]), np.array(img))
        return got, ld.stats()


@pytest.mark.parametrize(
    "variant", ["zero_dims", "zero_sampling", "sof_7_components", "bitflip_dht", "truncated_dht"]
)
def test_one_hostile_jpeg_never_changes_the_good_images(tmp_path, variant):
    goods = []
    first = None
    for i in range(16):
        p = tmp_path / f"good_{i:02d}.jpg"
        data = write_jpeg(p, seed=i, w=64 + 3 * i, h=48 + 2 * i)
        first = first or data
        goods.append(p)
    bad = tmp_path / f"bad_{variant}.jpg"
    bad.write_bytes(hostile_variants(first)[variant])
    with_bad = goods[:3] + [bad] + goods[3:]

    clean, _ = rows_by_path(goods, batch_size=4)
    got, stats = rows_by_path(with_bad, batch_size=4, on_error="skip", reproducible=True, shuffle=False)
    assert stats["errors_skipped"] == 1
    assert str(bad) not in got
    assert set(got) == {str(p) for p in goods}
    for p in goods:
        np.testing.assert_array_equal(got[str(p)], clean[str(p)], err_msg=p.name)


def test_truncated_jpeg_fails_in_every_epoch_whatever_the_crop(tmp_path):
    data = write_jpeg(tmp_path / "full.jpg", seed=3, w=320, h=240)
    cut = tmp_path / "cut.jpg"
    cut.write_bytes(data[: len(data) * 3 // 4])
    rrc = [trdata.RandomResizedCrop(32)]
    with loader([cut], transforms=rrc, batch_size=1, seed=7) as ld:
        for epoch in range(12):
            ld.set_epoch(epoch)
            with pytest.raises(trdata.DecodeError) as exc:
                list(ld)
            assert exc.value.kind == "Corrupt" and "truncated" in str(exc.value)


def png_bytes(w: int, h: int, color_type: int, depth: int, raw_rows: list[bytes]) -> bytes:
    def chunk(kind: bytes, payload: bytes) -> bytes:
        return (
            struct.pack(">I", len(payload)) + kind + payload + struct.pack(">I", zlib.crc32(kind + payload))
        )

    ihdr = struct.pack(">IIBBBBB", w, h, depth, color_type, 0, 0, 0)
    idat = zlib.compress(b"".join(b"\0" + r for r in raw_rows))
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", idat) + chunk(b"IEND", b"")


@pytest.mark.parametrize(
    "color_type,channels", [(0, 1), (4, 2), (2, 3), (6, 4)], ids=["L16", "LA16", "RGB16", "RGBA16"]
)
def test_16bit_png_matches_pillow_convert_rgb(tmp_path, color_type, channels):
    w, h = 16, 8
    rng = np.random.default_rng(color_type)
    # Values both ≤ 255 (where the high byte is 0) and across the whole 16-bit range.
    samples = np.concatenate(
        [rng.integers(0, 256, (h // 2, w, channels)), rng.integers(0, 65536, (h // 2, w, channels))]
    ).astype(">u2")
    f = tmp_path / f"ct{color_type}.png"
    f.write_bytes(png_bytes(w, h, color_type, 16, [row.tobytes() for row in samples]))
    expected = np.asarray(Image.open(f).convert("RGB"))
    with loader([f], transforms=[trdata.CenterCrop((h, w))], batch_size=1) as ld:
        (b,) = list(ld)
    np.testing.assert_array_equal(b.images[0], expected)
    if color_type == 0:  # 16-bit gray holding values ≤ 255 keeps them (not the near-black high byte)
        assert b.images[0][: h // 2].max() > 200


def test_png_claiming_100_megapixels_with_no_data_is_refused(tmp_path):
    f = tmp_path / "bomb.png"
    ihdr = struct.pack(">IIBBBBB", 10_000, 10_000, 16, 6, 0, 0, 0)

    def chunk(kind: bytes, payload: bytes) -> bytes:
        return (
            struct.pack(">I", len(payload)) + kind + payload + struct.pack(">I", zlib.crc32(kind + payload))
        )

    f.write_bytes(
        b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"")) + chunk(b"IEND", b"")
    )
    assert f.stat().st_size < 100
    with loader([f], batch_size=1) as ld, pytest.raises(trdata.DecodeError) as exc:
        list(ld)
    assert exc.value.kind == "Corrupt"


def test_progressive_scan_bomb_is_refused(tmp_path):
    buf = io.BytesIO()
    Image.fromarray(photo(1, 64, 64)).save(buf, "JPEG", quality=90, progressive=True)
    data = buf.getvalue()
    last_sos = data.rindex(b"\xff\xda")
    bomb = data[:-2] + data[last_sos:-2] * 2000 + b"\xff\xd9"
    f = tmp_path / "scans.jpg"
    f.write_bytes(bomb)
    with loader([f], batch_size=1) as ld, pytest.raises(trdata.DecodeError) as exc:
        list(ld)
    assert exc.value.kind == "TooLarge" and "scans" in str(exc.value)


def jpeg_segments(data: bytes) -> list[tuple[int, int, int]]:
    """(marker, start, end) of every segment of a JPEG, the ones between progressive scans included."""
    out, pos = [], 2
    while pos + 1 < len(data) and data[pos] == 0xFF:
        m = data[pos + 1]
        if m == 0xFF:
            pos += 1
            continue
        if m == 0xD9:
            break
        if m == 0x01 or 0xD0 <= m <= 0xD7:
            pos += 2
            continue
        end = pos + 2 + struct.unpack(">H", data[pos + 2 : pos + 4])[0]
        out.append((m, pos, end))
        pos = end
        if m == 0xDA:  # entropy-coded data up to the next real marker
            while pos + 1 < len(data) and not (
                data[pos] == 0xFF and data[pos + 1] not in (0x00, 0xFF) and not 0xD0 <= data[pos + 1] <= 0xD7
            ):
                pos += 1
    return out


def without_segments(data: bytes, code: int) -> bytes:
    out = bytearray(data)
    for m, start, end in reversed(jpeg_segments(data)):
        if m == code:
            del out[start:end]
    return bytes(out)


def test_jpegs_missing_tables_decode_as_pillow_whatever_the_worker_decoded_before(tmp_path):
    """libjpeg keeps the DQT/DHT tables of earlier images in a handle, and a worker reuses one: a file without
    DHT must still decode with the standard tables (as Pillow, one decompressor per image), a file without DQT must
    still fail, after images with optimized Huffman / other quantization tables as on a fresh worker."""
    w, h = 64, 48
    buf = io.BytesIO()
    Image.fromarray(photo(5, w, h)).save(buf, "JPEG", quality=90)  # libjpeg's standard Huffman tables
    good = buf.getvalue()
    no_dht, no_dqt = without_segments(good, 0xC4), without_segments(good, 0xDB)
    assert len(no_dht) < len(good) - 300 and len(no_dqt) < len(good) - 100
    expected = np.asarray(Image.open(io.BytesIO(no_dht)).convert("RGB"))
    np.testing.assert_array_equal(expected, np.asarray(Image.open(io.BytesIO(good)).convert("RGB")))
    with pytest.raises(OSError):
        Image.open(io.BytesIO(no_dqt)).load()

    def put(name: str, data: bytes):
        p = tmp_path / name
        p.write_bytes(data)
        return p

    optimized = io.BytesIO()
    Image.fromarray(photo(6, w, h)).save(optimized, "JPEG", quality=40, optimize=True)
    progressive = io.BytesIO()
    Image.fromarray(photo(7, w, h)).save(progressive, "JPEG", quality=75, progressive=True)
    order = [
        put("a_optimized.jpg", optimized.getvalue()),
        put("b_no_dht.jpg", no_dht),
        put("c_progressive.jpg", progressive.getvalue()),
        put("d_no_dqt.jpg", no_dqt),
        put("e_no_dht.jpg", no_dht),
        put("f_optimized.jpg", optimized.getvalue()),
        put("g_no_dqt.jpg", no_dqt),
        put("h_no_dht.jpg", no_dht),
    ]
    full = [trdata.CenterCrop((h, w))]  # the whole image at full scale: the decoded pixels themselves
    got, stats = rows_by_path(order, transforms=full, batch_size=1, on_error="skip", shuffle=False)
    assert stats["errors_skipped"] == 2
    assert {p.name for p in order} - {p.rsplit("/", 1)[-1] for p in got} == {"d_no_dqt.jpg", "g_no_dqt.jpg"}
    for name in ("b_no_dht.jpg", "e_no_dht.jpg", "h_no_dht.jpg"):
        np.testing.assert_array_equal(got[str(tmp_path / name)], expected, err_msg=name)
    # A fresh worker: the same outcome.
    alone, _ = rows_by_path([order[1]], transforms=full, batch_size=1)
    np.testing.assert_array_equal(alone[str(order[1])], expected)
    with loader([order[3]], transforms=full, batch_size=1) as ld, pytest.raises(trdata.DecodeError) as exc:
        list(ld)
    assert exc.value.kind == "Corrupt" and "Quantization table" in str(exc.value)
