"""The test data that every clone has: generated JPEGs and the committed edge-case files (see conftest.py).

* ``generate_imagenet(root)``: an ImageFolder of ``GENERATED_COUNT`` JPEGs in 10 classes made by trdata's own
  deterministic generator (``trdata._core.generate_synthetic_dataset``: ImageNet-like sizes, mostly 4:2:0, some
  4:4:4 and grayscale, photographic statistics). Same seed, same bytes, on any machine and thread count.
* ``photo(seed, w, h)`` / ``write_jpegs(folder, count, ...)``: small photo-like images (gradients plus noise: real
  entropy data, not flat colour) written by Pillow, for tests that need a handful of files of their own.
* ``assemble_edge_cases(root)``: a folder with the same file names as ``../shared/data/edge-cases``. The small real
  files are committed in ``tests/fixtures/edge-cases`` (sources and licences in its README.txt); the ones that are
  too big to commit or not ours to redistribute are written here by Pillow with the same properties (format,
  size, subsampling, progressive, EXIF orientation, ICC/PNG peculiarity), from the committed real photo
  ``exif_orient1_photo__Landscape_1.jpg``.
"""

from __future__ import annotations

import random
import shutil
import struct
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # Pillow and numpy are imported on use: the generated ImageFolder needs neither
    import numpy as np
    from PIL import Image

FIXTURES = Path(__file__).resolve().parent / "fixtures"
COMMITTED_EDGE = FIXTURES / "edge-cases"
BASE_PHOTO = "exif_orient1_photo__Landscape_1.jpg"  # committed, upright (orientation 1), 1800x1200 4:2:0

# 20 per class: >= 120 for small_paths, and a Pillow-parity sample that stays fast on 2 cores.
GENERATED_COUNT = 200
GENERATED_SEED = 7

# Stored pixels of orientation N = the inverse of the transform a viewer applies (PIL.ImageOps.exif_transpose), so
# that a correct viewer shows the upright photo, like recurser/exif-orientation-examples. 0 is invalid (= 1).
_STORE_FOR_ORIENTATION = {
    0: None,
    2: "FLIP_LEFT_RIGHT",
    3: "ROTATE_180",
    4: "FLIP_TOP_BOTTOM",
    5: "TRANSPOSE",
    6: "ROTATE_90",  # a viewer rotates by 270 to undo it
    7: "TRANSVERSE",
    8: "ROTATE_270",
}


def generate_imagenet(root: Path, count: int = GENERATED_COUNT, seed: int = GENERATED_SEED) -> Path:
    """Generate (or reuse, when complete) the ImageFolder of `count` synthetic JPEGs at `root`."""
    from trdata import _core

    _core.generate_synthetic_dataset(str(root), count, seed, progress=None)
    return root


def _orientation_photo(n: int) -> Callable[[Image.Image, Path], None]:
    def write(base: Image.Image, path: Path) -> None:
        from PIL import Image

        op = _STORE_FOR_ORIENTATION[n]
        img = base if op is None else base.transpose(getattr(Image.Transpose, op))
        exif = Image.Exif()
        exif[0x0112] = n
        img.save(path, "JPEG", quality=80, subsampling="4:2:0", exif=exif.tobytes())

    return write


def _grain(img: Image.Image, sigma: float, seed: int) -> Image.Image:
    """`img` plus deterministic Gaussian grain (an upscaled photo alone is unrealistically smooth)."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(seed)
    a = np.asarray(img, dtype=np.int16)
    a = a + rng.normal(0.0, sigma, size=a.shape[:2] + (1,)).astype(np.int16)
    return Image.fromarray(np.clip(a, 0, 255).astype(np.uint8))


def _large_12mp_422(base: Image.Image, path: Path) -> None:
    """4032x3024 (12.2 MP) baseline 4:2:2 with a restart interval of 4 MCUs, like the Olympus E-P3 file."""
    from PIL import Image

    w, h = base.size  # 1800x1200 → 4:3 centre crop, then up
    crop = base.crop(((w - h * 4 // 3) // 2, 0, (w + h * 4 // 3) // 2, h))
    img = _grain(crop.resize((4032, 3024), Image.BICUBIC), 3.0, 12)
    exif = Image.Exif()
    exif[0x0112] = 1
    img.save(path, "JPEG", quality=90, subsampling="4:2:2", restart_marker_blocks=4, exif=exif.tobytes())


def _icc_profile(total: int, seed: int) -> bytes:
    """A structurally valid ICC v2 profile of `total` bytes: header, one private 'data' tag of filler bytes."""
    tag_off = 128 + 4 + 12
    data = b"data" + bytes(4) + struct.pack(">I", 1) + random.Random(seed).randbytes(total - tag_off - 12)
    header = struct.pack(
        ">I4sI4s4s4s12s4s4sI4s4sQI12s4s16s28s",
        total,
        b"none",
        0x02100000,
        b"mntr",
        b"RGB ",
        b"XYZ ",
        bytes(12),
        b"acsp",
        b"APPL",
        0,
        b"none",
        b"none",
        0,
        0,
        struct.pack(">iii", 63190, 65536, 54061),  # D50 illuminant (s15Fixed16)
        b"none",
        bytes(16),
        bytes(28),
    )
    assert len(header) == 128
    table = struct.pack(">I4sII", 1, b"priv", tag_off, len(data))
    out = header + table + data
    assert len(out) == total
    return out


def _progressive444_big_icc(base: Image.Image, path: Path) -> None:
    """425x250 progressive 4:4:4 with a 400 KB ICC profile (7 APP2 segments), like the original's 399,788 bytes."""
    from PIL import Image

    img = base.resize((425, 250), Image.LANCZOS)
    img.save(
        path,
        "JPEG",
        quality=90,
        subsampling="4:4:4",
        progressive=True,
        icc_profile=_icc_profile(400_000, 444),
    )


def _png_disguised_as_jpeg(base: Image.Image, path: Path) -> None:
    """A 213x189 RGBA PNG under a .JPEG name (stands in for ImageNet's n02105855_2933.JPEG, which is not ours
    to redistribute). Alpha is a gradient so that dropping vs compositing it would show."""
    from PIL import Image

    rgb = base.crop((700, 300, 700 + 426, 300 + 378)).resize((213, 189), Image.LANCZOS)
    alpha = Image.linear_gradient("L").resize((213, 189)).point(lambda v: 128 + v // 2)
    img = rgb.convert("RGBA")
    img.putalpha(alpha)
    img.save(path, "PNG")


# File name in ../shared/data/edge-cases → how the fixture tier provides it (None: committed as is).
GENERATED_EDGE: dict[str, Callable[[Image.Image, Path], None]] = {
    **{f"exif_orient{n}_photo__Landscape_{n}.jpg": _orientation_photo(n) for n in (0, 2, 3, 4, 5, 6, 7, 8)},
    "large_12mp_422__42_IndexError.jpg": _large_12mp_422,
    "progressive444_big_icc__icc_profile_big.jpg": _progressive444_big_icc,
    "imagenet_png_disguised_as_jpeg__n02105855_2933.JPEG": _png_disguised_as_jpeg,
}


def committed_edge_files() -> list[Path]:
    return sorted(p for p in COMMITTED_EDGE.iterdir() if p.name != "README.txt")


def edge_case_names() -> list[str]:
    """Every image file name of the edge-case set (the shared one has exactly these; tests check it)."""
    return sorted([p.name for p in committed_edge_files()] + list(GENERATED_EDGE))


def assemble_edge_cases(root: Path) -> Path:
    """Copy the committed files and write the generated stand-ins into `root` (created; must not exist)."""
    from PIL import Image

    root.mkdir(parents=True)
    for src in [*committed_edge_files(), COMMITTED_EDGE / "README.txt"]:
        shutil.copyfile(src, root / src.name)
    with Image.open(COMMITTED_EDGE / BASE_PHOTO) as im:
        base = im.convert("RGB")
    for name, write in GENERATED_EDGE.items():
        write(base, root / name)
    return root


def photo(seed: int, w: int, h: int, noise: float = 12.0) -> np.ndarray:
    """A photo-like RGB array: gradients plus Gaussian noise (non-trivial entropy data)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w]
    base = np.stack([x * 255 / w, y * 255 / h, (x + y) * 128 / (w + h)], axis=-1)
    return np.clip(base + rng.normal(0, noise, (h, w, 3)), 0, 255).astype(np.uint8)


def write_jpegs(
    folder: Path,
    count: int,
    size: tuple[int, int] | Callable[[int], tuple[int, int]] = (40, 30),
    **save: object,
) -> list[str]:
    """``count`` distinct JPEGs ``folder/NN.jpg`` (file i from ``photo(i, w, h)``; ``size`` is (w, h) or a function
    of i), quality 90 unless ``save`` says otherwise; their paths as str, sorted."""
    from PIL import Image

    folder.mkdir(parents=True, exist_ok=True)
    save = {"quality": 90, **save}
    paths = []
    for i in range(count):
        w, h = size(i) if callable(size) else size
        p = folder / f"{i:03d}.jpg"
        Image.fromarray(photo(i, w, h)).save(p, "JPEG", **save)
        paths.append(str(p))
    return paths


# Two-sample tests of draws (trdata's vs a reference's), α = 0.001.


def ks(a: list[float], b: list[float]) -> float:
    """Two-sample Kolmogorov–Smirnov statistic."""
    import numpy as np

    sa, sb = np.sort(a), np.sort(b)
    grid = np.concatenate([sa, sb])
    fa = np.searchsorted(sa, grid, side="right") / len(sa)
    fb = np.searchsorted(sb, grid, side="right") / len(sb)
    return float(np.max(np.abs(fa - fb)))


def ks_same(a: list[float], b: list[float]) -> None:
    import numpy as np

    n, m = len(a), len(b)
    assert ks(a, b) < 1.95 * np.sqrt((n + m) / (n * m)), (ks(a, b), n, m)  # α = 0.001


def chi2_same(a: list[Any], b: list[Any]) -> None:
    """Two-sample χ² homogeneity on hashable values, α = 0.001 (Wilson–Hilferty critical value)."""
    import numpy as np

    vals = sorted(set(a) | set(b), key=repr)
    ca = np.array([a.count(v) for v in vals], float)
    cb = np.array([b.count(v) for v in vals], float)
    rare = (ca + cb) < 10
    assert ca[rare].sum() + cb[rare].sum() < 0.01 * (len(a) + len(b)), "values one side never draws"
    ca, cb = ca[~rare], cb[~rare]
    tot = ca + cb
    ea, eb = tot * len(a) / (len(a) + len(b)), tot * len(b) / (len(a) + len(b))
    stat = float((((ca - ea) ** 2) / ea + ((cb - eb) ** 2) / eb).sum())
    k = max(len(tot) - 1, 1)
    crit = k * (1 - 2 / (9 * k) + 3.09 * np.sqrt(2 / (9 * k))) ** 3
    assert stat < crit, (stat, crit, dict(zip(vals, zip(ca, cb))))


# Detection sources' targets, as the tests read them.


def target_rows(loader: Any) -> dict[int, dict[str, Any]]:
    """Every row's targets of one epoch of ``loader``, by dataset index (tensors as numpy)."""
    out = {}
    for b in loader:
        for r, i in enumerate(b.indices.tolist()):
            out[i] = {k: (v.numpy() if hasattr(v, "numpy") else v) for k, v in b.targets[r].items()}
    return out


def targets_with_1_and_3_workers(source: Any, n: int, **kw: Any) -> list[dict[int, dict[str, Any]]]:
    """``target_rows`` of a Loader over ``source`` (``n`` samples) with 1 and with 3 workers, each epoch checked to
    deliver every sample exactly once."""
    import trdata

    runs = []
    for workers in (1, 3):
        with trdata.Loader(source, workers=workers, **kw) as ld:
            seen = [i for b in ld for i in b.indices.tolist()[: b.valid]]
            assert sorted(seen) == list(range(n))
            runs.append(target_rows(ld))
    return runs


# A pure-Python CRC32C (Castagnoli, reflected): what a forger of trdata's files computes (packs, cache entries).
_CRC32C_TABLE: list[int] = []
for _n in range(256):
    for _ in range(8):
        _n = (_n >> 1) ^ 0x82F63B78 if _n & 1 else _n >> 1
    _CRC32C_TABLE.append(_n)


def crc32c(data: bytes) -> int:
    """CRC32C of ``data`` (slow: for the few KB a test forges)."""
    c = 0xFFFFFFFF
    for byte in data:
        c = _CRC32C_TABLE[(c ^ byte) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


def write_coco_boxes(
    root: Path, n: int, size: tuple[int, int], declared: dict[int, tuple[int, int]] | None = None
) -> tuple[Path, Path]:
    """``root/images/NNNN.jpg``: ``n`` photo-like JPEGs of ``size`` (w, h) with one box each
    (``[w·0.6, h·0.1, w·0.3, h·0.3]`` in COCO's XYWH) and ``root/instances.json`` in COCO's layout, which declares
    each image's size as ``declared`` says for it (else its true size). Returns (images folder, annotation file)."""
    import json

    from PIL import Image

    (root / "images").mkdir(parents=True, exist_ok=True)
    w, h = size
    images, annotations = [], []
    for k in range(n):
        name = f"{k:04d}.jpg"
        Image.fromarray(photo(k, w, h)).save(root / "images" / name, quality=90)
        dw, dh = (declared or {}).get(k, size)
        images.append({"id": k + 1, "file_name": name, "width": dw, "height": dh})
        box = [round(w * 0.6, 2), round(h * 0.1, 2), round(w * 0.3, 2), round(h * 0.3, 2)]
        annotations.append({"id": k + 1, "image_id": k + 1, "category_id": 1, "iscrowd": 0, "bbox": box})
    ann = root / "instances.json"
    ann.write_text(
        json.dumps({"images": images, "annotations": annotations, "categories": [{"id": 1, "name": "a"}]})
    )
    return root / "images", ann
