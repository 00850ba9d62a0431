"""Write tests/fixtures/pillow-jpeg: small JPEGs written by Pillow, one per header variant the GPU-eligibility
check (src/decode/gpu_eligible.rs) classifies. The committed files are what the Rust tests read; this script
documents how they were made and rewrites them (same bytes for the same Pillow/libjpeg-turbo build):

    /work/benchvenv/bin/python scripts/make_pillow_jpeg_fixtures.py

File names are `<expected>__<what>.jpg`: `<expected>` is the eligibility the tests assert (a GPU subsampling or
an ineligibility reason), so the folder is self-describing. Pixels: a 48x32 gradient with deterministic noise
(real entropy data, not flat colour).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
from PIL import Image, features

OUT = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "pillow-jpeg"


def photo(w: int = 48, h: int = 32, seed: int = 3) -> Image.Image:
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w]
    base = np.stack([x * 255 // w, y * 255 // h, (x + y) * 128 // (w + h)], axis=-1)
    a = base + rng.integers(0, 32, size=(h, w, 1))
    return Image.fromarray(np.clip(a, 0, 255).astype(np.uint8))


def exif_with_orientation(n: int) -> bytes:
    exif = Image.Exif()
    exif[0x0112] = n
    return exif.tobytes()


def main() -> int:
    OUT.mkdir(parents=True, exist_ok=True)
    for old in OUT.glob("*.jpg"):
        old.unlink()
    rgb = photo()
    q = {"quality": 85}
    files: dict[str, tuple[Image.Image, dict]] = {
        "s444__subsampling_444.jpg": (rgb, {**q, "subsampling": "4:4:4"}),
        "s422__subsampling_422.jpg": (rgb, {**q, "subsampling": "4:2:2"}),
        "s420__subsampling_420_optimized.jpg": (rgb, {**q, "subsampling": "4:2:0", "optimize": True}),
        "gray__mode_L.jpg": (rgb.convert("L"), q),
        "s420__tiny_1x1.jpg": (rgb.resize((1, 1)), {**q, "subsampling": "4:2:0"}),
        "s420__exif_orientation_1.jpg": (rgb, {**q, "exif": exif_with_orientation(1)}),
        "progressive__progressive_420.jpg": (rgb, {**q, "progressive": True}),
        # keep_rgb: no YCbCr conversion; libjpeg writes an Adobe APP14 marker with transform 0.
        "rgb_coded__keep_rgb_adobe_transform0.jpg": (rgb, {**q, "subsampling": "4:4:4", "keep_rgb": True}),
        "cmyk__mode_CMYK.jpg": (rgb.convert("CMYK"), q),
        "restart_interval__restart_every_2_blocks.jpg": (rgb, {**q, "restart_marker_blocks": 2}),
        "restart_interval__restart_every_row.jpg": (rgb, {**q, "restart_marker_rows": 1}),
        "orientation__exif_orientation_6.jpg": (rgb, {**q, "exif": exif_with_orientation(6)}),
        # No EXIF at all: the orientation comes from the XMP packet (Pillow's exif_transpose fallback).
        "orientation__xmp_orientation_3.jpg": (
            rgb,
            {**q, "xmp": b'<x:xmpmeta><rdf:Description tiff:Orientation="3"/></x:xmpmeta>'},
        ),
    }
    for name, (img, kw) in files.items():
        img.save(OUT / name, "JPEG", **kw)
    total = sum((OUT / n).stat().st_size for n in files)
    print(
        f"wrote {len(files)} files ({total} bytes) to {OUT} with Pillow {Image.__version__}, "
        f"libjpeg-turbo {features.version('libjpeg_turbo')}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
