"""nvJPEG (GPU JPEG decode) discovery and a one-image decode, over ``_core.nvjpeg_probe``/``nvjpeg_decode``.

The search order (Rust, ``src/cuda/nvjpeg.rs``): ``$TRDATA_NVJPEG``; then the wheel copies found on
``sys.path`` (``nvidia/cu13/lib/libnvjpeg.so.13`` from ``pip install nvidia-nvjpeg``, ``nvidia/nvjpeg/lib/
libnvjpeg.so.12`` from the CUDA 12 wheel, torchvision's bundled ``torchvision.libs/libnvjpeg*.so*``); then the
CUDA toolkit (``$CUDA_HOME/lib64``, ``/usr/local/cuda*/``); then the dynamic loader's own search. The first that
loads and has every symbol wins; ``trdata info`` shows the outcome of each.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from . import _core
from ._gpu_libs import wheel_candidates

__all__ = ["candidates", "decode", "decode_batches", "probe"]


def candidates() -> list[str]:
    """The wheel paths of the search order (step 2), for every ``sys.path`` entry, in ``sys.path`` order."""
    return wheel_candidates(
        "nvidia/cu13/lib/libnvjpeg.so.13",
        "nvidia/nvjpeg/lib/libnvjpeg.so.12",
        "torchvision.libs/libnvjpeg*.so*",
    )


def probe() -> dict[str, Any]:
    """What the search found: ``found`` (path or None), ``version``, ``tried`` [(path, outcome)], ``hardware``
    ((engines, cores per engine) of GPU 0, or None) and ``hardware_error``."""
    return _core.nvjpeg_probe(candidates())


def decode(data: bytes, device: int = 0, hardware: bool = True) -> tuple[np.ndarray, str]:
    """Decode one JPEG on GPU ``device`` with nvJPEG → (uint8 array (H, W, 3), backend ``"hardware"`` or
    ``"cuda"``). Raises ConfigError (``decode``) when libnvjpeg is absent, and CudaError naming the nvJPEG or
    driver call otherwise (no GPU, a stream nvJPEG refuses: BAD_JPEG, JPEG_NOT_SUPPORTED, …)."""
    pixels, h, w, backend = _core.nvjpeg_decode(bytes(data), device, hardware, candidates())
    return pixels.reshape(h, w, 3), backend


def decode_batches(
    files: list[bytes],
    device: int = 0,
    hardware: bool = True,
    batch: int = 64,
    rounds: int = 3,
    roi_fraction: float | None = None,
    interpolate: bool = True,
) -> tuple[float, int, dict[str, int], tuple[float, float, float]]:
    """The GPU decode ceiling: ``files`` decoded in batches by one nvJPEG batch decoder, ``rounds`` timed passes
    after a warm-up pass, each image whole or its centred region of ``roi_fraction`` × the sides → (seconds,
    images decoded, {reason: count} of those nvJPEG would not take, (check, submit, wait) seconds: header parse +
    support check, the decode call, the host wait for the stream). ``interpolate``: interpolated chroma upsampling
    (libjpeg-turbo's; 2.6x slower on the H200's engines, docs/gpu_decode.md §15)."""
    return _core.nvjpeg_decode_batches(
        [bytes(f) for f in files], device, hardware, batch, rounds, roi_fraction, candidates(), interpolate
    )
