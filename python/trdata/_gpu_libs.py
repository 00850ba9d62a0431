"""The wheel copies of the GPU decode path's run-time libraries (libnvjpeg, libnvrtc) on ``sys.path``: step 2 of their
search order (src/cuda/libsearch.rs), which Rust cannot compute (it does not know ``sys.path``)."""

from __future__ import annotations

import glob
import os
import sys


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
