"""The built-in default dataset: 1,000 photo-like JPEGs in 10 classes (ImageFolder layout), generated
deterministically by the Rust core on first use and cached.

Location: ``$TRDATA_CACHE/synthetic-v1`` if ``TRDATA_CACHE`` is set, else ``$XDG_CACHE_HOME/trdata/synthetic-v1``,
else ``~/.cache/trdata/synthetic-v1``. Other counts/seeds get their own folder (``synthetic-v1-n{count}-s{seed}``).
Generation writes into a temporary sibling folder and renames it into place, with a marker file written
last, so an interrupted generation is never reused (its leftovers are removed by the next run).

The images are not flat colour (which decodes unrealistically fast): sizes follow ImageNet's spread
(mostly 500×375 / 500×333, a quarter portrait, a few ~1000-1400 px and ~200 px ones), quality ~90, mostly
4:2:0 chroma (some 4:4:4 and grayscale), with gradients, shapes, textures and grain, tuned so that their
bytes per pixel and decode cost per pixel are close to the ImageNet sample's.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from .. import _core
from .._progress import progress_callback

DEFAULT_COUNT = 1000
DEFAULT_SEED = 0


def cache_dir() -> Path:
    """The trdata cache folder (``$TRDATA_CACHE``, else ``$XDG_CACHE_HOME/trdata``, else ``~/.cache/trdata``)."""
    env = os.environ.get("TRDATA_CACHE")
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "trdata"


def dataset_path(count: int = DEFAULT_COUNT, seed: int = DEFAULT_SEED) -> Path:
    """Where the synthetic dataset of ``count`` images from ``seed`` lives (whether or not it exists yet)."""
    name = str(_core.SYNTHETIC_VERSION)
    if (count, seed) != (DEFAULT_COUNT, DEFAULT_SEED):
        name += f"-n{count}-s{seed}"
    return cache_dir() / name


def default_dataset(count: int = DEFAULT_COUNT, seed: int = DEFAULT_SEED, *, progress: bool = True) -> Path:
    """Path of the default benchmark dataset, generating it first if needed (~10-20 s on 2 cores, once).

    With ``progress``, a bar is drawn on stderr while images are generated (nothing is printed when the
    dataset is already cached)."""
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise ValueError(f"count must be a positive int, got {count!r}")
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**64:
        raise ValueError(f"seed must be an int in [0, 2**64), got {seed!r}")
    root = dataset_path(count, seed)
    report, close = progress_callback(progress, f"generating {root.name}", "img", draw_at_zero=False)
    try:
        _core.generate_synthetic_dataset(str(root), count, seed, progress=report)
    finally:
        close()
    return root


if __name__ == "__main__":  # pragma: no cover - manual use
    print(default_dataset(), file=sys.stdout)
