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

import functools
import gzip
import io
import pickle
import pickletools
import random
import shutil
import struct
import tarfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

# Pillow, numpy, torch and trdata are imported on use: the generated ImageFolder needs none of them.
if TYPE_CHECKING:
    import subprocess

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


def psnr(a: np.ndarray, b: np.ndarray) -> float:
    """Peak signal-to-noise ratio of two uint8 images, in dB (inf when equal)."""
    import math

    import numpy as np

    mse = float(np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2))
    return math.inf if mse == 0.0 else 10.0 * math.log10(255.0**2 / mse)


def jpeg(a: np.ndarray, quality: int = 90, **save: object) -> bytes:
    """``a`` (HWC or HW uint8) encoded as JPEG by Pillow."""
    import io

    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(a).save(buf, format="JPEG", quality=quality, **save)
    return buf.getvalue()


def png(a: np.ndarray) -> bytes:
    """``a`` (HWC or HW uint8) encoded as PNG by Pillow."""
    import io

    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(a).save(buf, format="PNG")
    return buf.getvalue()


def photo_jpeg(seed: int, w: int = 40, h: int = 32) -> bytes:
    """``photo(seed, w, h)`` as a quality-90 JPEG."""
    return jpeg(photo(seed, w, h))


class Items:
    """A user's map-style dataset over a list of (image, target); counts its calls per index, from any thread."""

    def __init__(self, items: list[tuple[object, object]]) -> None:
        import threading
        from collections import Counter

        self.items = items
        self.calls: Counter[int] = Counter()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: int) -> tuple[object, object]:
        with self._lock:
            self.calls[i] += 1
        return self.items[i]


def run_isolated(code: str, timeout: float = 120) -> subprocess.CompletedProcess:
    """Run `code` in a fresh interpreter: on the old code these settings killed the process with SIGABRT, which
    must fail the test, not the test runner."""
    import subprocess
    import sys

    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout)


def run_or_fail_on_hang(code: str, *args: str) -> str:
    """``code`` run by a fresh Python with ``args`` (``sys.argv[1:]``), its stdout: a regression that blocks (on
    a FIFO) fails the test at the timeout instead of hanging the suite."""
    import os
    import subprocess
    import sys
    import textwrap

    import pytest
    import trdata

    python_dir = str(Path(trdata.__file__).parents[1])
    env = {**os.environ, "PYTHONPATH": python_dir}
    try:
        done = subprocess.run(
            [sys.executable, "-c", textwrap.dedent(code), *args],
            capture_output=True,
            text=True,
            timeout=60,
            env=env,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"blocked for 60 s: {code}")
    assert done.returncode == 0, done.stderr
    return done.stdout


# Two-sample tests of draws (trdata's vs a reference's), α = 0.001.


def ks(a: list[float], b: list[float]) -> float:
    """Two-sample Kolmogorov–Smirnov statistic."""
    import numpy as np

    sa, sb = np.sort(a), np.sort(b)
    grid = np.concatenate([sa, sb])
    fa = np.searchsorted(sa, grid, side="right") / len(sa)
    fb = np.searchsorted(sb, grid, side="right") / len(sb)
    return float(np.max(np.abs(fa - fb)))


def ks_limit(n: int, m: int) -> float:
    """The KS statistic's critical value for samples of n and m, α = 0.001."""
    import numpy as np

    return float(1.95 * np.sqrt((n + m) / (n * m)))


def ks_same(a: list[float], b: list[float]) -> None:
    n, m = len(a), len(b)
    assert ks(a, b) < ks_limit(n, m), (ks(a, b), n, m)  # α = 0.001


def chi2_same(a: list[Any], b: list[Any]) -> None:
    """Two-sample χ² homogeneity on hashable values, α = 0.001 (Wilson–Hilferty critical value)."""
    from collections import Counter

    import numpy as np

    vals = sorted(set(a) | set(b), key=repr)
    count_a, count_b = Counter(a), Counter(b)
    ca = np.array([count_a[v] for v in vals], float)
    cb = np.array([count_b[v] for v in vals], float)
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


# MNIST-family idx files and CIFAR pickles, in the exact formats of torchvision's downloads (trdata.classic).


def idx_bytes(magic: int, dims: tuple[int, ...], payload: bytes) -> bytes:
    return struct.pack(f">I{len(dims)}I", magic, *dims) + payload


def write_file(path: Path, data: bytes, gz: bool = False) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if gz:
        path = path.with_name(path.name + ".gz")
        with gzip.open(path, "wb") as f:
            f.write(data)
    else:
        path.write_bytes(data)
    return path


def make_mnist(
    root: Path, variant: str = "MNIST", train: bool = True, n: int = 30, storage: str = "plain", seed: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """Write one split of an MNIST-family dataset in torchvision's layout (``root/variant/raw``, idx files);
    storage is "plain", "gz" or "both" (what torchvision's download leaves). Returns (images, labels)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    images = rng.integers(0, 256, size=(n, 28, 28), dtype=np.uint8)
    labels = rng.integers(0, 10, size=n, dtype=np.uint8)
    split = "train" if train else "t10k"
    raw = root / variant / "raw"
    files = {
        f"{split}-images-idx3-ubyte": idx_bytes(0x803, (n, 28, 28), images.tobytes()),
        f"{split}-labels-idx1-ubyte": idx_bytes(0x801, (n,), labels.tobytes()),
    }
    for name, data in files.items():
        if storage in ("plain", "both"):
            write_file(raw / name, data)
        if storage in ("gz", "both"):
            write_file(raw / name, data, gz=True)
    return images, labels.astype(np.int64)


CIFAR10_NAMES = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]


class Py2Pickler(pickle._Pickler):
    """Writes what Python 2's cPickle wrote for the genuine CIFAR files: protocol 2, every string (keys, names,
    an array's raw buffer) a (SHORT_)BINSTRING, no _codecs.encode; numpy's reconstruct is spelled
    numpy.core.multiarray (by ``dump``) as numpy 1 named it."""

    def save_py2_string(self: Any, obj: str | bytes) -> None:
        raw = obj if isinstance(obj, bytes) else obj.encode("latin1")
        if len(raw) < 256:
            self.write(pickle.SHORT_BINSTRING + bytes([len(raw)]) + raw)
        else:
            self.write(pickle.BINSTRING + struct.pack("<i", len(raw)) + raw)
        self.memoize(obj)

    dispatch: ClassVar[Any] = {**pickle._Pickler.dispatch, bytes: save_py2_string, str: save_py2_string}


def dump(path: Path, obj: object, style: str = "py3") -> None:
    """pickle.dump(obj, protocol=2) as Python 3 writes it (style "py3") or as the genuine files are ("py2")."""
    path.parent.mkdir(parents=True, exist_ok=True)
    buf = io.BytesIO()
    if style == "py2":
        Py2Pickler(buf, protocol=2).dump(obj)
        data = buf.getvalue().replace(b"cnumpy._core.multiarray\n", b"cnumpy.core.multiarray\n")
        # The genuine files hold no Python 3 spellings: no _codecs.encode, no unicode strings.
        opcodes = {op.name for op, _, _ in pickletools.genops(data)}
        assert b"_codecs" not in data and not opcodes & {"UNICODE", "BINUNICODE", "SHORT_BINUNICODE"}
    else:
        pickle.dump(obj, buf, protocol=2)
        data = buf.getvalue()
    path.write_bytes(data)


def make_cifar(
    root: Path, variant: int = 10, n: int = 20, seed: int = 0, style: str = "py3"
) -> dict[str, Any]:
    """Both splits of CIFAR-10 (5 train batches + test) or CIFAR-100 (train + test), with the real keys.
    Returns the expected flat data and labels per split (in torchvision's order)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    expected: dict[str, Any] = {}
    if variant == 10:
        base = root / "cifar-10-batches-py"
        splits = {"train": [f"data_batch_{i}" for i in range(1, 6)], "test": ["test_batch"]}
        meta = {"num_cases_per_batch": n, "label_names": CIFAR10_NAMES, "num_vis": 3072}
        dump(base / "batches.meta", meta, style)
        classes = CIFAR10_NAMES
    else:
        base = root / "cifar-100-python"
        splits = {"train": ["train"], "test": ["test"]}
        classes = [f"class_{i:03d}" for i in range(100)]
        dump(
            base / "meta",
            {"fine_label_names": classes, "coarse_label_names": [f"super_{i}" for i in range(20)]},
        )
    for split, names in splits.items():
        datas, labels = [], []
        for k, name in enumerate(names):
            data = rng.integers(0, 256, size=(n + k, 3072), dtype=np.uint8)
            lab = [int(x) for x in rng.integers(0, len(classes), size=n + k)]
            entry: dict[str, Any] = {"batch_label": f"{split} batch {k}", "data": data}
            if variant == 10:
                entry["labels"] = lab
            else:
                entry["fine_labels"] = lab
                entry["coarse_labels"] = [x // 5 for x in lab]
            entry["filenames"] = [f"img_{k}_{i}.png" for i in range(n + k)]
            dump(base / name, entry, style)
            datas.append(data)
            labels.extend(lab)
        expected[split] = (np.concatenate(datas), np.array(labels, dtype=np.int64))
    expected["classes"] = classes
    expected["base"] = base
    return expected


# WebDataset shards, written as webdataset's TarWriter writes them: one member per (key, extension), consecutive
# per sample.


def encoded(i: int, fmt: str) -> bytes:
    """Image ``i`` of the shards (about 34x30, textured) encoded by Pillow in ``fmt`` ("JPEG", "PNG")."""
    import io

    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(i)
    a = (rng.integers(0, 200, (30 + i % 7, 34, 3)) + np.arange(34)[None, :, None]).astype(np.uint8)
    buf = io.BytesIO()
    Image.fromarray(a).save(buf, format=fmt)
    return buf.getvalue()


def add_member(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    """One member ``name`` holding ``data``, as webdataset's TarWriter adds it."""
    import io

    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))


def write_shards(
    root: Path, n: int, per_shard: int, target: str = "cls"
) -> tuple[list[str], list[bytes], list[int]]:
    """Shards of `per_shard` samples: key.jpg or key.png (alternating), key.cls / key.json, plus an extra member.
    Returns (shard paths, each sample's image bytes, each sample's label)."""
    import json

    shards, images, labels = [], [], []
    for s in range(0, n, per_shard):
        path = root / f"shard-{s // per_shard:04d}.tar"
        with tarfile.open(path, "w") as tar:
            for i in range(s, min(n, s + per_shard)):
                key = f"sample{i:05d}"
                ext, fmt = ("jpg", "JPEG") if i % 2 == 0 else ("png", "PNG")
                img, label = encoded(i, fmt), (i * 7) % 5
                add_member(tar, f"{key}.{ext}", img)
                add_member(
                    tar,
                    f"{key}.{target}",
                    json.dumps(label).encode() if target == "json" else str(label).encode(),
                )
                add_member(tar, f"{key}.txt", b"a caption")
                images.append(img)
                labels.append(label)
        shards.append(str(path))
    return shards, images, labels


# Extra per-sample fields (batch.extras): captions, parsed JSON, arrays of one shape and of many.

EXTRAS_N = 11  # samples
CAPTIONS = [f"a photo number {i}" for i in range(EXTRAS_N)]
META = [{"id": i, "tags": ["x"] * (i % 3)} for i in range(EXTRAS_N)]


@functools.cache
def _extras_arrays() -> dict[str, Any]:
    import numpy as np
    import trdata

    emb = [np.full(5, i, np.float32) for i in range(EXTRAS_N)]
    ragged = [np.arange(i + 1) for i in range(EXTRAS_N)]
    return {
        "EMB": emb,
        "RAGGED": ragged,
        "EXTRAS": {"caption": CAPTIONS, "meta": META, "emb": emb, "ragged": ragged},
        "EXTRAS_KW": dict(
            batch_size=4, transforms=[trdata.RandomResizedCrop(8)], shuffle=True, seed=3, last_batch="pad"
        ),
    }


def extras_jpeg(i: int) -> bytes:
    """Sample ``i`` of the extras tests: ``photo(i, 20, 16)`` as a JPEG of Pillow's default quality."""
    import io

    from PIL import Image

    out = io.BytesIO()
    Image.fromarray(photo(i, 20, 16)).save(out, "JPEG")
    return out.getvalue()


def check_extras(loader: Any) -> int:
    """Every batch of one epoch of ``loader`` (over EXTRAS) carries its rows' extras; the number of rows."""
    import numpy as np

    rows = 0
    for b in loader:
        idx = b.indices.tolist()
        assert b.extras["caption"] == [CAPTIONS[i] for i in idx]
        assert b.extras["meta"] == [META[i] for i in idx]
        assert isinstance(b.extras["emb"], np.ndarray) and b.extras["emb"].shape == (len(idx), 5)
        np.testing.assert_array_equal(b.extras["emb"][:, 0], np.asarray(idx, np.float32))
        assert isinstance(b.extras["ragged"], list)  # arrays of different shapes stay a list
        assert [len(r) for r in b.extras["ragged"]] == [i + 1 for i in idx]
        rows += len(idx)
    return rows


class Captioned:
    """A map-style dataset returning (image, target, extras)."""

    def __len__(self) -> int:
        return EXTRAS_N

    def __getitem__(self, i: int) -> tuple[bytes, int, dict[str, object]]:
        emb, ragged = _extras_arrays()["EMB"], _extras_arrays()["RAGGED"]
        return (
            extras_jpeg(i),
            i,
            {"caption": CAPTIONS[i], "meta": META[i], "emb": emb[i], "ragged": ragged[i]},
        )


def write_wds(path: Path, members: list[dict[str, object]]) -> str:
    """A shard written by webdataset's own TarWriter (its layout and encoders: str → UTF-8, dict → JSON,
    ndarray → .npy)."""
    import pytest

    wds = pytest.importorskip("webdataset")
    with wds.TarWriter(str(path)) as sink:
        for m in members:
            sink.write(m)
    return str(path)


# Detection and segmentation datasets in their projects' layouts (COCO, ultralytics YOLO, VOC), and torchvision v2's
# kernels moving their targets (the references the target tests compare with).

COCO_IMAGES = 9  # write_coco's images
YOLO_IMAGES = 10  # write_yolo's images
VOC_IMAGES = 8  # write_voc's images with a label map


def _polygon(rng: np.random.Generator, w: int, h: int) -> list[float]:
    """A star-ish polygon around a random centre, partly off the canvas at times."""
    import numpy as np

    cx, cy = rng.uniform(-5, w + 5), rng.uniform(-5, h + 5)
    n = int(rng.integers(3, 9))
    angles = np.sort(rng.uniform(0, 2 * np.pi, n))
    radii = rng.uniform(3, max(w, h) / 2, n)
    return [
        float(round(v, 2)) for a, r in zip(angles, radii) for v in (cx + r * np.cos(a), cy + r * np.sin(a))
    ]


def write_coco(root: Path, keypoints: bool = False) -> Path:
    """COCO_IMAGES JPEGs of different sizes and an instances (or person_keypoints) file in COCO's layout; ids out of
    order in the file (torchvision sorts them), one image without annotations, one annotation of no image."""
    import json

    import numpy as np
    import pytest
    from PIL import Image

    mask_api = pytest.importorskip("pycocotools.mask")
    rng = np.random.default_rng(7)
    (root / "images").mkdir(parents=True)
    images, annotations = [], []
    ids = [int(i) for i in rng.permutation(np.arange(100, 100 + COCO_IMAGES))]
    ann_id = 1
    for k, image_id in enumerate(ids):
        w, h = int(rng.integers(40, 90)), int(rng.integers(36, 80))
        name = f"{image_id:012d}.jpg"
        Image.fromarray(photo(k, w, h)).save(root / "images" / name, quality=92)
        images.append({"id": image_id, "file_name": name, "width": w, "height": h, "license": 1})
        if k == 3:
            continue  # an image without annotations
        for _ in range(int(rng.integers(1, 5))):
            kind = rng.integers(0, 4)
            ann: dict[str, Any] = {
                "image_id": image_id,
                "category_id": int(rng.choice([1, 3, 18])),
                "iscrowd": 0,
            }
            if kind == 0:  # uncompressed RLE, crowd
                m = np.asfortranarray((rng.random((h, w)) < 0.3).astype(np.uint8))
                runs = mask_api.encode(m)
                counts = _uncompressed_rle(m)
                ann.update(segmentation={"size": [h, w], "counts": counts}, iscrowd=1)
                ann["area"] = float(mask_api.area(runs))
            elif kind == 1:  # compressed RLE
                m = np.asfortranarray(np.zeros((h, w), np.uint8))
                m[int(h * 0.2) : int(h * 0.7), int(w * 0.3) : int(w * 0.9)] = 1
                rle = mask_api.encode(m)
                ann["segmentation"] = {"size": [h, w], "counts": rle["counts"].decode()}
            else:  # one or two polygons
                ann["segmentation"] = [_polygon(rng, w, h) for _ in range(int(kind))]
            x0, y0 = rng.uniform(-3, w * 0.6), rng.uniform(-3, h * 0.6)
            ann["bbox"] = [
                round(x0, 2),
                round(y0, 2),
                round(rng.uniform(1, w * 0.6), 2),
                round(rng.uniform(1, h * 0.6), 2),
            ]
            if keypoints:
                pts = []
                for _ in range(5):
                    pts += [
                        round(rng.uniform(-2, w + 2), 1),
                        round(rng.uniform(-2, h + 2), 1),
                        int(rng.integers(0, 3)),
                    ]
                ann["keypoints"], ann["num_keypoints"] = pts, sum(1 for v in pts[2::3] if v > 0)
            ann["id"] = ann_id
            ann_id += 1
            annotations.append(ann)
    annotations.append({"id": 999, "image_id": 12345, "category_id": 1, "bbox": [0, 0, 1, 1], "iscrowd": 0})
    categories = [
        {"id": c, "name": n, "supercategory": "x"} for c, n in [(1, "person"), (3, "car"), (18, "dog")]
    ]
    if keypoints:
        for c in categories:
            c["keypoints"], c["skeleton"] = ["a", "b", "c", "d", "e"], [[1, 2], [2, 3]]
    path = root / ("person_keypoints.json" if keypoints else "instances.json")
    path.write_text(
        json.dumps({"info": {}, "images": images, "annotations": annotations, "categories": categories})
    )
    return path


def _uncompressed_rle(m: np.ndarray) -> list[int]:
    """COCO's uncompressed RLE counts of a mask: column-major runs, zeros first."""
    flat = m.flatten(order="F")
    counts, value, run = [], 0, 0
    for v in flat:
        if v != value:
            counts.append(run)
            value, run = v, 0
        run += 1
    counts.append(run)
    return counts


def coco_reference(images: Path, ann: Path) -> Any:
    """torchvision's CocoDetection over the same files, wrapped for transforms v2 (boxes, labels, masks)."""
    import torchvision
    from torchvision.datasets import wrap_dataset_for_transforms_v2

    ds = torchvision.datasets.CocoDetection(str(images), str(ann))
    return wrap_dataset_for_transforms_v2(ds, target_keys={"image_id", "boxes", "labels", "masks", "iscrowd"})


def torchvision_moved(boxes: Any, masks: Any, g: list[float]) -> tuple[np.ndarray, np.ndarray]:
    """torchvision v2's kernels under one geometry row: crop the source span (RandomResizedCrop), resize it, take
    the window (CenterCrop, with padding), then the flips."""
    from torchvision.transforms.v2 import functional as F

    xlo, xhi, xres, xstart, xout, ylo, yhi, yres, ystart, yout, flip, vflip, crops = (int(v) for v in g)
    near = F.InterpolationMode.NEAREST
    b, m = boxes, masks
    whole = (xlo, ylo, xhi, yhi) == (0, 0, *boxes.canvas_size[::-1])
    if not whole:  # RandomResizedCrop: crop the span (clamps), then resize it
        b, m = F.crop(b, ylo, xlo, yhi - ylo, xhi - xlo), F.crop(m, ylo, xlo, yhi - ylo, xhi - xlo)
    b, m = F.resize(b, [yres, xres]), F.resize(m, [yres, xres], interpolation=near)  # resize: no clamp
    if whole and crops:  # CenterCrop / RandomCrop after the resize: the window (pads when larger; clamps)
        b, m = F.crop(b, ystart, xstart, yout, xout), F.crop(m, ystart, xstart, yout, xout)
    if flip:
        b, m = F.horizontal_flip(b), F.horizontal_flip(m)
    if vflip:
        b, m = F.vertical_flip(b), F.vertical_flip(m)
    return b.numpy(), m.numpy()


def _yolo_num(v: float) -> str:
    return f"{v:.6f}"


def write_yolo(root: Path) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """YOLO_IMAGES images in ultralytics' layout and their labels; returns, per image path, what ultralytics reads:
    class ids and XYXY pixel boxes (computed here from the written text, by torchvision's box_convert)."""
    import numpy as np
    import pytest
    from PIL import Image
    from trdata.sources.yolo import label_path

    torch = pytest.importorskip("torch")
    box_convert = pytest.importorskip("torchvision.ops").box_convert

    rng = np.random.default_rng(3)
    want: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for k in range(YOLO_IMAGES):
        w, h = int(rng.integers(40, 90)), int(rng.integers(36, 80))
        sub = "sub/" if k == 7 else ""
        ext = "png" if k == 2 else "jpg"
        img = root / "images" / "train" / f"{sub}img{k:02d}.{ext}"
        img.parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(photo(k, w, h)).save(img)
        lbl = Path(label_path(str(img)))
        lbl.parent.mkdir(parents=True, exist_ok=True)
        if k == 3:  # no label file: an image without objects
            want[str(img)] = (np.zeros(0, np.int64), np.zeros((0, 4)))
            continue
        lines, classes, boxes = [], [], []
        if k == 5:  # a file of segments: each box is the polygon's bounds
            for _ in range(3):
                n = int(rng.integers(3, 8))
                pts = np.round(rng.uniform(-0.005, 1.005, (n, 2)), 6)
                c = int(rng.integers(0, 80))
                lines.append(" ".join([str(c), *(_yolo_num(v) for v in pts.reshape(-1))]))
                lo, hi = pts.min(axis=0), pts.max(axis=0)
                classes.append(c)
                boxes.append([lo[0] * w, lo[1] * h, hi[0] * w, hi[1] * h])
        elif k != 4:  # k == 4: an empty label file
            for _ in range(int(rng.integers(1, 6))):
                c = int(rng.integers(0, 80))
                cxcywh = [float(_yolo_num(v)) for v in (*rng.uniform(0, 1, 2), *rng.uniform(0.02, 0.7, 2))]
                lines.append(" ".join([str(c), *(_yolo_num(v) for v in cxcywh)]))
                px = torch.tensor([cxcywh], dtype=torch.float64) * torch.tensor(
                    [w, h, w, h], dtype=torch.float64
                )
                classes.append(c)
                boxes.append(box_convert(px, "cxcywh", "xyxy")[0].tolist())
            if k == 6:  # a duplicate (dropped, as ultralytics does), a blank line, CRLF line ends
                lines = [lines[0], "", "  ", *lines, lines[0]]
        sep = "\r\n" if k == 6 else "\n"
        lbl.write_text(sep.join(lines) + (sep if lines else ""))
        want[str(img)] = (np.array(classes, np.int64), np.array(boxes, np.float64).reshape(-1, 4))
    (root / "labels" / "train" / "orphan.txt").write_text(
        "0 0.5 0.5 0.1 0.1\n"
    )  # a label of no image: ignored
    return want


def voc_palette() -> list[int]:
    """VOC's color map (bit-interleaved), 256 RGB entries."""
    out = []
    for i in range(256):
        r = g = b = 0
        c = i
        for j in range(8):
            r |= ((c >> 0) & 1) << (7 - j)
            g |= ((c >> 1) & 1) << (7 - j)
            b |= ((c >> 2) & 1) << (7 - j)
            c >>= 3
        out += [r, g, b]
    return out


def voc_label_map(k: int, w: int, h: int) -> np.ndarray:
    """Blobs of classes 0..20 with 255 (VOC's void) borders around them: values that a wrong reading (RGB,
    interpolation, a shifted crop) would change."""
    import numpy as np

    rng = np.random.default_rng(k)
    m = np.zeros((h, w), np.uint8)
    for _ in range(5):
        c = int(rng.integers(1, 21))
        x0, y0 = int(rng.integers(0, w - 4)), int(rng.integers(0, h - 4))
        x1, y1 = x0 + int(rng.integers(3, w // 2)), y0 + int(rng.integers(3, h // 2))
        m[y0:y1, x0:x1] = 255
        m[y0 + 1 : y1 - 1, x0 + 1 : x1 - 1] = c
    m[rng.random((h, w)) < 0.05] = rng.integers(0, 21)
    return m


def write_voc(root: Path) -> dict[str, np.ndarray]:
    """VOC2012's layout: JPEGImages (more images than maps), SegmentationClass palette PNGs, the split file.
    Returns each map (its palette indices) by key."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(5)
    (root / "JPEGImages").mkdir(parents=True)
    (root / "SegmentationClass").mkdir()
    (root / "ImageSets" / "Segmentation").mkdir(parents=True)
    maps = {}
    for k in range(VOC_IMAGES):
        w, h = int(rng.integers(40, 90)), int(rng.integers(36, 80))
        key = f"2007_{k * 37 % 101:06d}"
        Image.fromarray(photo(k, w, h)).save(root / "JPEGImages" / f"{key}.jpg")
        m = Image.fromarray(voc_label_map(k, w, h), mode="P")
        m.putpalette(voc_palette())
        m.save(root / "SegmentationClass" / f"{key}.png")
        maps[key] = voc_label_map(k, w, h)
    Image.fromarray(photo(99, 30, 30)).save(root / "JPEGImages" / "2008_000001.jpg")  # no map: not a sample
    (root / "ImageSets" / "Segmentation" / "train.txt").write_text("\n".join(list(maps)[::-1][:5]) + "\n")
    return maps


# Detection recipes: stage-2 geometry after a pixel op, replayed through torchvision v2's functional kernels.

PREFIX = (44, 52)  # every recipe starts with Resize(PREFIX): the prefix is an exact resize (no crop)


@functools.cache
def _detection_recipes() -> tuple[dict[str, list[Any]], dict[str, tuple[list[Any], tuple[int, int]]]]:
    """(RECIPES, PADDED): each recipe's transforms after the prefix, by name; PADDED's recipes (also in RECIPES)
    keep each image's own size on a ``Loader(pad_to=...)`` canvas of the size given with them."""
    import trdata

    recipes: dict[str, list[Any]] = {
        "affine-flip": [
            trdata.ColorJitter(0.3),
            trdata.RandomAffine(degrees=25, translate=(0.1, 0.15), scale=(0.8, 1.2), shear=(-8, 8, -5, 5)),
            trdata.RandomHorizontalFlip(),
        ],
        "rotate-perspective": [
            trdata.ColorJitter(0.2),
            trdata.RandomRotation(30),
            trdata.RandomPerspective(0.4, p=1.0),
            trdata.RandomVerticalFlip(),
        ],
        "rotate-expand-resize": [
            trdata.ColorJitter(0.2),
            trdata.RandomRotation(40, expand=True),
            trdata.Resize((40, 46)),
        ],
        "pad-crops": [
            trdata.ColorJitter(0.2),
            trdata.Pad([3, 2, 5, 1]),
            trdata.RandomCrop(40, padding=2),
            trdata.CenterCrop((34, 42)),
            trdata.RandomResizedCrop(28, scale=(0.3, 1.0)),
        ],
        "zoomout-clamp-sanitize": [
            trdata.ColorJitter(0.2),
            trdata.RandomZoomOut(fill=(123, 117, 104), side_range=(1.0, 2.5), p=0.7),
            trdata.RandomAffine(20, translate=(0.25, 0.25)),
            trdata.ClampBoundingBoxes(),
            trdata.Resize((40, 40)),
            trdata.SanitizeBoundingBoxes(min_size=2.0),
        ],
        "lsj": [
            trdata.ColorJitter(0.2),
            trdata.ScaleJitter((48, 48), scale_range=(0.3, 2.0)),
            trdata.RandomCrop((48, 48), pad_if_needed=True),
            trdata.RandomHorizontalFlip(),
        ],
        "multiscale": [
            trdata.ColorJitter(0.2),
            trdata.RandomShortestSize((30, 36, 40), max_size=60),
            trdata.CenterCrop((36, 36)),
        ],
        "containers": [
            trdata.ColorJitter(0.2),
            trdata.RandomChoice([trdata.RandomRotation(20), trdata.RandomAffine(0, translate=(0.2, 0.2))]),
            trdata.RandomApply([trdata.RandomVerticalFlip(1.0), trdata.RandomPerspective(0.3, p=1.0)], p=0.5),
            trdata.RandomOrder([trdata.RandomHorizontalFlip(), trdata.RandomAffine(10, scale=(0.9, 1.1))]),
            trdata.Resize((32, 32)),
        ],
    }

    # Recipes whose images keep their own sizes, on a Loader(pad_to=...) canvas.
    padded: dict[str, tuple[list[Any], tuple[int, int]]] = {
        "multiscale-padded": (
            [
                trdata.ColorJitter(0.2),
                trdata.RandomShortestSize((30, 36, 40), max_size=60),
                trdata.RandomHorizontalFlip(),
            ],
            (64, 64),
        ),
        "ssd-padded": (  # torchvision's references' `ssd` recipe (fill: the mean; masks get 0)
            [
                trdata.RandomPhotometricDistort(),
                trdata.RandomZoomOut(fill=(123, 117, 104), side_range=(1.0, 2.0)),
                trdata.RandomIoUCrop(),
                trdata.RandomHorizontalFlip(),
                trdata.SanitizeBoundingBoxes(),
            ],
            (88, 104),
        ),
        "ssd-like-padded": (
            [
                trdata.ColorJitter(0.2),
                trdata.RandomZoomOut(fill=(123, 117, 104), side_range=(1.0, 2.5)),
                trdata.RandomHorizontalFlip(),
                trdata.SanitizeBoundingBoxes(),
            ],
            (112, 136),
        ),
    }
    recipes.update({k: v[0] for k, v in padded.items()})
    return recipes, padded


def __getattr__(name: str) -> Any:
    """``RECIPES``, ``PADDED`` (the detection recipes) and ``EMB``, ``RAGGED``, ``EXTRAS``, ``EXTRAS_KW`` (the
    extras tests' data) are built on first use: they hold trdata transforms and numpy arrays, and this module is
    imported by conftest.py before anything needs either."""
    if name in ("RECIPES", "PADDED"):
        return _detection_recipes()[name == "PADDED"]
    if name in ("EMB", "RAGGED", "EXTRAS", "EXTRAS_KW"):
        return _extras_arrays()[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def apply_op(
    op: str, v: list[float], hw: tuple[int, int], x: Any, size: tuple[int, int], expand: bool
) -> Any:
    """torchvision v2's functional op for one replayed draw on ``x`` (``size``: the op's output size, ``expand``:
    RandomRotation's); masks: nearest, zero fill, as the references."""
    from torchvision import tv_tensors
    from torchvision.transforms.v2 import functional as F

    NEAR = F.InterpolationMode.NEAREST
    if op == "RandomAffine":
        angle, tx, ty, scale, sx, sy = v
        return F.affine(x, angle, [tx, ty], scale, [sx, sy], interpolation=NEAR, fill=0)
    if op == "RandomRotation":
        return F.rotate(x, v[0], interpolation=NEAR, expand=expand, fill=0)
    if op == "RandomPerspective":
        h, w = hw
        start = [[0, 0], [w - 1, 0], [w - 1, h - 1], [0, h - 1]]
        end = [[int(v[0]), int(v[1])], [int(v[2]), int(v[3])], [int(v[4]), int(v[5])], [int(v[6]), int(v[7])]]
        return F.perspective(x, start, end, interpolation=NEAR, fill=0)
    if op == "RandomCrop":
        pad, (top, left) = [int(a) for a in v[:4]], (int(v[4]), int(v[5]))
        if any(pad):
            x = F.pad(x, pad)
        return F.crop(x, top, left, *size)
    if op == "RandomResizedCrop":
        top, left, h, w = (int(a) for a in v)
        return F.resized_crop(x, top, left, h, w, list(size), antialias=True)
    if op == "RandomIoUCrop":  # crop; boxes whose centre left the crop become zeros (torchvision's marking)
        top, left, h, w = (int(a) for a in v)
        out = F.crop(x, top, left, h, w)
        if isinstance(x, tv_tensors.BoundingBoxes):
            cx, cy = (x[:, 0] + x[:, 2]) / 2, (x[:, 1] + x[:, 3]) / 2
            inside = (left < cx) & (cx < left + w) & (top < cy) & (cy < top + h)
            out[~inside] = 0
        return out
    if op in ("ScaleJitter", "RandomShortestSize"):
        return F.resize(x, [int(v[0]), int(v[1])])
    if op == "RandomZoomOut":
        return F.pad(x, [int(a) for a in v[:4]], fill=0)
    if op == "ClampBoundingBoxes":
        return F.clamp_bounding_boxes(x) if isinstance(x, tv_tensors.BoundingBoxes) else x
    if op == "Pad":
        return F.pad(x, [3, 2, 5, 1])
    if op == "CenterCrop":
        # torchvision's crop with its image's anchor: its box kernel rounds a negative half anchor (a crop
        # larger than the image by an odd count) the other way from the padding its image kernel adds, so its
        # boxes sit a pixel off its own pixels there; trdata's targets follow the pixels
        img_h, img_w = hw
        top, left = (
            -((c - n) // 2) if c > n else round((n - c) / 2) for n, c in ((img_h, size[0]), (img_w, size[1]))
        )
        return F.crop(x, top, left, *size)
    if op == "Resize":
        return F.resize(x, list(size))
    if op == "RandomHorizontalFlip":
        return F.horizontal_flip(x)
    if op == "RandomVerticalFlip":
        return F.vertical_flip(x)
    raise AssertionError(op)


def size_of(op: str, recipe: str) -> tuple[int, int]:
    """The output size of the recipe's op named ``op`` (each recipe has one such op with a size)."""
    for t in _detection_recipes()[0][recipe]:
        inner = getattr(t, "transforms", None) or [t]
        for u in inner:
            if type(u).__name__ == op and getattr(u, "size", None) is not None:
                s = u.size
                return (s, s) if isinstance(s, int) else tuple(s)
    return (0, 0)


def assert_masks_equal_but_for_ties(got: np.ndarray, want: np.ndarray) -> None:
    """Nearest-sampled masks equal torchvision's, except where a warp's float32 source coordinate falls on a pixel
    boundary: torch's own kernel rounds those ties differently by CPU (FMA or not). Such a pixel lies on the
    reference mask's edge (its 3×3 neighbourhood holds both values), and there are very few of them; anything
    else — a shifted, flipped or missing mask — fails."""
    import numpy as np

    assert got.shape == want.shape and got.dtype == want.dtype
    if want.size == 0:
        return
    got, want = got.reshape(-1, *got.shape[-2:]), want.reshape(-1, *want.shape[-2:])
    diff = np.argwhere(got != want)
    assert len(diff) <= max(1, want.size // 1000), f"{len(diff)} of {want.size} mask pixels differ"
    for n, y, x in diff:
        around = want[n, max(y - 1, 0) : y + 2, max(x - 1, 0) : x + 2]
        assert around.min() != around.max(), f"mask {n} differs at ({y}, {x}), off its edge"


# Pixel ops against torchvision v2 (test_transforms_*).


def textured_images(n: int = 4, h: int = 37, w: int = 45, seed: int = 0) -> np.ndarray:
    """Textured uint8 RGB images (NHWC): smooth gradients (so equalize/autocontrast have work) plus noise."""
    import numpy as np

    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w]
    base = np.stack([x * 3 + y, y * 4, (x + y) * 2], -1)[None] + rng.integers(0, 60, (n, h, w, 3))
    return (base % 220 + 10).astype(np.uint8)


def tv() -> Any:
    """torchvision.transforms.v2, or skip."""
    import pytest

    return pytest.importorskip("torchvision.transforms.v2")


def chw(img: np.ndarray) -> Any:
    """An HWC uint8 array as a CHW torch tensor."""
    import torch

    return torch.from_numpy(img).permute(2, 0, 1).contiguous()


def hwc(t: Any) -> np.ndarray:
    """A CHW torch tensor as an HWC array."""
    return t.permute(1, 2, 0).numpy()


def close(a: np.ndarray, b: np.ndarray) -> float:
    """The fraction of values of ``a`` within ±1 of ``b`` (same shapes)."""
    import numpy as np

    assert a.shape == b.shape, (a.shape, b.shape)
    return float(np.mean(np.abs(a.astype(np.int32) - b.astype(np.int32)) <= 1))


def pil_resize(img: np.ndarray, hw: tuple[int, int], mode: str) -> np.ndarray:
    """``img`` resized to ``hw`` by Pillow (nearest, bilinear or bicubic)."""
    import numpy as np
    from PIL import Image

    f = {"nearest": Image.NEAREST, "bilinear": Image.BILINEAR, "bicubic": Image.BICUBIC}[mode]
    return np.asarray(Image.fromarray(img).resize((hw[1], hw[0]), f))


DRAWS = 10_000  # draws per distribution test


def sampled_draws(op: Any, n: int = DRAWS, h: int = 32, w: int = 32) -> list[list[float]]:
    """trdata's draws for ``op`` (``_core.sample_op``) on samples 0..n-1 of epoch 1, seed 3, an h×w image."""
    from trdata import _core

    spec = op._spec()
    return [
        _core.sample_op(spec, seed=3, epoch=1, index=i, position=0, height=h, width=w, channels=3)
        for i in range(n)
    ]


def torchvision_params(op: Any, n: int = DRAWS, h: int = 32, w: int = 32) -> list[dict[str, Any]]:
    """torchvision's own ``make_params`` (or ``_get_params``) of ``op``, ``n`` times on an h×w image."""
    import torch

    torch.manual_seed(0)
    img = torch.zeros(3, h, w, dtype=torch.uint8)
    make = getattr(op, "make_params", None) or op._get_params
    return [make([img]) for _ in range(n)]


MOSAIC_S = 48  # test_mosaic's Mosaic(size): the canvas is 96 × 96
MOSAIC_N = 9


def write_mosaic_boxes(root: Path, n: int = MOSAIC_N, bad: int | None = None) -> tuple[Path, Path]:
    """test_mosaic's set: ``n`` JPEGs of varied sizes (long sides from MOSAIC_S/2 to 2·MOSAIC_S, so the parts are
    up- and downscaled without DCT scaling), each dark noise with one white rectangle, annotated as a COCO box of
    category ``k + 1``; image ``bad`` (if any) is not a JPEG."""
    import json

    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(3)
    (root / "images").mkdir(parents=True)
    images, anns = [], []
    for k in range(n):
        w, h = (
            int(rng.integers(MOSAIC_S // 2, 2 * MOSAIC_S - 1)),
            int(rng.integers(MOSAIC_S // 2, 2 * MOSAIC_S - 1)),
        )
        a = rng.integers(10, 60, (h, w, 3)).astype(np.uint8)
        bw, bh = max(w // 3, 6), max(h // 3, 6)
        x0, y0 = int(rng.integers(0, w - bw)), int(rng.integers(0, h - bh))
        a[y0 : y0 + bh, x0 : x0 + bw] = 255
        name = f"{k:03d}.jpg"
        if k == bad:
            (root / "images" / name).write_bytes(b"not a jpeg at all")
        else:
            Image.fromarray(a).save(root / "images" / name, quality=95)
        images.append({"id": k + 1, "file_name": name, "width": w, "height": h})
        box = [x0, y0, bw, bh]
        anns.append(
            {"id": k + 1, "image_id": k + 1, "category_id": k + 1, "iscrowd": 0, "bbox": box, "area": bw * bh}
        )
    cats = [{"id": k + 1, "name": f"c{k}"} for k in range(n)]
    ann = root / "ann.json"
    ann.write_text(json.dumps({"images": images, "annotations": anns, "categories": cats}))
    return root / "images", ann


# Other projects' record files, written by those projects' own writers (tests/test_record_sources.py and the source
# contract): Hugging Face Parquet (datasets), a plain pyarrow table, Mosaic MDS shards (mosaicml-streaming's
# MDSWriter), LitData chunks (litdata.optimize) and TFRecord files (tfrecord's TFRecordWriter). Every writer skips
# the test when its package is missing. The images are ``record_images``' JPEG files (photo-like, sizes that vary
# by sample), stored as those files' bytes: every writer here keeps a JPEG file's bytes as they are.

RECORD_N = 23  # samples of every record set (the source contract's count)
RECORD_CLASSES = ["cat", "dog", "fox", "owl"]


def record_label(i: int) -> int:
    """Sample ``i``'s label (a class of RECORD_CLASSES, in no sorted order)."""
    return (i * 3) % len(RECORD_CLASSES)


def record_caption(i: int) -> str:
    """Sample ``i``'s caption (non-ASCII on purpose: UTF-8 must come through)."""
    return f"photo n°{i} of a {RECORD_CLASSES[record_label(i)]}"


class RecordSet:
    """What a record writer wrote: ``location`` (the files, or the dataset's folder, as the reader takes it) and,
    sample by sample in write order, the ``images`` (encoded bytes as stored), ``labels`` and ``captions``."""

    def __init__(
        self, location: list[str] | str, images: list[bytes], labels: list[int], captions: list[str]
    ) -> None:
        self.location, self.images, self.labels, self.captions = location, images, labels, captions

    def __len__(self) -> int:
        return len(self.images)


def record_images(root: Path, n: int = RECORD_N) -> list[Path]:
    """``n`` JPEG files ``root/NNN.jpg`` (``photo(i)``, sizes from 36x28 to 47x33, quality 90), in sample order;
    written once per folder."""
    paths = [root / f"{i:03d}.jpg" for i in range(n)]
    if not all(p.exists() for p in paths):
        write_jpegs(root, n, size=lambda i: (36 + (i * 5) % 12, 28 + i % 6))
    return paths


def _record_samples(root: Path, n: int) -> tuple[list[Path], list[bytes], list[int], list[str]]:
    paths = record_images(root / "images", n)
    return (
        paths,
        [p.read_bytes() for p in paths],
        [record_label(i) for i in range(n)],
        [record_caption(i) for i in range(n)],
    )


def write_hf_parquet(root: Path, n: int = RECORD_N, shards: int = 2, rows_per_group: int = 5) -> RecordSet:
    """A Hugging Face dataset as ``push_to_hub`` writes it, without the Hub: ``datasets.Dataset.from_dict`` with
    ``Features(image=Image(), label=ClassLabel(RECORD_CLASSES), text=Value("string"))`` over the image files,
    cut into ``shards`` contiguous shards, each with the files' bytes embedded (``embed_table_storage``, the map
    push_to_hub runs: ``to_parquet`` alone leaves only the paths) and written by ``to_parquet`` as
    ``root/data/train-NNNNN-of-MMMMM.parquet`` in row groups of ``rows_per_group`` rows. The schema metadata
    carries the ``huggingface`` features JSON (the class names)."""
    import pytest

    datasets = pytest.importorskip("datasets")
    from datasets.table import embed_table_storage

    paths, images, labels, captions = _record_samples(root, n)
    features = datasets.Features(
        image=datasets.Image(), label=datasets.ClassLabel(names=RECORD_CLASSES), text=datasets.Value("string")
    )
    ds = datasets.Dataset.from_dict(
        {"image": [str(p) for p in paths], "label": labels, "text": captions}, features=features
    )
    (root / "data").mkdir(exist_ok=True)
    files = []
    for index in range(shards):
        shard = ds.shard(num_shards=shards, index=index, contiguous=True)
        shard = shard.with_format("arrow").map(embed_table_storage, batched=True, keep_in_memory=True)
        shard = shard.with_format()
        path = root / "data" / f"train-{index:05d}-of-{shards:05d}.parquet"
        shard.to_parquet(str(path), batch_size=rows_per_group)
        files.append(str(path))
    return RecordSet(files, images, labels, captions)


def write_arrow_parquet(root: Path, n: int = RECORD_N, rows_per_group: int = 7) -> RecordSet:
    """One Parquet file written by pyarrow (defaults: snappy, dictionary pages) from a plain table: ``image``
    binary (every fifth sample re-encoded as PNG, so that formats are sniffed), ``label`` int64 (sample 4 null:
    no label, -1), ``caption`` string; row groups of ``rows_per_group`` rows."""
    import pytest

    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    import numpy as np
    from PIL import Image

    _, images, labels, captions = _record_samples(root, n)
    images = [
        png(np.asarray(Image.open(io.BytesIO(b)).convert("RGB"))) if i % 5 == 3 else b
        for i, b in enumerate(images)
    ]
    labels = [-1 if i == 4 else lab for i, lab in enumerate(labels)]
    table = pa.table(
        {
            "image": pa.array(images, pa.binary()),
            "label": pa.array([None if lab == -1 else lab for lab in labels], pa.int64()),
            "caption": pa.array(captions, pa.string()),
        }
    )
    path = root / "plain.parquet"
    pq.write_table(table, str(path), row_group_size=rows_per_group)
    return RecordSet([str(path)], images, labels, captions)


def write_mds(
    root: Path, n: int = RECORD_N, compression: str | None = None, size_limit: int = 16 << 10
) -> RecordSet:
    """Mosaic MDS shards by ``streaming.MDSWriter(columns={"image": "jpeg", "label": "int", "caption": "str"})``
    into ``root/mds-<compression>`` (index.json + shard.NNNNN.mds[.zstd]), several shards (``size_limit``
    bytes each). The images go in as ``PIL.Image.open(file)``: the jpeg encoding then stores the file's bytes."""
    import pytest

    streaming = pytest.importorskip("streaming")
    from PIL import Image

    paths, images, labels, captions = _record_samples(root, n)
    out = root / f"mds-{compression or 'raw'}"
    columns = {"image": "jpeg", "label": "int", "caption": "str"}
    with streaming.MDSWriter(
        out=str(out), columns=columns, compression=compression, size_limit=size_limit
    ) as w:
        for p, label, caption in zip(paths, labels, captions):
            w.write({"image": Image.open(p), "label": label, "caption": caption})
    return RecordSet(str(out), images, labels, captions)


def _litdata_item(item: tuple[str, int, str]) -> dict[str, Any]:
    """litdata.optimize's ``fn``: one sample as a dict (image as the opened JPEG file: its bytes are stored)."""
    from PIL import Image

    path, label, caption = item
    return {"image": Image.open(path), "label": label, "caption": caption}


def write_litdata(
    root: Path, n: int = RECORD_N, compression: str | None = None, chunk_bytes: int = 16 << 10
) -> RecordSet:
    """LitData chunks by ``litdata.optimize(fn, inputs, output_dir=root/litdata-<compression>, chunk_bytes,
    compression)``: items ``{"image": JPEG file, "label": int, "caption": str}`` (data_format jpeg, int, str),
    one worker (so chunks hold the inputs in order), several chunks. litdata 0.2.76's ``compression="zstd"``
    compresses in-file (``compression_level`` "batch": zstd frames of 256 items inside ``chunk-0-N.bin``). The
    worker is forked (optimize would force the process-wide start method to spawn; the old one is restored)."""
    import multiprocessing

    import pytest

    litdata = pytest.importorskip("litdata")
    paths, images, labels, captions = _record_samples(root, n)
    out = root / f"litdata-{compression or 'raw'}"
    method = multiprocessing.get_start_method(allow_none=True)
    try:
        litdata.optimize(
            fn=_litdata_item,
            inputs=[(str(p), lab, cap) for p, lab, cap in zip(paths, labels, captions)],
            output_dir=str(out),
            chunk_bytes=chunk_bytes,
            compression=compression,
            num_workers=1,
            mode="overwrite",
            start_method="fork",
            verbose=False,
        )
    finally:
        multiprocessing.set_start_method(method, force=True)
    return RecordSet(str(out), images, labels, captions)


def write_tfrecord(root: Path, n: int = RECORD_N, per_file: int = 10, index: bool = False) -> RecordSet:
    """TFRecord files by ``tfrecord.TFRecordWriter`` as TF's ImageNet converters name the features:
    ``image/encoded`` (bytes), ``image/class/label`` (int64), ``image/text`` (bytes: the caption's UTF-8);
    ``per_file`` records a file ``root/train-NNNNN.tfrecord``; with ``index`` its ``<file>.tfindex`` beside each
    (tfrecord's ``create_index``: lines "offset length")."""
    import pytest

    tfrecord = pytest.importorskip("tfrecord")
    _, images, labels, captions = _record_samples(root, n)
    files = []
    for s in range(0, n, per_file):
        path = root / f"train-{s // per_file:05d}.tfrecord"
        writer = tfrecord.TFRecordWriter(str(path))
        for i in range(s, min(n, s + per_file)):
            writer.write(
                {
                    "image/encoded": (images[i], "byte"),
                    "image/class/label": (labels[i], "int"),
                    "image/text": (captions[i].encode(), "byte"),
                }
            )
        writer.close()
        if index:
            from tfrecord.tools.tfrecord2idx import create_index

            create_index(str(path), f"{path}.tfindex")
        files.append(str(path))
    return RecordSet(files, images, labels, captions)
