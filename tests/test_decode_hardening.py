"""Decoder hardening: one hostile file never changes another file's pixels, truncated JPEGs fail in every
epoch whatever the crop, decode bombs are refused, and 16-bit PNGs convert exactly like Pillow's .convert('RGB').

Every input is written by the test itself (Pillow, zlib), so this runs from any clone.
"""

from __future__ import annotations

import io
import struct
import subprocess
import sys
import zlib
from pathlib import Path

import numpy as np
import pytest
import trdata
from _fixtures import photo, run_isolated, write_jpegs
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


# -------------------- hostile inputs and their regressions -------------------------------------------------


def test_damaged_entropy_data_is_decoded_in_every_epoch_like_pillow(tmp_path):
    """A complete JPEG with a damaged byte in its entropy data: Pillow decodes it; trdata used to fail only in
    the epochs whose random crop reached the damage. Now it decodes in every epoch (filled in, as Pillow does),
    and the damage is counted in stats()['decode_warnings'] whenever the decoded region contains it."""
    (path,) = write_jpegs(tmp_path, 1, size=(320, 240))
    data = bytearray(Path(path).read_bytes())
    at = int(len(data) * 0.7)
    data[at : at + 2] = b"\xff\xd4"  # a stray restart marker in the entropy data: libjpeg-turbo warns there
    damaged = tmp_path / "damaged.jpg"
    damaged.write_bytes(bytes(data))
    with Image.open(damaged) as im:
        im.load()  # the reference accepts it
    src = trdata.FileList([str(damaged)], [0])
    warnings = []
    with trdata.Loader(src, batch_size=1, workers=1, transforms=[trdata.RandomResizedCrop(24)]) as loader:
        for _ in range(24):
            assert [len(b) for b in loader] == [1]
            warnings.append(loader.stats()["decode_warnings"])
    assert warnings[-1] >= 1, warnings  # some crops reach the damage, and those are counted
    with trdata.Loader(
        src, batch_size=1, workers=1, transforms=[trdata.Resize(32), trdata.CenterCrop(32)]
    ) as loader:
        assert [len(b) for b in loader] == [1]


def _png_with_iccp_bomb(path: Path, inflated_bytes: int) -> None:
    """A small valid RGB PNG (Pillow) with an iCCP chunk whose profile inflates to `inflated_bytes`."""
    import struct
    import zlib

    img = np.random.default_rng(3).integers(0, 255, (48, 64, 3), dtype=np.uint8)
    Image.fromarray(img).save(path)
    data = path.read_bytes()
    comp, block = zlib.compressobj(9), bytes(1 << 20)
    profile = b"".join(comp.compress(block) for _ in range(inflated_bytes >> 20)) + comp.flush()
    body = b"icc\x00\x00" + profile
    chunk = struct.pack(">I", len(body)) + b"iCCP" + body + struct.pack(">I", zlib.crc32(b"iCCP" + body))
    ihdr_end = 8 + 8 + 13 + 4  # signature + IHDR (length, type, 13 bytes, crc)
    path.write_bytes(data[:ihdr_end] + chunk + data[ihdr_end:])


def test_png_metadata_bomb_is_not_inflated(tmp_path):
    """A 1 MB iCCP chunk inflating to 1 GiB cost ~256 MiB per worker (capped only by the memory budget). The
    profile is never used, so it is not inflated at all: the image decodes and the process stays small."""
    bomb = tmp_path / "iccp.png"
    _png_with_iccp_bomb(bomb, 1 << 30)
    assert bomb.stat().st_size < 2 << 20
    code = f"""
import trdata
src = trdata.FileList([{str(bomb)!r}] * 4, [0, 1, 2, 3])
with trdata.Loader(src, batch_size=4, workers=2, transforms=[trdata.CenterCrop(16)], dtype="uint8") as L:
    n = sum(len(b) for b in L)
peak = next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM:"))
print(n, peak)
"""
    r = run_isolated(code)
    assert r.returncode == 0, r.stderr[-500:]
    n, peak_kib = map(int, r.stdout.split())
    assert n == 4
    assert peak_kib < 160 * 1024, f"peak RSS {peak_kib / 1024:.0f} MiB: the profile was inflated"


W, H = 2400, 1600  # 3.84 MP: 11.5 MB of RGB output, far above the RSS noise of a decode


FORMATS = [
    "png-rgb",
    "png-rgba",
    "tiff-rgb",
    "tiff-gray-lzw",
    "tiff-cmyk",
    "webp-lossy",
    "webp-lossy-alpha",
    "webp-lossless",
    "webp-animated",
    "gif",
]


@pytest.fixture(scope="module")
def whole_image_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Real files of every whole-image format, written by Pillow (libwebp, libtiff, its PNG and GIF writers)."""
    root = tmp_path_factory.mktemp("whole")
    rgb = Image.fromarray(photo(21, W, H, noise=6.0))
    rgba = rgb.copy()
    rgba.putalpha(Image.fromarray(photo(22, W, H)[:, :, 0]))
    out = {}

    def save(name: str, img: Image.Image, fmt: str, **kw: object) -> None:
        out[name] = root / f"{name}.{fmt.lower()}"
        img.save(out[name], fmt, **kw)

    save("png-rgb", rgb, "PNG")
    save("png-rgba", rgba, "PNG")
    save("tiff-rgb", rgb, "TIFF")
    save("tiff-gray-lzw", rgb.convert("L"), "TIFF", compression="tiff_lzw")
    save("tiff-cmyk", rgb.convert("CMYK"), "TIFF", compression="tiff_adobe_deflate")
    save("webp-lossy", rgb, "WEBP", quality=80)
    save("webp-lossy-alpha", rgba, "WEBP", quality=80)
    save("webp-lossless", rgb, "WEBP", lossless=True)
    save(
        "webp-animated",
        rgb,
        "WEBP",
        save_all=True,
        append_images=[rgb.transpose(Image.Transpose.FLIP_LEFT_RIGHT)],
    )
    save("gif", rgb.convert("P"), "GIF")
    assert sorted(out) == sorted(FORMATS)
    return out


def _decodes(path: Path, budget: int) -> bool:
    try:
        full_size_budget(path, budget)
        return True
    except trdata.DecodeError as e:
        assert e.kind == "TooLarge" and "max_memory_bytes" in str(e), e
        return False


def full_size_budget(path: Path, budget: int) -> None:
    with trdata.Loader(
        trdata.FileList([str(path)]),
        batch_size=1,
        workers=1,
        transforms=[trdata.CenterCrop(16)],
        dtype="uint8",
        max_memory_bytes=budget,
    ) as ld:
        list(ld)


_PEAK = """
import sys, trdata
def load(path, budget):
    with trdata.Loader(trdata.FileList([path]), batch_size=1, workers=1, transforms=[trdata.CenterCrop(16)],
                       dtype="uint8", max_memory_bytes=budget) as ld:
        list(ld)
def status(key):
    return next(int(l.split()[1]) * 1024 for l in open("/proc/self/status") if l.startswith(key))
load(sys.argv[1], 1 << 40)  # warm-up: threads, allocator arenas, every code path once
open("/proc/self/clear_refs", "w").write("5")  # reset VmHWM to the current RSS
base = status("VmRSS:")
load(sys.argv[1], int(sys.argv[2]))
print(status("VmHWM:") - base)
"""


@pytest.mark.parametrize("name", FORMATS)
def test_memory_budget_bounds_the_real_peak_of_whole_image_decodes(
    whole_image_files: dict[str, Path], name: str
) -> None:
    """For each file: the smallest budget it decodes under (the core's estimate) is refused just below it with
    DecodeError 'TooLarge' naming max_memory_bytes, and a decode under it peaks (process RSS, in a fresh
    interpreter) below it plus the file's own bytes (the worker's read buffer) and 8 MiB of noise. The old
    estimate counted the crate's decoded buffer only: TIFF RGB, WebP, PNG and GIF decodes peaked 1.3-3.8x above
    the budgets they passed."""
    path, p = whole_image_files[name], W * H
    lo, hi = p, 40 * p  # lo: below the RGB output alone (refused); hi: decodes
    assert not _decodes(path, lo) and _decodes(path, hi)
    while hi - lo > p // 100:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if _decodes(path, mid) else (mid, hi)
    budget = hi
    r = subprocess.run(
        [sys.executable, "-c", _PEAK, str(path), str(budget)], capture_output=True, text=True, timeout=300
    )
    assert r.returncode == 0, r.stderr[-2000:]
    peak = int(r.stdout.split()[-1])
    slack = path.stat().st_size + (8 << 20)
    assert peak <= budget + slack, f"RSS peak {peak} for a budget of {budget} (+ {slack})"
    assert budget <= 24 * p, f"budget {budget} = {budget / p:.1f} bytes per pixel"
    with pytest.raises(trdata.DecodeError) as exc:
        full_size_budget(path, lo)
    assert exc.value.kind == "TooLarge" and "max_memory_bytes" in str(exc.value)
