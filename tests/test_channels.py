"""``channels=``: 1- or 3-channel batches.

Gray sources (MNIST-family, gray ``Arrays``) come out with 1 channel by default, as torchvision's
``MNIST(transform=ToTensor())`` gives them; ``channels=3`` widens them; ``channels=1`` turns RGB into Pillow's
``convert("L")`` luma. Every reference here is computed by Pillow (and torchvision when installed) from files the
tests write in the layouts those libraries read."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import trdata
from _fixtures import make_mnist, photo, psnr, write_jpegs
from trdata.errors import ConfigError

Image = pytest.importorskip("PIL.Image")

MIN_PSNR_DB = 35.0  # tests/test_pillow_parity.py's acceptance for resampled output
MNIST_VARIANTS = ["MNIST", "FashionMNIST", "KMNIST"]


def batches(source: trdata.Source, **kw: Any) -> tuple[np.ndarray, np.ndarray]:
    """Every image of one epoch in dataset order (unshuffled, reproducible) and their indices."""
    kw.setdefault("workers", 2)
    kw.setdefault("batch_size", 8)
    with trdata.Loader(source, shuffle=False, **kw) as ld:
        got = [(np.asarray(b.images).copy(), np.asarray(b.indices).copy()) for b in ld]
    return np.concatenate([g[0] for g in got]), np.concatenate([g[1] for g in got])


def mnist_root(tmp_path: Path, variant: str = "MNIST", n: int = 20) -> Path:
    """Both splits of `variant` in torchvision's raw layout (torchvision checks that all four files exist)."""
    make_mnist(tmp_path, variant, True, n=n, storage="both", seed=7)
    make_mnist(tmp_path, variant, False, n=n, storage="both", seed=8)
    return tmp_path


def center_crop(img: Any, h: int, w: int) -> Any:
    """torchvision ``CenterCrop`` on a PIL image no smaller than (h, w): Python rounds halves to even."""
    top, left = round((img.height - h) / 2.0), round((img.width - w) / 2.0)
    return img.crop((left, top, left + w, top + h))


def resize_shorter(img: Any, size: int) -> Any:
    """torchvision ``Resize(int)`` on a PIL image (bilinear, Pillow's antialiasing)."""
    w, h = img.size
    short, long = (w, h) if w <= h else (h, w)
    new_long = int(size * long / short)
    nw, nh = (size, new_long) if w <= h else (new_long, size)
    return img.resize((nw, nh), Image.BILINEAR)


def mode_and_size(path: str) -> tuple[str, tuple[int, int]]:
    with Image.open(path) as im:
        return im.mode, im.size


# ---------------------------------------------------------------------------------------------------- MNIST


@pytest.mark.parametrize("variant", MNIST_VARIANTS)
def test_mnist_batches_have_one_channel_and_equal_torchvision(tmp_path: Path, variant: str) -> None:
    """(N, 1, 28, 28) by default; uint8 is ToTensor() × 255, float32 with MNIST_NORM is ToTensor() + Normalize,
    both exactly; Resize((32, 32)) on the gray image is Pillow's resize of the L image, exactly."""
    datasets = pytest.importorskip("torchvision.datasets")
    T = pytest.importorskip("torchvision.transforms")
    torch = pytest.importorskip("torch")
    root = mnist_root(tmp_path, variant)
    src = getattr(trdata, variant)(root, train=True)
    norm = trdata.FASHION_MNIST_NORM if variant == "FashionMNIST" else trdata.MNIST_NORM
    cases = [
        ([trdata.CenterCrop(28)], "uint8", None, T.ToTensor()),
        ([trdata.CenterCrop(28)], "float32", norm, T.Compose([T.ToTensor(), T.Normalize(*norm)])),
        ([trdata.Resize((32, 32))], "uint8", None, T.Compose([T.Resize((32, 32)), T.ToTensor()])),
    ]
    for transforms, dtype, normalize, theirs_tf in cases:
        ours, idx = batches(src, transforms=transforms, dtype=dtype, normalize=normalize)
        theirs = getattr(datasets, variant)(str(root), train=True, download=False, transform=theirs_tf)
        want = torch.stack([theirs[i][0] for i in range(len(theirs))]).numpy()
        assert ours.shape == want.shape == (20, 1, *want.shape[2:]), (ours.shape, want.shape)
        if dtype == "uint8":
            want = np.round(want * 255).astype(np.uint8)
        np.testing.assert_array_equal(ours, want[idx])
        assert not (ours == ours.flat[0]).all()


def test_mnist_channels_3_is_the_widened_gray(tmp_path: Path) -> None:
    src = trdata.MNIST(mnist_root(tmp_path), train=True)
    kw: dict[str, Any] = dict(
        transforms=[trdata.RandomResizedCrop(20), trdata.RandomHorizontalFlip()], seed=5
    )
    gray, gi = batches(src, dtype="uint8", **kw)
    rgb, ri = batches(src, dtype="uint8", channels=3, **kw)
    assert gray.shape == (20, 1, 20, 20) and rgb.shape == (20, 3, 20, 20)
    np.testing.assert_array_equal(gi, ri)
    for c in range(3):
        np.testing.assert_array_equal(rgb[:, c], gray[:, 0])
    # channels=1 given explicitly is the default of a gray source
    np.testing.assert_array_equal(batches(src, dtype="uint8", channels=1, **kw)[0], gray)
    with trdata.Loader(src, batch_size=4, transforms=[trdata.CenterCrop(28)]) as ld:
        assert ld.channels == 1
    with trdata.Loader(src, batch_size=4, transforms=[trdata.CenterCrop(28)], channels=3) as ld:
        assert ld.channels == 3


def test_gray_arrays_in_every_shape_and_layout(tmp_path: Path) -> None:
    """(N, H, W) and (N, H, W, 1) arrays are gray; NHWC gives (N, H, W, 1), the same values as NCHW, in every
    dtype; float16/bfloat16 are the float32 values rounded (bfloat16 checked through torch when installed)."""
    rng = np.random.default_rng(1)
    g = rng.integers(0, 256, (13, 31, 23), dtype=np.uint8)
    kw: dict[str, Any] = dict(transforms=[trdata.RandomResizedCrop((17, 19)), trdata.RandomHorizontalFlip()])
    base, _ = batches(trdata.Arrays(g), dtype="float32", normalize=trdata.MNIST_NORM, **kw)
    assert base.shape == (13, 1, 17, 19) and base.dtype == np.float32
    nhwc, _ = batches(
        trdata.Arrays(g[..., None]), dtype="float32", normalize=trdata.MNIST_NORM, layout="NHWC", **kw
    )
    assert nhwc.shape == (13, 17, 19, 1)
    np.testing.assert_array_equal(nhwc[..., 0], base[:, 0])
    u8, _ = batches(trdata.Arrays(g), dtype="uint8", layout="NHWC", **kw)
    want = (u8.astype(np.float32) / np.float32(255) - np.float32(0.1307)) / np.float32(0.3081)
    np.testing.assert_array_equal(nhwc, want)
    f16, _ = batches(trdata.Arrays(g), dtype="float16", normalize=trdata.MNIST_NORM, layout="NHWC", **kw)
    assert f16.shape == (13, 17, 19, 1) and f16.dtype == np.float16
    np.testing.assert_array_equal(f16, want.astype(np.float16))
    torch = pytest.importorskip("torch")
    with trdata.Loader(
        trdata.Arrays(g), dtype="bfloat16", normalize=trdata.MNIST_NORM, layout="NHWC", batch_size=8, **kw
    ) as ld:
        b = next(iter(ld))
        x, _ = b.torch()
        assert x.dtype == torch.bfloat16 and tuple(x.shape) == (8, 17, 19, 1)
        ref = torch.from_numpy(want[np.asarray(b.indices)]).to(torch.bfloat16)
        assert torch.equal(x, ref)


# ---------------------------------------------------------------------------------------------------- RGB → L


def test_rgb_arrays_in_gray_are_pillow_convert_l_bit_exactly() -> None:
    """Random RGB pixels (every channel value, 40 × 64 × 64 pixels) through channels=1 at full size: exactly
    ``Image.fromarray(a).convert("L")``."""
    rng = np.random.default_rng(2)
    rgb = rng.integers(0, 256, (40, 64, 64, 3), dtype=np.uint8)
    out, idx = batches(trdata.Arrays(rgb), transforms=[trdata.CenterCrop(64)], dtype="uint8", channels=1)
    assert out.shape == (40, 1, 64, 64)
    want = np.stack([np.asarray(Image.fromarray(a).convert("L")) for a in rgb])
    np.testing.assert_array_equal(out[:, 0], want[idx])


@pytest.fixture(scope="module")
def rgb_jpegs(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """Small RGB JPEGs (4:2:0 and 4:4:4, odd sizes): small enough that the eval pipeline decodes them at full
    size, where trdata equals Pillow bit for bit."""
    root = tmp_path_factory.mktemp("rgb_jpegs")
    sizes = lambda i: (97 + 13 * i, 83 + 7 * (i % 5))  # noqa: E731
    return write_jpegs(root / "420", 6, sizes) + write_jpegs(root / "444", 6, sizes, subsampling=0)


def pillow_gray(path: str) -> Any:
    """What torchvision's ImageFolder + ``Grayscale()`` sees: the file as RGB, then ``convert("L")``."""
    with Image.open(path) as im:
        return im.convert("RGB").convert("L")


def test_rgb_jpegs_in_gray_equal_pillow_bit_exactly(rgb_jpegs: list[str]) -> None:
    """uint8 channels=1 of RGB JPEGs equals Pillow bit for bit: a centre crop (no resampling) is
    ``convert("L")`` + crop; Resize + CenterCrop is torchvision's ``[Grayscale(), Resize(64), CenterCrop(56)]``
    (Pillow converts first, as trdata does)."""
    src = trdata.FileList(rgb_jpegs, list(range(len(rgb_jpegs))))
    crop, idx = batches(src, transforms=[trdata.CenterCrop((70, 80))], dtype="uint8", channels=1)
    assert crop.shape == (len(rgb_jpegs), 1, 70, 80)
    for row, i in zip(crop, idx):
        np.testing.assert_array_equal(row[0], np.asarray(center_crop(pillow_gray(rgb_jpegs[i]), 70, 80)))
    eval_tf = [trdata.Resize(64), trdata.CenterCrop(56)]
    for layout in ("NCHW", "NHWC"):
        out, idx = batches(src, transforms=eval_tf, dtype="uint8", channels=1, layout=layout)
        out = out[:, 0] if layout == "NCHW" else out[..., 0]
        for row, i in zip(out, idx):
            want = np.asarray(center_crop(resize_shorter(pillow_gray(rgb_jpegs[i]), 64), 56, 56))
            np.testing.assert_array_equal(row, want)


def test_gray_before_or_after_resize_against_torchvision(tmp_path: Path) -> None:
    """On the same crop parameters (RandomResizedCrop with scale=(1, 1) and the images' own ratio: the whole
    image, in torchvision and in trdata alike; a certain flip): trdata's channels=1 is within ±1 (the 8-bit
    intermediate's rounding, pass order) of torchvision's ``[Grayscale(), RandomResizedCrop, Flip]`` and within
    the repo's resize tolerance (PSNR ≥ 35 dB, a few levels at most) of ``[RandomResizedCrop, Flip, Grayscale()]``
    — the order where Pillow resizes RGB and converts after."""
    T = pytest.importorskip("torchvision.transforms")
    w, h = 120, 90
    same_size = write_jpegs(tmp_path / "420", 6, (w, h)) + write_jpegs(
        tmp_path / "444", 6, (w, h), subsampling=0
    )
    ratio = (w / h, w / h)
    size = (h * 9 // 10, w * 9 // 10)  # > 7/8 of the image: decoded at full size (no DCT scaling)
    src = trdata.FileList(same_size, list(range(len(same_size))))
    rrc = [trdata.RandomResizedCrop(size, scale=(1.0, 1.0), ratio=ratio), trdata.RandomHorizontalFlip(1.0)]
    ours, idx = batches(src, transforms=rrc, dtype="uint8", channels=1)
    tv_rrc = [T.RandomResizedCrop(size, scale=(1.0, 1.0), ratio=ratio), T.RandomHorizontalFlip(1.0)]
    gray_first = T.Compose([T.Grayscale(), *tv_rrc])
    gray_last = T.Compose([*tv_rrc, T.Grayscale()])
    worst_db, worst_diff = math.inf, 0
    for row, i in zip(ours[:, 0], idx):
        with Image.open(same_size[i]) as im:
            rgb = im.convert("RGB")
        first = np.asarray(gray_first(rgb))
        last = np.asarray(gray_last(rgb))
        assert np.abs(row.astype(int) - first).max() <= 1
        worst_db = min(worst_db, psnr(row, last))
        worst_diff = max(worst_diff, int(np.abs(row.astype(int) - last).max()))
    assert worst_db >= MIN_PSNR_DB and worst_diff <= 3, (worst_db, worst_diff)


def test_every_decodable_edge_case_in_gray(edge_dir: Path) -> None:
    """Gray, CMYK, 4:4:0, progressive, PNGs with alpha or a palette…: channels=1 is torchvision's
    ``convert("RGB")`` + ``Grayscale()`` + Resize + CenterCrop within the eval pipeline's tolerance (large files
    decode at a DCT scale), and a file Pillow opens as "L" stays its own values."""
    paths = sorted(
        str(p) for p in edge_dir.iterdir() if p.suffix.lower() in (".jpg", ".jpeg", ".png", ".mpo")
    )
    decodable = []
    for p in paths:
        try:
            with Image.open(p) as im:
                im.load()
            decodable.append(p)
        except OSError:  # 12-bit and truncated files: Pillow refuses them (test_pillow_parity says which)
            continue
    src = trdata.FileList(decodable, list(range(len(decodable))))
    out, idx = batches(src, transforms=[trdata.Resize(64), trdata.CenterCrop(56)], dtype="uint8", channels=1)
    for row, i in zip(out[:, 0], idx):
        want = np.asarray(center_crop(resize_shorter(pillow_gray(decodable[i]), 64), 56, 56))
        assert psnr(row, want) >= MIN_PSNR_DB, decodable[i]
    # A gray JPEG at full size: its own pixels (the decoder widens it to RGB; luma of (v, v, v) is v).
    gray = [p for p in decodable if mode_and_size(p)[0] == "L" and min(mode_and_size(p)[1]) >= 8]
    assert gray, "the edge cases hold gray files"
    for p in gray:
        with Image.open(p) as im:
            w, h = im.size
            want = np.asarray(im)
        got, _ = batches(
            trdata.FileList([p]), transforms=[trdata.CenterCrop((h, w))], dtype="uint8", channels=1
        )
        np.testing.assert_array_equal(got[0, 0], want)
        # files default to 3 channels, whatever they hold (torchvision's ImageFolder converts to RGB)
        rgb, _ = batches(trdata.FileList([p]), transforms=[trdata.CenterCrop((h, w))], dtype="uint8")
        assert rgb.shape == (1, 3, h, w)
        assert all(np.array_equal(rgb[0, c], want) for c in range(3))


# ---------------------------------------------------------------------------------------------------- errors


@pytest.mark.parametrize("bad", [0, 2, 4, -1, 2**70, "rgb", True, False, 1.0, np.bool_(True), [1]])
def test_bad_channels_are_config_errors_naming_channels(tmp_path: Path, bad: Any) -> None:
    paths = write_jpegs(tmp_path, 2)
    with pytest.raises(ConfigError) as e:
        trdata.Loader(trdata.FileList(paths), transforms=[trdata.CenterCrop(8)], channels=bad)
    assert e.value.parameter == "channels", str(e.value)
    assert str(e.value).startswith("invalid channels: "), str(e.value)


def test_normalize_must_match_the_channels(tmp_path: Path) -> None:
    """One value per channel or one for all: a 3-value (RGB) preset with 1 channel is refused, explicitly asked or
    by a gray source's default; the gray presets work with 1 and 3 channels."""
    paths = write_jpegs(tmp_path / "j", 4)
    g = np.zeros((4, 8, 8), dtype=np.uint8)
    kw: dict[str, Any] = dict(transforms=[trdata.CenterCrop(8)], batch_size=2, workers=1)
    for src, channels in ((trdata.FileList(paths), 1), (trdata.Arrays(g), None)):
        for norm in (trdata.IMAGENET, trdata.CIFAR10_NORM, ((0.5, 0.5, 0.5), (0.2,))):
            with pytest.raises(ConfigError) as e:
                trdata.Loader(src, normalize=norm, channels=channels, **kw)
            assert e.value.parameter == "normalize" and "channels=1" in str(e.value), str(e.value)
        for norm in (trdata.MNIST_NORM, trdata.FASHION_MNIST_NORM, ((0.5,), (0.25,))):
            with trdata.Loader(src, normalize=norm, channels=channels, **kw) as ld:
                x = next(iter(ld)).images
                assert x.shape[1] == 1 and np.isfinite(x).all()
    for norm in (trdata.IMAGENET, trdata.MNIST_NORM):
        with trdata.Loader(trdata.Arrays(g), normalize=norm, channels=3, **kw) as ld:
            assert next(iter(ld)).images.shape == (2, 3, 8, 8)
    with pytest.raises(ConfigError) as e:
        trdata.Loader(trdata.FileList(paths), normalize=((0.5, 0.5), (0.2, 0.2)), **kw)
    assert e.value.parameter == "normalize" and "1 or 3 values" in str(e.value)


def test_gray_batches_are_reproducible_across_worker_counts(tmp_path: Path) -> None:
    """The gray kernels are per-sample like the RGB ones: the same bytes with 1 or 3 workers."""
    rgb = np.stack([photo(i, 57, 41) for i in range(15)])
    kw: dict[str, Any] = dict(
        transforms=[trdata.RandomResizedCrop(24), trdata.RandomHorizontalFlip()],
        dtype="bfloat16",
        normalize=trdata.MNIST_NORM,
        channels=1,
        seed=9,
        reproducible=True,
    )
    one, i1 = batches(trdata.Arrays(rgb), workers=1, **kw)
    three, i3 = batches(trdata.Arrays(rgb), workers=3, **kw)
    assert one.shape == (15, 1, 24, 24)
    np.testing.assert_array_equal(i1, i3)
    assert one.tobytes() == three.tobytes()
