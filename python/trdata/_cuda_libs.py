"""The CUDA libraries of the GPU decode path, in one place: the CUDA setting trdata makes at import, and where the
run-time libraries (libnvjpeg for JPEG decode, libnvrtc for the resample kernels) are looked for.

**CUDA_DEVICE_MAX_CONNECTIONS.** The GPU decode path's nvJPEG threads queue small per-image work on ~36 CUDA
streams of their own. With CUDA's default of 8 hardware work queues per context those streams share queues with
the training loop's, and nvJPEG's work then waits behind the model's kernels (false dependencies between streams).
With 32 queues, measured on the H200 (docs/design/gpu-decode-log.md §18): ResNet-50 fed by decode="gpu" 0.90x -> 0.94x of
synthetic data, loader-only 14.8k -> 16.9k img/s; the CPU path and the models alone are unchanged. The driver
reads the variable when it creates the CUDA context, so it is set when this module is imported (``import trdata``
does): only when the user has not set it (Megatron-style code sets 1 on purpose), and it has no effect if CUDA was
already initialised in this process. `trdata info` shows it.

**Library search.** The order (Rust, ``src/cuda/libsearch.rs``, ``nvjpeg.rs``, ``nvrtc.rs``): ``$TRDATA_NVJPEG`` /
``$TRDATA_NVRTC``; then the wheel copies found on ``sys.path`` (step 2, which Rust cannot compute: it does not
know ``sys.path``; :func:`wheel_candidates`); then the CUDA toolkit (``$CUDA_HOME/lib64``, ``/usr/local/cuda*/``);
then the dynamic loader's own search. The first that loads and has every symbol wins; ``trdata info`` shows the
outcome of each. :data:`nvjpeg` and :data:`nvrtc` hold each library's wheel paths and its probe.
"""

from __future__ import annotations

import glob
import os
import sys
from collections.abc import Callable
from typing import Any

import numpy as np

from . import _core

__all__ = ["CUDA_CONNECTIONS_FROM_USER", "Library", "NvJpeg", "nvjpeg", "nvrtc", "wheel_candidates"]

CUDA_CONNECTIONS_FROM_USER = "CUDA_DEVICE_MAX_CONNECTIONS" in os.environ
os.environ.setdefault("CUDA_DEVICE_MAX_CONNECTIONS", "32")


def wheel_candidates(*patterns: str) -> list[str]:
    """Files matching ``patterns`` (relative glob patterns, in order) under every ``sys.path`` entry, in
    ``sys.path`` order, each once."""
    out: list[str] = []
    for entry in sys.path:
        if not entry or not os.path.isdir(entry):
            continue
        for pattern in patterns:
            for p in sorted(glob.glob(os.path.join(entry, pattern))):
                if os.path.isfile(p) and p not in out:
                    out.append(p)
    return out


class Library:
    """One run-time library of the search order above: its wheel paths (``wheels``, glob patterns relative to a
    ``sys.path`` entry) and the core's probe of the whole order."""

    def __init__(self, wheels: tuple[str, ...], probe: Callable[[list[str]], dict[str, Any]]) -> None:
        self.wheels = wheels
        self._probe = probe

    def candidates(self) -> list[str]:
        """The wheel paths of the search order (step 2), for every ``sys.path`` entry, in ``sys.path`` order."""
        return wheel_candidates(*self.wheels)

    def probe(self) -> dict[str, Any]:
        """What the search found: ``found`` (path or None), ``version``, ``tried`` [(path, outcome)]; nvJPEG's
        adds ``hardware`` ((engines, cores per engine) of GPU 0, or None) and ``hardware_error``."""
        return self._probe(self.candidates())


class NvJpeg(Library):
    """nvJPEG (GPU JPEG decode): the wheel copies are ``nvidia/cu13/lib/libnvjpeg.so.13`` from ``pip install
    nvidia-nvjpeg``, ``nvidia/nvjpeg/lib/libnvjpeg.so.12`` from the CUDA 12 wheel and torchvision's bundled
    ``torchvision.libs/libnvjpeg*.so*``; plus a one-image decode and the decode ceiling, for tests and benches."""

    def decode(self, data: bytes, device: int = 0, hardware: bool = True) -> tuple[np.ndarray, str]:
        """Decode one JPEG on GPU ``device`` with nvJPEG → (uint8 array (H, W, 3), backend ``"hardware"`` or
        ``"cuda"``). Raises ConfigError (``decode``) when libnvjpeg is absent, and CudaError naming the nvJPEG or
        driver call otherwise (no GPU, a stream nvJPEG refuses: BAD_JPEG, JPEG_NOT_SUPPORTED, …)."""
        pixels, h, w, backend = _core.nvjpeg_decode(bytes(data), device, hardware, self.candidates())
        return pixels.reshape(h, w, 3), backend

    def decode_batches(
        self,
        files: list[bytes],
        device: int = 0,
        hardware: bool = True,
        batch: int = 64,
        rounds: int = 3,
        roi_fraction: float | None = None,
        interpolate: bool = True,
    ) -> tuple[float, int, dict[str, int], tuple[float, float, float]]:
        """The GPU decode ceiling: ``files`` decoded in batches by one nvJPEG batch decoder, ``rounds`` timed
        passes after a warm-up pass, each image whole or its centred region of ``roi_fraction`` × the sides →
        (seconds, images decoded, {reason: count} of those nvJPEG would not take, (check, submit, wait) seconds:
        header parse + support check, the decode call, the host wait for the stream). ``interpolate``:
        interpolated chroma upsampling (libjpeg-turbo's; 2.6x slower on the H200's engines, docs/design/gpu-decode-log.md
        §15)."""
        return _core.nvjpeg_decode_batches(
            [bytes(f) for f in files],
            device,
            hardware,
            batch,
            rounds,
            roi_fraction,
            self.candidates(),
            interpolate,
        )


#: libnvjpeg (``$TRDATA_NVJPEG``; src/cuda/nvjpeg.rs).
nvjpeg = NvJpeg(
    (
        "nvidia/cu13/lib/libnvjpeg.so.13",
        "nvidia/nvjpeg/lib/libnvjpeg.so.12",
        "torchvision.libs/libnvjpeg*.so*",
    ),
    _core.nvjpeg_probe,
)
#: libnvrtc, CUDA's run-time compiler for the GPU resample kernels (``$TRDATA_NVRTC``; src/cuda/nvrtc.rs): the
#: wheel copies are ``nvidia/cu13/lib/libnvrtc.so.13`` from torch's ``cuda-toolkit[nvrtc]`` / ``nvidia-cuda-nvrtc``
#: 13 and ``nvidia/cuda_nvrtc/lib/libnvrtc.so.12`` from the CUDA 12 wheel.
nvrtc = Library(("nvidia/cu13/lib/libnvrtc.so.13", "nvidia/cuda_nvrtc/lib/libnvrtc.so.12"), _core.nvrtc_probe)
