"""nvJPEG on the GPU (``trdata._cuda_libs.nvjpeg.decode``): the hardware engines and the CUDA backend decode real JPEGs of
every chroma layout the hardware takes to within the documented PSNR of the CPU decode (Pillow = libjpeg-turbo,
which the CPU path matches bit for bit), a stream nvJPEG refuses is a typed CudaError, and a failure leaves no
state behind (the next decode is still exact). Skips without CUDA or libnvjpeg."""

from __future__ import annotations

import io

import numpy as np
import pytest
import trdata
from _fixtures import photo
from PIL import Image
from trdata._cuda_libs import nvjpeg as _nvjpeg

_probe = _nvjpeg.probe()
_cuda = trdata._core.machine_info()["cuda"].get("available")
pytestmark = pytest.mark.skipif(
    not (_cuda and _probe["found"]),
    reason=f"needs CUDA and libnvjpeg (cuda={_cuda}, nvjpeg={_probe['found']})",
)

#: GPU vs libjpeg-turbo decode. Measured 2026-12-01 on the H200 (nvJPEG 13.0.1, torchvision's copy, 7 engines x 1
#: core): hardware engines 87-99 dB on these files (max |diff| 1) and ≥ 85 dB on 120 ImageNet JPEGs (median
#: 99 = identical); the CUDA backend ~61 dB (max |diff| 3). The issue's target is 45 dB; a wrong layout, channel
#: order or upsampling is < 30 dB.
MIN_PSNR_DB = 55.0


def jpeg(w: int, h: int, seed: int, **save: object) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(photo(seed, w, h)).save(buf, "JPEG", quality=90, **save)
    return buf.getvalue()


def psnr(a: np.ndarray, b: np.ndarray) -> float:
    mse = float(np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2))
    return 99.0 if mse == 0 else 10 * np.log10(255.0**2 / mse)


CASES = {
    "420": dict(subsampling=2),
    "422": dict(subsampling=1),
    "444": dict(subsampling=0),
}


@pytest.mark.parametrize("hardware", [True, False], ids=["hardware", "cuda"])
@pytest.mark.parametrize("layout", sorted(CASES))
def test_gpu_decode_matches_the_cpu_decode(layout, hardware):
    data = jpeg(333, 250, seed=len(layout), **CASES[layout])
    got, backend = _nvjpeg.decode(data, hardware=hardware)
    ref = np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))
    assert got.shape == ref.shape
    if not hardware:
        assert backend == "cuda"
    value = psnr(got, ref)
    print(f"{layout} {backend}: PSNR {value:.2f} dB, max |diff| {np.abs(got.astype(int) - ref).max()}")
    assert value >= MIN_PSNR_DB


def test_gray_jpeg_is_replicated_to_rgb():
    buf = io.BytesIO()
    Image.fromarray(photo(5, 200, 120)[..., 0]).save(buf, "JPEG", quality=90)
    got, _ = _nvjpeg.decode(buf.getvalue())
    ref = np.asarray(Image.open(io.BytesIO(buf.getvalue())).convert("RGB"))
    assert psnr(got, ref) >= MIN_PSNR_DB
    assert np.array_equal(got[..., 0], got[..., 1]) and np.array_equal(got[..., 1], got[..., 2])


@pytest.mark.parametrize("hardware", [True, False], ids=["hardware", "cuda"])
def test_a_broken_stream_is_a_typed_error_and_leaves_nothing_behind(hardware):
    good = jpeg(160, 120, seed=9)
    ref, _ = _nvjpeg.decode(good, hardware=hardware)
    for bad in (good[:200], b"\xff\xd8\xff\xe0not a jpeg at all", good[:2] + b"\x00" * 500):
        with pytest.raises(trdata.CudaError):
            _nvjpeg.decode(bad, hardware=hardware)
        again, _ = _nvjpeg.decode(good, hardware=hardware)
        assert np.array_equal(again, ref)


def test_a_mixed_batch_decodes_what_nvjpeg_takes_and_names_the_rest():
    good = [jpeg(300 + 7 * i, 200 + 5 * i, seed=i, subsampling=i % 3) for i in range(6)]
    progressive = jpeg(256, 192, seed=20, progressive=True)
    png = io.BytesIO()
    Image.fromarray(photo(21, 64, 48)).save(png, "PNG")
    truncated = good[0][:300]
    batch = [good[0], progressive, good[1], png.getvalue(), truncated, *good[2:]]
    for hardware in (True, False):
        for roi in (None, 0.5):
            if roi is not None and not hardware:
                continue
            seconds, decoded, refused, phases = _nvjpeg.decode_batches(batch, 0, hardware, 4, 2, roi)
            assert all(p >= 0 for p in phases) and sum(phases) <= seconds * 1.01 + 1e-3
            per_pass = {k: v // 2 for k, v in refused.items()}
            print(hardware, roi, decoded // 2, per_pass)
            assert seconds > 0
            # every good file decodes; the PNG and the truncated file are refused by name, never decoded
            assert decoded // 2 in (len(good), len(good) + 1), (decoded, refused)
            assert sum(per_pass.values()) == len(batch) - decoded // 2
            assert any("header" in k for k in per_pass), per_pass
    # nothing was poisoned: a single decode after the mixed batches is still exact
    got, _ = _nvjpeg.decode(good[0])
    ref = np.asarray(Image.open(io.BytesIO(good[0])).convert("RGB"))
    assert psnr(got, ref) >= MIN_PSNR_DB
