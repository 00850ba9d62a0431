"""Transforms as data: each is compiled by the Rust core into one fused decode/resample/flip/normalize pass.

Semantics follow torchvision (RandomResizedCrop sampling, Resize(int) on the shorter side, CenterCrop
rounding), with antialiased bilinear resampling as Pillow does it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


def _size(size: int | Sequence[int], name: str = "size") -> tuple[int, int]:
    from .errors import ConfigError

    if isinstance(size, bool):
        raise ConfigError(f"invalid {name}: {size!r} must be an int or (height, width)", parameter=name)
    if isinstance(size, int):
        h = w = size
    else:
        try:
            h, w = (int(v) for v in size)
        except (TypeError, ValueError):
            raise ConfigError(
                f"invalid {name}: {size!r} must be an int or (height, width)", parameter=name
            ) from None
    if h <= 0 or w <= 0:
        raise ConfigError(f"invalid {name}: {size!r} must be positive", parameter=name)
    return h, w


class Transform:
    """Base class of trdata transforms."""

    def _spec(self) -> tuple:
        raise NotImplementedError


@dataclass(frozen=True)
class RandomResizedCrop(Transform):
    """Crop a random area/aspect region (torchvision sampling) and resize it to ``size``."""

    size: int | tuple[int, int]
    scale: tuple[float, float] = (0.08, 1.0)
    ratio: tuple[float, float] = (3 / 4, 4 / 3)

    def _spec(self) -> tuple:
        h, w = _size(self.size)
        return (
            "random_resized_crop",
            h,
            w,
            float(self.scale[0]),
            float(self.scale[1]),
            float(self.ratio[0]),
            float(self.ratio[1]),
        )


@dataclass(frozen=True)
class Resize(Transform):
    """``Resize(256)``: shorter side to 256 (torchvision ``Resize(int)``); ``Resize((h, w))``: exact size."""

    size: int | tuple[int, int]

    def _spec(self) -> tuple:
        if isinstance(self.size, int) and not isinstance(self.size, bool):
            return ("resize_shorter", _size(self.size)[0])
        h, w = _size(self.size)
        return ("resize", h, w)


@dataclass(frozen=True)
class CenterCrop(Transform):
    """Center crop to ``size`` (torchvision rounding; zero padding if the image is smaller)."""

    size: int | tuple[int, int]

    def _spec(self) -> tuple:
        h, w = _size(self.size)
        return ("center_crop", h, w)


@dataclass(frozen=True)
class RandomHorizontalFlip(Transform):
    """Flip left-right with probability ``p``."""

    p: float = 0.5

    def _spec(self) -> tuple:
        return ("horizontal_flip", float(self.p))


#: ImageNet mean and std in [0, 1] units: out = (x / 255 - mean) / std.
IMAGENET = ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))
