"""CUDA settings trdata makes at import, before anything in the process may create a CUDA context.

The GPU decode path's nvJPEG threads queue small per-image work on ~36 CUDA streams of their own. With CUDA's
default of 8 hardware work queues per context those streams share queues with the training loop's, and nvJPEG's
work then waits behind the model's kernels (false dependencies between streams). With 32 queues, measured on the
H200 (docs/gpu_decode.md §18): ResNet-50 fed by decode="gpu" 0.90x -> 0.94x of synthetic data, loader-only
14.8k -> 16.9k img/s; the CPU path and the models alone are unchanged. The driver reads the variable when it
creates the CUDA context, so it is set at import: only when the user has not set it (Megatron-style code sets
1 on purpose), and it has no effect if CUDA was already initialised in this process. `trdata info` shows it.
"""

from __future__ import annotations

import os

__all__ = ["CUDA_CONNECTIONS_FROM_USER"]

CUDA_CONNECTIONS_FROM_USER = "CUDA_DEVICE_MAX_CONNECTIONS" in os.environ
os.environ.setdefault("CUDA_DEVICE_MAX_CONNECTIONS", "32")
