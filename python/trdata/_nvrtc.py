"""NVRTC (CUDA's run-time compiler, for the GPU resample kernels) discovery, over ``_core.nvrtc_probe``.

The search order (Rust, ``src/cuda/nvrtc.rs``): ``$TRDATA_NVRTC``; then the wheel copies found on ``sys.path``
(``nvidia/cu13/lib/libnvrtc.so.13`` from torch's ``cuda-toolkit[nvrtc]`` / ``nvidia-cuda-nvrtc`` 13,
``nvidia/cuda_nvrtc/lib/libnvrtc.so.12`` from the CUDA 12 wheel); then the CUDA toolkit (``$CUDA_HOME/lib64``,
``/usr/local/cuda*/``); then the dynamic loader's own search. The first that loads and has every symbol wins.
"""

from __future__ import annotations

from typing import Any

from . import _core
from ._gpu_libs import wheel_candidates

__all__ = ["candidates", "probe"]


def candidates() -> list[str]:
    """The wheel paths of the search order (step 2), for every ``sys.path`` entry, in ``sys.path`` order."""
    return wheel_candidates("nvidia/cu13/lib/libnvrtc.so.13", "nvidia/cuda_nvrtc/lib/libnvrtc.so.12")


def probe() -> dict[str, Any]:
    """What the search found: ``found`` (path or None), ``version`` ((major, minor) or None) and ``tried``
    [(path, outcome)]."""
    return _core.nvrtc_probe(candidates())
