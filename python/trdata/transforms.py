"""Transforms as data: each is compiled by the Rust core into one fused decode/resample/flip/normalize pass.

Semantics follow torchvision (RandomResizedCrop sampling, Resize(int) on the shorter side, CenterCrop
rounding), with antialiased bilinear resampling as Pillow does it. Transforms are not Python callables:
compose the built-in ones as a list, ``Loader(..., transforms=[Resize(256), CenterCrop(224)])``.

Argument types are checked when a transform is made (as torchvision refuses ``CenterCrop('32')`` at
construction), values when the Loader is built, by the core (src/augment/geometry.rs: sizes 1 to 65536,
0 < min ≤ max ≤ 1 for ``scale``, 0 < min ≤ max for ``ratio``, ``p`` in [0, 1]); each error is a
``ConfigError`` naming the argument. A size is an int or an ``(height, width)`` pair of exactly two ints (a
string, float or bool is refused); ``scale``, ``ratio`` and ``p`` are real numbers a float can hold. Defaults
are the core's (``_core.DEFAULTS``).
"""

from __future__ import annotations

import numbers
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from . import _core
from .errors import ConfigError, _shown

_DEFAULTS = _core.DEFAULTS


def _is_int(v: Any) -> bool:
    """An integer (Python or numpy), not a bool."""
    return isinstance(v, numbers.Integral) and not isinstance(v, bool) and type(v).__name__ != "bool_"


def _size(size: Any, name: str = "size") -> tuple[int, int]:
    """``size`` → (height, width): an int (square) or a sequence of exactly two ints (their range is the
    core's rule)."""
    if _is_int(size):
        h = w = int(size)
    elif isinstance(size, Sequence) and not isinstance(size, (str, bytes)) and len(size) == 2:
        if not all(_is_int(v) for v in size):
            raise ConfigError(
                f"invalid {name}: {_shown(size)} must be an int or a (height, width) pair of ints",
                parameter=name,
            )
        h, w = (int(v) for v in size)
    else:
        raise ConfigError(
            f"invalid {name}: {_shown(size)} must be an int or a (height, width) pair of ints", parameter=name
        )
    return h, w


def _real(v: Any, name: str) -> float:
    """A real number (not a bool or a string) that a float can hold: ``float(10**400)`` raises OverflowError,
    reported as a ConfigError naming ``name``."""
    if isinstance(v, bool) or not isinstance(v, numbers.Real):
        raise ConfigError(f"invalid {name}: {_shown(v)} must be a number", parameter=name)
    try:
        return float(v)
    except OverflowError:
        raise ConfigError(
            f"invalid {name}: {_shown(v)} must be a number a float can hold", parameter=name
        ) from None


def _pair(v: Any, name: str) -> tuple[float, float]:
    """A (min, max) pair of real numbers."""
    if isinstance(v, (str, bytes)) or not isinstance(v, Sequence) or len(v) != 2:
        raise ConfigError(f"invalid {name}: {_shown(v)} must be a (min, max) pair of numbers", parameter=name)
    return _real(v[0], name), _real(v[1], name)


class Transform:
    """Base class of the built-in transforms (RandomResizedCrop, Resize, CenterCrop, RandomHorizontalFlip).

    Transforms are data that the Rust core compiles into one fused pass, not Python callables: a subclass
    cannot add behaviour (the Loader refuses it). Compose the built-in ones as a list passed as
    ``transforms=``."""

    def _spec(self) -> tuple[Any, ...]:
        raise NotImplementedError(_not_builtin_message(type(self)))


def _not_builtin_message(cls: type) -> str:
    return (
        f"{cls.__qualname__} is not a built-in trdata transform: transforms are data compiled by the Rust "
        "core (no Python code runs per sample), so subclassing trdata.Transform adds no behaviour. Use the "
        "built-in ones — RandomResizedCrop, Resize, CenterCrop, RandomHorizontalFlip — composed as a list, "
        "e.g. transforms=[RandomResizedCrop(224), RandomHorizontalFlip()] or "
        "transforms=[Resize(256), CenterCrop(224)]"
    )


@dataclass(frozen=True)
class RandomResizedCrop(Transform):
    """Crop a random area/aspect region (torchvision sampling) and resize it to ``size``."""

    size: int | tuple[int, int]
    scale: tuple[float, float] = _DEFAULTS["RandomResizedCrop.scale"]
    ratio: tuple[float, float] = _DEFAULTS["RandomResizedCrop.ratio"]

    def __post_init__(self) -> None:
        _size(self.size)
        _pair(self.scale, "scale")
        _pair(self.ratio, "ratio")

    def _spec(self) -> tuple[Any, ...]:
        h, w = _size(self.size)
        scale, ratio = _pair(self.scale, "scale"), _pair(self.ratio, "ratio")
        return ("random_resized_crop", h, w, *scale, *ratio)


@dataclass(frozen=True)
class Resize(Transform):
    """``Resize(256)``: shorter side to 256 (torchvision ``Resize(int)``); ``Resize((h, w))``: exact size."""

    size: int | tuple[int, int]

    def __post_init__(self) -> None:
        _size(self.size)

    def _spec(self) -> tuple[Any, ...]:
        if _is_int(self.size):
            return ("resize_shorter", _size(self.size)[0])
        h, w = _size(self.size)
        return ("resize", h, w)


@dataclass(frozen=True)
class CenterCrop(Transform):
    """Center crop to ``size`` (torchvision rounding; zero padding if the image is smaller)."""

    size: int | tuple[int, int]

    def __post_init__(self) -> None:
        _size(self.size)

    def _spec(self) -> tuple[Any, ...]:
        h, w = _size(self.size)
        return ("center_crop", h, w)


@dataclass(frozen=True)
class RandomHorizontalFlip(Transform):
    """Flip left-right with probability ``p``."""

    p: float = _DEFAULTS["RandomHorizontalFlip.p"]

    def __post_init__(self) -> None:
        self._spec()

    def _spec(self) -> tuple[Any, ...]:
        return ("horizontal_flip", _real(self.p, "p"))


#: The built-in transforms (the only ones the core compiles).
BUILTIN = (RandomResizedCrop, Resize, CenterCrop, RandomHorizontalFlip)


def specs(transforms: Any) -> list[tuple[Any, ...]]:
    """The core's specs of ``transforms`` (a list or tuple of built-in transforms), ConfigError naming
    ``transforms`` otherwise (a subclass of a built-in is accepted only if it adds no behaviour of its own:
    no ``_spec``, ``__call__`` or ``forward``)."""
    if isinstance(transforms, Transform):
        raise ConfigError(
            f"invalid transforms: {_shown(transforms)} must be a list of transforms, e.g. "
            f"transforms=[{_shown(transforms)}]",
            parameter="transforms",
        )
    if isinstance(transforms, (str, bytes)) or not isinstance(transforms, Sequence):
        raise ConfigError(
            f"invalid transforms: {_shown(transforms)} must be a list of trdata transforms, e.g. "
            "transforms=[Resize(256), CenterCrop(224)]",
            parameter="transforms",
        )
    out = []
    for t in transforms:
        if not isinstance(t, Transform):
            raise ConfigError(
                f"invalid transforms: {_shown(t)} is not a trdata transform (transforms are data compiled by the "
                "Rust core, not Python callables; use RandomResizedCrop, Resize, CenterCrop, "
                "RandomHorizontalFlip)",
                parameter="transforms",
            )
        cls = type(t)
        builtin = next((b for b in BUILTIN if isinstance(t, b)), None)
        if (
            builtin is None
            or cls._spec is not builtin._spec
            or any(
                m in vars(c)
                for c in cls.__mro__[: cls.__mro__.index(builtin)]
                for m in ("__call__", "forward")
            )
        ):
            raise ConfigError(f"invalid transforms: {_not_builtin_message(cls)}", parameter="transforms")
        out.append(t._spec())
    return out


#: ImageNet mean and std in [0, 1] units: out = (x / 255 - mean) / std. ``Loader(normalize=...)`` also
#: takes them in 0–255 units (``((123.675, 116.28, 103.53), (58.395, 57.12, 57.375))``, the DALI/FFCV
#: habit): any std > 1 or every mean > 1 means 0–255 units; mixed units raise ConfigError (Loader docs).
IMAGENET = ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))
