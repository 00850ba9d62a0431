"""The GPU resample kernel (``src/cuda/kernels/resample.cu`` via ``GpuResampler``) against the CPU fused writer,
on the same decoded pixels: every JPEG's window is decoded at full size on the CPU by the worker's decoder,
resampled + flipped + normalized + cast + laid out by the CPU fused writer (expected) and, uploaded as it is, by
the GPU kernels (one launch per pass for the batch) — 0 differing bytes for every dtype and layout, both pass
orders, flips, bilinear/bicubic/nearest, upscales and zero padding (``_core.gpu_resample_check``). Skips without
CUDA or libnvrtc."""

from __future__ import annotations

import io

import pytest
import trdata
from _fixtures import COMMITTED_EDGE, photo
from PIL import Image
from trdata import _core
from trdata._cuda_libs import nvrtc as _nvrtc
from trdata.transforms import specs

_probe = _nvrtc.probe()
_cuda = _core.machine_info()["cuda"].get("available")
pytestmark = pytest.mark.skipif(
    not (_cuda and _probe["found"]),
    reason=f"needs CUDA and libnvrtc (cuda={_cuda}, nvrtc={_probe['found']})",
)

DTYPES = [
    ("uint8", None),
    ("float32", trdata.IMAGENET),
    ("float16", trdata.IMAGENET),
    ("bfloat16", trdata.IMAGENET),
    ("float32", None),
]
LAYOUTS = ["NCHW", "NHWC"]


def _jpeg(w: int, h: int, seed: int, gray: bool = False, **save: object) -> bytes:
    img = Image.fromarray(photo(seed, w, h))
    if gray:
        img = img.convert("L")
    buf = io.BytesIO()
    img.save(buf, "JPEG", quality=90, **save)
    return buf.getvalue()


def _files() -> list[bytes]:
    """ImageNet-like JPEGs (landscape, portrait, every chroma layout, gray) and real committed files."""
    made = [
        _jpeg(500, 375, 1, subsampling=2),  # 4:2:0
        _jpeg(375, 500, 2, subsampling=0),  # 4:4:4 portrait
        _jpeg(640, 427, 3, subsampling=1),  # 4:2:2
        _jpeg(333, 500, 4, gray=True),
        _jpeg(1024, 683, 5, subsampling=2),
    ]
    real = [
        "ycc420_ref__hopper.jpg",
        "ycc444_camera__nikon-e950.jpg",
        "ycc422_camera__canon-ixus.jpg",
        "ycc420_oddsize__testorig.jpg",
        "gray__hopper_gray.jpg",
        "restart_markers_dri13__rgb.jpg",
        "extreme_aspect_284x25__image01980.jpg",
    ]
    return made + [(COMMITTED_EDGE / name).read_bytes() for name in real if (COMMITTED_EDGE / name).is_file()]


FILES = _files()


def _check(transforms: list[object], keys_per_file: int, dtype: str, normalize: object, layout: str) -> dict:
    files, keys = [], []
    for i, data in enumerate(FILES):
        for k in range(keys_per_file):
            files.append(data)
            keys.append((1234, k % 3, 17 * i + k))
    norm = None if normalize is None else (list(normalize[0]), list(normalize[1]))  # type: ignore[index]
    cpu, gpu, info = _core.gpu_resample_check(
        files, specs(transforms), keys, norm, dtype, layout, 0, _nvrtc.candidates()
    )
    assert cpu.shape == gpu.shape and cpu.size > 0
    n = len(files)
    per = cpu.size // n
    diff = (cpu != gpu).reshape(n, per).sum(axis=1)
    bad = [(i, int(d), info["window"][i], info["vertical_first"][i]) for i, d in enumerate(diff) if d]
    assert not bad, f"{len(bad)} of {n} samples differ (index, bytes, window, vertical_first): {bad[:5]}"
    print(
        f"{dtype}/{layout}: {n} samples equal; NVRTC {info['nvrtc_version']} sm_{info['arch'][0]}{info['arch'][1]}"
        f" compile {info['compile_ms']:.0f} ms, load {info['load_ms']:.1f} ms, cubin {info['cubin_bytes']} B,"
        f" device {info['device_bytes']} B"
    )
    return info


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize(
    ("dtype", "normalize"), DTYPES, ids=[f"{d}-{'norm' if n else 'raw'}" for d, n in DTYPES]
)
def test_random_resized_crop_with_flip_is_bit_exact(dtype, normalize, layout):
    info = _check([trdata.RandomResizedCrop(224), trdata.RandomHorizontalFlip()], 6, dtype, normalize, layout)
    assert set(info["vertical_first"]) == {True, False}, "both pass orders occur"
    assert set(info["flip"]) == {True, False}, "flipped and plain samples occur"


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize(
    ("dtype", "normalize"), DTYPES, ids=[f"{d}-{'norm' if n else 'raw'}" for d, n in DTYPES]
)
def test_resize_center_crop_is_bit_exact(dtype, normalize, layout):
    _check([trdata.Resize(256), trdata.CenterCrop(224)], 1, dtype, normalize, layout)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_bicubic_resize_is_bit_exact(layout):
    info = _check(
        [trdata.Resize(256, interpolation="bicubic"), trdata.CenterCrop(224)],
        1,
        "float32",
        trdata.IMAGENET,
        layout,
    )
    assert any(info["signed"]), "bicubic weights go negative (the signed path is exercised)"


@pytest.mark.parametrize("layout", LAYOUTS)
def test_nearest_and_non_antialiased_resizes_are_bit_exact(layout):
    _check([trdata.Resize((120, 100), interpolation="nearest")], 1, "uint8", None, layout)
    _check(
        [trdata.Resize((700, 530), antialias=False), trdata.RandomHorizontalFlip()],
        2,
        "float16",
        trdata.IMAGENET,
        layout,
    )


def test_zero_padding_of_a_crop_beyond_the_image_is_bit_exact():
    _check([trdata.CenterCrop((400, 360))], 1, "float32", trdata.IMAGENET, "NCHW")


def test_a_pipeline_with_pixel_ops_is_refused():
    with pytest.raises(trdata.ConfigError, match="no pixel ops"):
        _core.gpu_resample_check(
            FILES[:1],
            specs([trdata.RandomResizedCrop(224), trdata.ColorJitter(0.4)]),
            [(0, 0, 0)],
            None,
            "uint8",
            "NCHW",
            0,
            _nvrtc.candidates(),
        )
