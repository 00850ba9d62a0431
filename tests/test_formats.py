"""WebP, GIF, TIFF, BMP and Netpbm: written by Pillow in several modes, loaded at full size (CenterCrop to the
image's own size: identity geometry) and compared with ``np.asarray(Image.open(p).convert("RGB"))``: exactly for
every format. Lossy WebP too: image-webp 0.2.4 matched Pillow's libwebp bit for bit on every file measured (these
three images and four edge-case photos at q=50/80/95, methods 0/4/6, RGB and RGBA: 54 files, max abs diff 0)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import trdata
from _fixtures import photo, psnr
from PIL import Image

EDGE = Path(__file__).parent / "fixtures" / "edge-cases"


def load_one(path: Path) -> np.ndarray:
    w, h = Image.open(path).size
    ds = trdata.FileList([str(path)], [0])
    with trdata.Loader(
        ds,
        batch_size=1,
        workers=1,
        shuffle=False,
        transforms=[trdata.CenterCrop((h, w))],
        dtype="uint8",
        layout="NHWC",
    ) as ld:
        (batch,) = list(ld)
    return np.array(batch.images[0])


def expected(path: Path) -> np.ndarray:
    with Image.open(path) as im:
        return np.asarray(im.convert("RGB"))


def sources() -> dict[str, Image.Image]:
    """Real-looking content: a generated photo, hopper (PNG fixture), a camera photo (downscaled)."""
    out = {"photo": Image.fromarray(photo(3, 97, 61))}
    with Image.open(EDGE / "png_rgb__hopper.png") as im:
        out["hopper"] = im.convert("RGB")
    with Image.open(EDGE / "exif_orient1_photo__Landscape_1.jpg") as im:
        out["camera"] = im.convert("RGB").resize((160, 120), Image.Resampling.BICUBIC)
    return out


def with_alpha(im: Image.Image) -> Image.Image:
    a = im.convert("RGBA")
    alpha = np.asarray(im.convert("L")).copy()
    alpha[::3] = 0  # fully transparent rows: their colour must survive (dropped alpha, not composited)
    a.putalpha(Image.fromarray(alpha))
    return a


def variants(im: Image.Image) -> dict[str, Image.Image]:
    return {
        "RGB": im,
        "RGBA": with_alpha(im),
        "L": im.convert("L"),
        "LA": with_alpha(im).convert("LA"),
        "P": im.convert("P", palette=Image.Palette.ADAPTIVE, colors=200),
        "1": im.convert("1"),
        "I;16": Image.fromarray((np.asarray(im.convert("L")).astype(np.uint16) * 3).astype(np.uint16)),
        "CMYK": im.convert("CMYK"),
    }


# (format, extension, modes, save kwargs variants)
CASES = [
    ("BMP", "bmp", ["RGB", "RGBA", "L", "P", "1"], [{}]),
    ("PPM", "ppm", ["RGB", "L", "1", "I;16"], [{}]),
    ("GIF", "gif", ["RGB", "L", "P", "1"], [{}]),
    (
        "TIFF",
        "tif",
        ["RGB", "RGBA", "L", "LA", "1", "I;16", "CMYK"],
        [{}, {"compression": "tiff_lzw"}, {"compression": "tiff_adobe_deflate"}, {"compression": "packbits"}],
    ),
    ("WEBP", "webp", ["RGB", "RGBA"], [{"lossless": True}]),
]


def _cases():
    for fmt, ext, modes, kws in CASES:
        for mode in modes:
            for i, kw in enumerate(kws):
                yield pytest.param(fmt, ext, mode, kw, id=f"{fmt}-{mode}-{i}")


@pytest.mark.parametrize(("fmt", "ext", "mode", "kw"), list(_cases()))
def test_lossless_formats_equal_pillow_exactly(tmp_path, fmt, ext, mode, kw):
    for name, src in sources().items():
        p = tmp_path / f"{name}.{ext}"
        variants(src)[mode].save(p, format=fmt, **kw)
        want = expected(p)
        got = load_one(p)
        assert got.shape == want.shape, (p, got.shape, want.shape)
        diff = np.abs(got.astype(int) - want.astype(int))
        assert diff.max() == 0, (name, fmt, mode, kw, int(diff.max()), int((diff > 0).sum()))


def test_animated_gif_and_webp_give_the_first_frame(tmp_path):
    frames = [Image.fromarray(photo(s, 40, 30)) for s in (1, 2, 3)]
    for fmt, kw in (("GIF", {}), ("WEBP", {"lossless": True})):
        p = tmp_path / f"anim.{fmt.lower()}"
        frames[0].save(p, format=fmt, save_all=True, append_images=frames[1:], duration=100, **kw)
        np.testing.assert_array_equal(load_one(p), expected(p))


def test_gif_smaller_first_frame_and_transparency(tmp_path):
    """A first frame that does not cover the logical screen: Pillow fills the rest with the transparent index."""
    pal = Image.fromarray(photo(5, 30, 20)).convert("P", palette=Image.Palette.ADAPTIVE, colors=16)
    p = tmp_path / "small.gif"
    pal.save(p, transparency=3)
    raw = bytearray(p.read_bytes())
    # Enlarge the logical screen (bytes 6..10) to 40x28: the frame (at 0,0) no longer covers it.
    raw[6:10] = (40).to_bytes(2, "little") + (28).to_bytes(2, "little")
    p.write_bytes(bytes(raw))
    np.testing.assert_array_equal(load_one(p), expected(p))


def test_what_stays_refused_is_a_typed_error(tmp_path):
    """Palette TIFF: the `tiff` crate does not decode RGBPalette; refused as Unsupported, naming TIFF."""
    p = tmp_path / "pal.tif"
    variants(sources()["photo"])["P"].save(p, format="TIFF")
    ds = trdata.FileList([str(p)], [0])
    with trdata.Loader(ds, batch_size=1, workers=1, transforms=[trdata.CenterCrop(8)], dtype="uint8") as ld:
        with pytest.raises(trdata.DecodeError) as exc:
            list(ld)
    assert exc.value.kind == "Unsupported" and "TIFF" in str(exc.value), str(exc.value)


@pytest.mark.parametrize("quality", [50, 80, 95])
@pytest.mark.parametrize("mode", ["RGB", "RGBA"])
def test_lossy_webp_equals_pillow(tmp_path, quality, mode):
    """Measured exact (see the module docs); a decoder change that is not would show here with its PSNR."""
    for name, src in sources().items():
        p = tmp_path / f"{name}.webp"
        variants(src)[mode].save(p, format="WEBP", quality=quality)
        want = expected(p)
        got = load_one(p)
        assert got.shape == want.shape
        d = np.abs(got.astype(int) - want.astype(int))
        print(f"webp q={quality} {mode} {name}: PSNR {psnr(got, want):.2f} dB, max abs diff {d.max()}")
        assert d.max() == 0, (name, quality, mode, psnr(got, want), int(d.max()))


def test_tiff_rgb16_keeps_the_high_byte_as_pillow(tmp_path):
    """Pillow does not write 16-bit RGB TIFFs: a minimal uncompressed one is built by hand (one strip)."""
    import struct

    arr = np.random.default_rng(1).integers(0, 65536, (9, 13, 3)).astype("<u2")
    data = arr.tobytes()
    tags = [(256, 4, 1, 13), (257, 4, 1, 9), (258, 3, 3, None), (259, 3, 1, 1), (262, 3, 1, 2)]
    tags += [(273, 4, 1, None), (277, 3, 1, 3), (278, 4, 1, 9), (279, 4, 1, len(data))]
    bps_off = 8 + 2 + 12 * len(tags) + 4
    data_off = bps_off + 6
    out = bytearray(b"II*\0" + struct.pack("<IH", 8, len(tags)))
    for tag, typ, count, val in tags:
        val = {258: bps_off, 273: data_off}.get(tag, val)
        out += struct.pack(
            "<HHIHH" if typ == 3 and count == 1 else "<HHII",
            tag,
            typ,
            count,
            *((val, 0) if typ == 3 and count == 1 else (val,)),
        )
    out += struct.pack("<I3H", 0, 16, 16, 16) + data
    p = tmp_path / "rgb16.tif"
    p.write_bytes(bytes(out))
    assert Image.open(p).mode == "RGB"
    np.testing.assert_array_equal(load_one(p), expected(p))
    np.testing.assert_array_equal(load_one(p), (arr >> 8).astype(np.uint8))
