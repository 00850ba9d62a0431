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

import math
import numbers
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from . import _core
from .errors import ConfigError, _shown

_DEFAULTS = _core.DEFAULTS

#: ImageNet mean and std in [0, 1] units (timm's IMAGENET_DEFAULT_MEAN/STD, torchvision's reference values).
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


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

    def __post_init__(self) -> None:
        # Every built-in is a frozen dataclass, whose __init__ calls this: its arguments are checked at
        # construction by building the spec the core compiles (a ConfigError naming the parameter).
        self._spec()

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
    interpolation: Any = _DEFAULTS["RandomResizedCrop.interpolation"]
    antialias: bool = _DEFAULTS["RandomResizedCrop.antialias"]

    def _spec(self) -> tuple[Any, ...]:
        h, w = _size(self.size)
        scale, ratio = _pair(self.scale, "scale"), _pair(self.ratio, "ratio")
        spec = ("random_resized_crop", {"size": (h, w), "scale": scale, "ratio": ratio})
        return _resampled(spec, self.interpolation, self.antialias)


@dataclass(frozen=True)
class Resize(Transform):
    """``Resize(256)``: shorter side to 256 (torchvision ``Resize(int)``); ``Resize((h, w))``: exact size.
    ``max_size`` (with an int ``size``) caps the longer side as torchvision does; such a resize runs on the
    uint8 image after the decode (its size depends on the image, so a later crop must fix it)."""

    size: int | tuple[int, int]
    interpolation: Any = _DEFAULTS["Resize.interpolation"]
    max_size: int | None = None
    antialias: bool = _DEFAULTS["Resize.antialias"]

    def _spec(self) -> tuple[Any, ...]:
        if self.max_size is not None:
            size: Any = self.size
            size = size[0] if _seq(size) and len(size) == 1 else size
            aa = True if self.antialias is None else _bool_arg(self.antialias, "antialias")
            return (
                "resize_max",
                {
                    "size": _size(size)[0] if _is_int(size) else _int_arg(size, "size"),
                    "max_size": _int_arg(self.max_size, "max_size"),
                    "interpolation": _mode(self.interpolation, "interpolation"),
                    "antialias": aa,
                },
            )
        if _is_int(self.size):
            spec = ("resize_shorter", {"size": _size(self.size)[0]})
            return _resampled(spec, self.interpolation, self.antialias)
        return _resampled(("resize", {"size": _size(self.size)}), self.interpolation, self.antialias)


def _resampled(spec: tuple[Any, ...], interpolation: Any, antialias: Any) -> tuple[Any, ...]:
    """A resize's spec with its filter: unchanged for antialiased bilinear (the fused default), else wrapped as
    ``("resampled", {"interpolation": …, "antialias": …, "transform": spec})`` (the values are the core's choice
    table)."""
    mode = _mode(interpolation, "interpolation")
    aa = True if antialias is None else _bool_arg(antialias, "antialias")
    if mode == "bilinear" and aa:
        return spec
    return ("resampled", {"interpolation": mode, "antialias": aa, "transform": spec})


@dataclass(frozen=True)
class CenterCrop(Transform):
    """Center crop to ``size`` (torchvision rounding; zero padding if the image is smaller)."""

    size: int | tuple[int, int]

    def __post_init__(self) -> None:
        _size(self.size)

    def _spec(self) -> tuple[Any, ...]:
        return ("center_crop", {"size": _size(self.size)})


@dataclass(frozen=True)
class RandomHorizontalFlip(Transform):
    """Flip left-right with probability ``p``."""

    p: float = _DEFAULTS["RandomHorizontalFlip.p"]

    def _spec(self) -> tuple[Any, ...]:
        return ("horizontal_flip", {"p": _real(self.p, "p")})


def _seq(v: Any) -> bool:
    return isinstance(v, Sequence) and not isinstance(v, (str, bytes))


def _padding(padding: Any) -> tuple[int, int, int, int]:
    """torchvision's ``padding``: an int, or 1, 2 (left/right, top/bottom) or 4 (left, top, right, bottom) ints →
    (left, top, right, bottom)."""
    if _is_int(padding):
        p = int(padding)
        return (p, p, p, p)
    if _seq(padding) and len(padding) in (1, 2, 4) and all(_is_int(v) for v in padding):
        v = [int(x) for x in padding]
        if len(v) == 1:
            return (v[0],) * 4
        if len(v) == 2:
            return (v[0], v[1], v[0], v[1])
        return (v[0], v[1], v[2], v[3])
    raise ConfigError(
        f"invalid padding: {_shown(padding)} must be an int or a sequence of 1, 2 or 4 ints",
        parameter="padding",
    )


def _fill(fill: Any, name: str = "fill") -> tuple[float, ...]:
    """A number or a per-channel sequence of numbers (pixel units; the core checks the range and count)."""
    if fill is None:
        return (0.0,)
    if _seq(fill):
        return tuple(_real(v, name) for v in fill)
    return (_real(fill, name),)


def _str(v: Any, name: str) -> str:
    if not isinstance(v, str):
        raise ConfigError(f"invalid {name}: {_shown(v)} must be a string", parameter=name)
    return v


def _bool_arg(v: Any, name: str) -> bool:
    if not isinstance(v, bool):
        raise ConfigError(f"invalid {name}: {_shown(v)} must be a bool", parameter=name)
    return v


def _jitter_range(v: Any, name: str, center: float, clip_at_zero: bool) -> tuple[float, float] | None:
    """torchvision's ``ColorJitter._check_input``: a number v → (center - v, center + v) (the lower end clipped at
    0 for brightness/contrast/saturation), a pair as given; (center, center) → None (off). A negative number
    gives an empty range the core refuses."""
    if v is None:
        return None
    if _seq(v):
        lo, hi = _pair(v, name)
    else:
        x = _real(v, name)
        lo, hi = (center - x, center + x) if x >= 0 else (center + abs(x), center - abs(x))
        if clip_at_zero and x >= 0:
            lo = max(lo, 0.0)
    if lo == hi == center:
        return None
    return (lo, hi)


@dataclass(frozen=True)
class RandomVerticalFlip(Transform):
    """Flip top-bottom with probability ``p`` (folds into the decode when it precedes the pixel ops)."""

    p: float = _DEFAULTS["RandomVerticalFlip.p"]

    def _spec(self) -> tuple[Any, ...]:
        return ("vertical_flip", {"p": _real(self.p, "p")})


@dataclass(frozen=True)
class Pad(Transform):
    """torchvision ``Pad(padding, fill=0, padding_mode='constant')`` on the uint8 image (fill in pixel units)."""

    padding: Any
    fill: Any = _DEFAULTS["Pad.fill"]
    padding_mode: str = _DEFAULTS["Pad.padding_mode"]

    def _spec(self) -> tuple[Any, ...]:
        return (
            "pad",
            {
                "padding": _padding(self.padding),
                "fill": _fill(self.fill),
                "padding_mode": _str(self.padding_mode, "padding_mode"),
            },
        )


@dataclass(frozen=True)
class RandomCrop(Transform):
    """torchvision v2 ``RandomCrop(size, padding=None, pad_if_needed=False, fill=0, padding_mode='constant')``
    (``pad_if_needed`` pads the missing size on both sides, as v2 does)."""

    size: int | tuple[int, int]
    padding: Any = None
    pad_if_needed: bool = False
    fill: Any = _DEFAULTS["Pad.fill"]
    padding_mode: str = _DEFAULTS["Pad.padding_mode"]

    def _spec(self) -> tuple[Any, ...]:
        size = _size(self.size)
        pad = (0, 0, 0, 0) if self.padding is None else _padding(self.padding)
        return (
            "random_crop",
            {
                "size": size,
                "padding": pad,
                "pad_if_needed": _bool_arg(self.pad_if_needed, "pad_if_needed"),
                "fill": _fill(self.fill),
                "padding_mode": _str(self.padding_mode, "padding_mode"),
            },
        )


@dataclass(frozen=True)
class ColorJitter(Transform):
    """torchvision ``ColorJitter``: brightness, contrast, saturation, hue in a random order per sample."""

    brightness: Any = None
    contrast: Any = None
    saturation: Any = None
    hue: Any = None

    def _spec(self) -> tuple[Any, ...]:
        return (
            "color_jitter",
            {
                "brightness": _jitter_range(self.brightness, "brightness", 1.0, True),
                "contrast": _jitter_range(self.contrast, "contrast", 1.0, True),
                "saturation": _jitter_range(self.saturation, "saturation", 1.0, True),
                "hue": _jitter_range(self.hue, "hue", 0.0, False),
            },
        )


@dataclass(frozen=True)
class Grayscale(Transform):
    """torchvision ``Grayscale``; the Loader's ``channels`` decides the output's channel count (with 3 the gray
    value fills all three, as ``num_output_channels=3``)."""

    num_output_channels: int = _DEFAULTS["Grayscale.num_output_channels"]

    def _spec(self) -> tuple[Any, ...]:
        if not _is_int(self.num_output_channels):
            raise ConfigError(
                f"invalid num_output_channels: {_shown(self.num_output_channels)} must be an int",
                parameter="num_output_channels",
            )
        return ("grayscale", {"num_output_channels": int(self.num_output_channels)})


@dataclass(frozen=True)
class RandomGrayscale(Transform):
    """torchvision ``RandomGrayscale(p=0.1)`` (keeps the channel count)."""

    p: float = _DEFAULTS["RandomGrayscale.p"]

    def _spec(self) -> tuple[Any, ...]:
        return ("random_grayscale", {"p": _real(self.p, "p")})


@dataclass(frozen=True)
class GaussianBlur(Transform):
    """torchvision ``GaussianBlur(kernel_size, sigma=(0.1, 2.0))``; ``kernel_size`` is (x, y) as torchvision's."""

    kernel_size: Any
    sigma: Any = _DEFAULTS["GaussianBlur.sigma"]

    def _spec(self) -> tuple[Any, ...]:
        k = self.kernel_size
        if _is_int(k):
            kx = ky = int(k)
        elif _seq(k) and len(k) in (1, 2) and all(_is_int(v) for v in k):
            kx, ky = int(k[0]), int(k[-1])
        else:
            raise ConfigError(
                f"invalid kernel_size: {_shown(k)} must be an int or a sequence of 1 or 2 ints",
                parameter="kernel_size",
            )
        s = self.sigma
        if _seq(s) and len(s) == 1:
            lo = hi = _real(s[0], "sigma")
        elif _seq(s):
            lo, hi = _pair(s, "sigma")
        else:
            lo = hi = _real(s, "sigma")
        return ("gaussian_blur", {"kernel_size": (kx, ky), "sigma": (lo, hi)})


@dataclass(frozen=True)
class GaussianNoise(Transform):
    """torchvision v2 ``GaussianNoise(mean=0.0, sigma=0.1, clip=True)`` on the uint8 image, as torchvision runs it
    on uint8 tensors: noise ``mean·255 + N(0,1)·sigma·255`` truncated to an integer, added, clamped (``clip``)."""

    mean: float = _DEFAULTS["GaussianNoise.mean"]
    sigma: float = _DEFAULTS["GaussianNoise.sigma"]
    clip: bool = _DEFAULTS["GaussianNoise.clip"]

    def _spec(self) -> tuple[Any, ...]:
        return (
            "gaussian_noise",
            {
                "mean": _real(self.mean, "mean"),
                "sigma": _real(self.sigma, "sigma"),
                "clip": _bool_arg(self.clip, "clip"),
            },
        )


@dataclass(frozen=True)
class RandomErasing(Transform):
    """torchvision ``RandomErasing(p=0.5, scale=(0.02, 0.33), ratio=(0.3, 3.3), value=0)`` on the uint8 image
    before normalize: ``value`` in pixel units (0–255), one or per channel, or ``'random'`` (per element
    N(0, 1) in [0, 1] units, ×255, rounded and clamped). ``from_torchvision`` converts a RandomErasing placed
    after ``Normalize`` into pixel units."""

    p: float = _DEFAULTS["RandomErasing.p"]
    scale: tuple[float, float] = _DEFAULTS["RandomErasing.scale"]
    ratio: tuple[float, float] = _DEFAULTS["RandomErasing.ratio"]
    value: Any = _DEFAULTS["RandomErasing.value"]
    inplace: bool = False

    def _spec(self) -> tuple[Any, ...]:
        if isinstance(self.value, str):
            if self.value != "random":
                raise ConfigError(
                    f"invalid value: {_shown(self.value)} must be a number, a sequence of numbers or 'random'",
                    parameter="value",
                )
            value: Any = "random"
        else:
            value = _fill(self.value, "value")
        return (
            "random_erasing",
            {
                "p": _real(self.p, "p"),
                "scale": _pair(self.scale, "scale"),
                "ratio": _pair(self.ratio, "ratio"),
                "value": value,
            },
        )


@dataclass(frozen=True)
class RandomAutocontrast(Transform):
    """torchvision ``RandomAutocontrast(p=0.5)``."""

    p: float = _DEFAULTS["RandomAutocontrast.p"]

    def _spec(self) -> tuple[Any, ...]:
        return ("random_autocontrast", {"p": _real(self.p, "p")})


@dataclass(frozen=True)
class RandomEqualize(Transform):
    """torchvision ``RandomEqualize(p=0.5)``."""

    p: float = _DEFAULTS["RandomEqualize.p"]

    def _spec(self) -> tuple[Any, ...]:
        return ("random_equalize", {"p": _real(self.p, "p")})


@dataclass(frozen=True)
class RandomInvert(Transform):
    """torchvision ``RandomInvert(p=0.5)``."""

    p: float = _DEFAULTS["RandomInvert.p"]

    def _spec(self) -> tuple[Any, ...]:
        return ("random_invert", {"p": _real(self.p, "p")})


@dataclass(frozen=True)
class RandomChannelPermutation(Transform):
    """torchvision ``v2.RandomChannelPermutation()``: the image's channels in a random order (a gray image is
    left as it is)."""

    def _spec(self) -> tuple[Any, ...]:
        return ("random_channel_permutation", {})


@dataclass(frozen=True)
class RandomSolarize(Transform):
    """torchvision ``RandomSolarize(threshold, p=0.5)``; threshold in pixel units (uint8)."""

    threshold: float
    p: float = _DEFAULTS["RandomSolarize.p"]

    def _spec(self) -> tuple[Any, ...]:
        return ("random_solarize", {"threshold": _real(self.threshold, "threshold"), "p": _real(self.p, "p")})


@dataclass(frozen=True)
class RandomPosterize(Transform):
    """torchvision ``RandomPosterize(bits, p=0.5)``."""

    bits: int
    p: float = _DEFAULTS["RandomPosterize.p"]

    def _spec(self) -> tuple[Any, ...]:
        if not _is_int(self.bits):
            raise ConfigError(f"invalid bits: {_shown(self.bits)} must be an int", parameter="bits")
        return ("random_posterize", {"bits": int(self.bits), "p": _real(self.p, "p")})


@dataclass(frozen=True)
class RandomAdjustSharpness(Transform):
    """torchvision ``RandomAdjustSharpness(sharpness_factor, p=0.5)``."""

    sharpness_factor: float
    p: float = _DEFAULTS["RandomAdjustSharpness.p"]

    def _spec(self) -> tuple[Any, ...]:
        return (
            "random_adjust_sharpness",
            {"sharpness_factor": _real(self.sharpness_factor, "sharpness_factor"), "p": _real(self.p, "p")},
        )


def _mode(v: Any, name: str) -> str:
    """A mode given as torchvision's enum (``InterpolationMode.BILINEAR``, ``AutoAugmentPolicy.IMAGENET``: its
    value) or as its string; which values are allowed is the core's choice table."""
    value = getattr(v, "value", v)
    if not isinstance(value, str):
        raise ConfigError(
            f"invalid {name}: {_shown(v)} must be a string or a torchvision enum", parameter=name
        )
    return value.lower()


def _int_arg(v: Any, name: str) -> int:
    if not _is_int(v):
        raise ConfigError(f"invalid {name}: {_shown(v)} must be an int", parameter=name)
    return int(v)


def _degrees(v: Any, name: str = "degrees") -> tuple[float, float]:
    """torchvision's ``_setup_angle``: a number d → (-d, d) (a negative d gives an empty range the core refuses),
    a pair as given."""
    if _seq(v):
        return _pair(v, name)
    d = _real(v, name)
    return (-d, d)


def _opt_fill(fill: Any) -> tuple[float, ...] | None:
    """``None`` (zero padding, no mask) or a number / per-channel numbers (torchvision's mask-path fill)."""
    if isinstance(fill, dict):  # torchvision v2's per-type fill: the image's entry
        fill = next((f for k, f in fill.items() if getattr(k, "__name__", k) in ("Image", "others")), None)
    return None if fill is None else _fill(fill)


def _opt_pair(v: Any, name: str) -> tuple[float, float] | None:
    return None if v is None else _pair(v, name)


def _shear(v: Any) -> tuple[float, ...] | None:
    """torchvision's ``shear``: a number s → (-s, s) on x; 2 numbers: x range; 4: x then y range."""
    if v is None:
        return None
    if _seq(v):
        return tuple(_real(x, "shear") for x in v)
    s = _real(v, "shear")
    return (-s, s)


@dataclass(frozen=True)
class RandomRotation(Transform):
    """torchvision v2 ``RandomRotation(degrees, interpolation='nearest', expand=False, center=None, fill=0)``:
    counter-clockwise for positive angles; ``fill=0`` (the default) takes torchvision's mask path, ``fill=None``
    pads with zeros. With ``expand=True`` the size depends on the angle, so a later ``RandomCrop`` must fix it."""

    degrees: Any
    interpolation: Any = _DEFAULTS["RandomRotation.interpolation"]
    expand: bool = False
    center: Any = None
    fill: Any = _DEFAULTS["RandomRotation.fill"]

    def _spec(self) -> tuple[Any, ...]:
        return (
            "random_rotation",
            {
                "degrees": _degrees(self.degrees),
                "interpolation": _mode(self.interpolation, "interpolation"),
                "expand": _bool_arg(self.expand, "expand"),
                "center": _opt_pair(self.center, "center"),
                "fill": _opt_fill(self.fill),
            },
        )


@dataclass(frozen=True)
class RandomAffine(Transform):
    """torchvision v2 ``RandomAffine(degrees, translate=None, scale=None, shear=None, interpolation='nearest',
    fill=0, center=None)`` (same parameter draws; positive angles turn clockwise, as torchvision's affine)."""

    degrees: Any
    translate: Any = None
    scale: Any = None
    shear: Any = None
    interpolation: Any = _DEFAULTS["RandomAffine.interpolation"]
    fill: Any = _DEFAULTS["RandomAffine.fill"]
    center: Any = None

    def _spec(self) -> tuple[Any, ...]:
        return (
            "random_affine",
            {
                "degrees": _degrees(self.degrees),
                "translate": _opt_pair(self.translate, "translate"),
                "scale": _opt_pair(self.scale, "scale"),
                "shear": _shear(self.shear),
                "interpolation": _mode(self.interpolation, "interpolation"),
                "fill": _opt_fill(self.fill),
                "center": _opt_pair(self.center, "center"),
            },
        )


@dataclass(frozen=True)
class RandomPerspective(Transform):
    """torchvision v2 ``RandomPerspective(distortion_scale=0.5, p=0.5, interpolation='bilinear', fill=0)``."""

    distortion_scale: float = _DEFAULTS["RandomPerspective.distortion_scale"]
    p: float = _DEFAULTS["RandomPerspective.p"]
    interpolation: Any = _DEFAULTS["RandomPerspective.interpolation"]
    fill: Any = _DEFAULTS["RandomPerspective.fill"]

    def _spec(self) -> tuple[Any, ...]:
        return (
            "random_perspective",
            {
                "distortion_scale": _real(self.distortion_scale, "distortion_scale"),
                "p": _real(self.p, "p"),
                "interpolation": _mode(self.interpolation, "interpolation"),
                "fill": _opt_fill(self.fill),
            },
        )


@dataclass(frozen=True)
class AutoAugment(Transform):
    """torchvision v2 ``AutoAugment(policy=AutoAugmentPolicy.IMAGENET, interpolation='nearest', fill=None)``
    (``policy``: 'imagenet', 'cifar10', 'svhn' or the enum)."""

    policy: Any = _DEFAULTS["AutoAugment.policy"]
    interpolation: Any = _DEFAULTS["AutoAugment.interpolation"]
    fill: Any = None

    def _spec(self) -> tuple[Any, ...]:
        return (
            "auto_augment",
            {
                "policy": _mode(self.policy, "policy"),
                "interpolation": _mode(self.interpolation, "interpolation"),
                "fill": _opt_fill(self.fill),
            },
        )


@dataclass(frozen=True)
class RandAugment(Transform):
    """torchvision v2 ``RandAugment(num_ops=2, magnitude=9, num_magnitude_bins=31, interpolation='nearest',
    fill=None)``."""

    num_ops: int = _DEFAULTS["RandAugment.num_ops"]
    magnitude: int = _DEFAULTS["RandAugment.magnitude"]
    num_magnitude_bins: int = _DEFAULTS["RandAugment.num_magnitude_bins"]
    interpolation: Any = _DEFAULTS["RandAugment.interpolation"]
    fill: Any = None

    def _spec(self) -> tuple[Any, ...]:
        return (
            "rand_augment",
            {
                "num_ops": _int_arg(self.num_ops, "num_ops"),
                "magnitude": _int_arg(self.magnitude, "magnitude"),
                "num_magnitude_bins": _int_arg(self.num_magnitude_bins, "num_magnitude_bins"),
                "interpolation": _mode(self.interpolation, "interpolation"),
                "fill": _opt_fill(self.fill),
            },
        )


@dataclass(frozen=True)
class TrivialAugmentWide(Transform):
    """torchvision v2 ``TrivialAugmentWide(num_magnitude_bins=31, interpolation='nearest', fill=None)``."""

    num_magnitude_bins: int = _DEFAULTS["TrivialAugmentWide.num_magnitude_bins"]
    interpolation: Any = _DEFAULTS["TrivialAugmentWide.interpolation"]
    fill: Any = None

    def _spec(self) -> tuple[Any, ...]:
        return (
            "trivial_augment_wide",
            {
                "num_magnitude_bins": _int_arg(self.num_magnitude_bins, "num_magnitude_bins"),
                "interpolation": _mode(self.interpolation, "interpolation"),
                "fill": _opt_fill(self.fill),
            },
        )


@dataclass(frozen=True)
class AugMix(Transform):
    """torchvision v2 ``AugMix(severity=3, mixture_width=3, chain_depth=-1, alpha=1.0, all_ops=True,
    interpolation='bilinear', fill=None)``."""

    severity: int = _DEFAULTS["AugMix.severity"]
    mixture_width: int = _DEFAULTS["AugMix.mixture_width"]
    chain_depth: int = _DEFAULTS["AugMix.chain_depth"]
    alpha: float = _DEFAULTS["AugMix.alpha"]
    all_ops: bool = _DEFAULTS["AugMix.all_ops"]
    interpolation: Any = _DEFAULTS["AugMix.interpolation"]
    fill: Any = None

    def _spec(self) -> tuple[Any, ...]:
        return (
            "augmix",
            {
                "severity": _int_arg(self.severity, "severity"),
                "mixture_width": _int_arg(self.mixture_width, "mixture_width"),
                "chain_depth": _int_arg(self.chain_depth, "chain_depth"),
                "alpha": _real(self.alpha, "alpha"),
                "all_ops": _bool_arg(self.all_ops, "all_ops"),
                "interpolation": _mode(self.interpolation, "interpolation"),
                "fill": _opt_fill(self.fill),
            },
        )


def _inner(transforms: Any, cls: str) -> tuple[tuple[Any, ...], ...]:
    """A container's inner specs (a list of trdata transforms; the core checks the count and nesting)."""
    if isinstance(transforms, Transform) or not _seq(transforms):
        raise ConfigError(
            f"invalid transforms: {_shown(transforms)} must be a list of transforms ({cls})",
            parameter="transforms",
        )
    return tuple(specs(list(transforms)))


@dataclass(frozen=True)
class RandomApply(Transform):
    """torchvision ``RandomApply(transforms, p=0.5)``: one draw decides whether the whole list runs. The inner
    ops (any trdata transforms, geometric ones included) run on the uint8 image, each with its own random
    stream; the list must keep the image's size (the skipped branch does)."""

    transforms: Sequence[Transform]
    p: float = _DEFAULTS["RandomApply.p"]

    def _spec(self) -> tuple[Any, ...]:
        return (
            "random_apply",
            {"transforms": _inner(self.transforms, "RandomApply"), "p": _real(self.p, "p")},
        )


@dataclass(frozen=True)
class RandomChoice(Transform):
    """torchvision ``RandomChoice(transforms, p=None)``: one op, picked with weights ``p`` (normalised; None is
    uniform). Every op must give the same output size."""

    transforms: Sequence[Transform]
    p: Sequence[float] | None = None

    def _spec(self) -> tuple[Any, ...]:
        if self.p is not None and not _seq(self.p):
            raise ConfigError(f"invalid p: {_shown(self.p)} must be None or a list of weights", parameter="p")
        p = None if self.p is None else tuple(_real(v, "p") for v in self.p)
        return ("random_choice", {"transforms": _inner(self.transforms, "RandomChoice"), "p": p})


@dataclass(frozen=True)
class RandomOrder(Transform):
    """torchvision ``RandomOrder(transforms)``: every op, in a random order. Each op must keep the image's
    size."""

    transforms: Sequence[Transform]

    def _spec(self) -> tuple[Any, ...]:
        return ("random_order", {"transforms": _inner(self.transforms, "RandomOrder")})


#: timm's ``_RAND_TRANSFORMS`` (``rand-…``) and ``_RAND_INCREASING_TRANSFORMS`` (``rand-…-inc1``), in timm's order.
TIMM_RAND_TRANSFORMS = (
    "AutoContrast", "Equalize", "Invert", "Rotate", "Posterize", "Solarize", "SolarizeAdd", "Color", "Contrast",
    "Brightness", "Sharpness", "ShearX", "ShearY", "TranslateXRel", "TranslateYRel",
)  # fmt: skip
TIMM_RAND_INCREASING_TRANSFORMS = (
    "AutoContrast", "Equalize", "Invert", "Rotate", "PosterizeIncreasing", "SolarizeIncreasing", "SolarizeAdd",
    "ColorIncreasing", "ContrastIncreasing", "BrightnessIncreasing", "SharpnessIncreasing", "ShearX", "ShearY",
    "TranslateXRel", "TranslateYRel",
)  # fmt: skip


@dataclass(frozen=True)
class TimmRandAugment(Transform):
    """timm's RandAugment (``timm.data.rand_augment_transform``), not torchvision's: ``num_layers`` ops chosen with
    replacement from ``ops`` (timm's names), each run with probability ``p`` at magnitude ``magnitude`` +
    N(0, ``magnitude_std``) (uniform in [0, magnitude] when ``magnitude_std`` is inf) clipped to
    [0, ``magnitude_max``], with Pillow's op implementations; the warps fill with ``fill`` (timm's ``img_mean``,
    pixel units) and resample with ``interpolation`` ('random': bilinear or bicubic per op, timm's default).
    :meth:`from_config` parses timm's strings (``'rand-m9-mstd0.5-inc1'``). Defaults are timm's."""

    num_layers: int = 2
    magnitude: float = 10.0
    magnitude_std: float = 0.0
    magnitude_max: float = 10.0
    p: float = 0.5
    ops: tuple[str, ...] = TIMM_RAND_TRANSFORMS
    fill: Any = (128, 128, 128)
    interpolation: str = "random"
    translate_pct: float = 0.45
    weights: Sequence[float] | None = None

    @classmethod
    def from_config(
        cls,
        config_str: str,
        mean: Sequence[float] = IMAGENET_MEAN,
        interpolation: str = "random",
    ) -> TimmRandAugment:
        """timm's ``rand_augment_transform(config_str, {img_mean, interpolation})`` as ``create_transform`` calls it
        (``mean`` in [0, 1] units gives ``img_mean = round(255·mean)``). Sections: ``m`` (int), ``n`` (int),
        ``p`` (float), ``mstd`` (float; > 100 means inf), ``mmax`` (int), ``inc`` (0/1). Weighted lists (``t…``):
        build timm's object (``timm.data.rand_augment_transform``) and convert it with ``from_torchvision``."""
        parts = _str(config_str, "auto_augment").split("-")
        if parts[0] != "rand":
            raise ConfigError(
                f"invalid auto_augment: {config_str!r} must start with 'rand-' (timm's AutoAugment 'original'/'v0' "
                "and AugMix policies are not in trdata yet)",
                parameter="auto_augment",
            )
        kw: dict[str, Any] = {}
        increasing = False
        for c in parts[1:]:
            m = re.match(r"^([a-z]+)(\d.*)?$", c)
            if c.startswith("t") or m is None:
                raise ConfigError(
                    f"invalid auto_augment: section {c!r} of {config_str!r} must be m, n, p, mstd, mmax or inc "
                    "(for weighted lists, convert timm's rand_augment_transform with from_torchvision)",
                    parameter="auto_augment",
                )
            key, val = m.group(1), m.group(2)
            if val is None:
                continue  # timm skips sections without a number
            try:
                if key == "mstd":
                    mstd = float(val)
                    kw["magnitude_std"] = math.inf if mstd > 100 else mstd
                elif key == "mmax":
                    kw["magnitude_max"] = float(int(val))
                elif key == "inc":
                    increasing = bool(int(val))
                elif key == "m":
                    kw["magnitude"] = float(int(val))
                elif key == "n":
                    kw["num_layers"] = int(val)
                elif key == "p":
                    kw["p"] = float(val)
                else:
                    raise ValueError(key)
            except ValueError:
                raise ConfigError(
                    f"invalid auto_augment: section {c!r} of {config_str!r} is not one of m<int>, n<int>, p<float>, "
                    "mstd<float>, mmax<int>, inc<0|1>",
                    parameter="auto_augment",
                ) from None
        ops = TIMM_RAND_INCREASING_TRANSFORMS if increasing else TIMM_RAND_TRANSFORMS
        fill = tuple(min(255, round(255 * float(x))) for x in mean)
        return cls(ops=ops, fill=fill, interpolation=interpolation, **kw)

    def _spec(self) -> tuple[Any, ...]:
        if isinstance(self.ops, (str, bytes)) or not _seq(self.ops):
            raise ConfigError(
                f"invalid ops: {_shown(self.ops)} must be a sequence of timm op names", parameter="ops"
            )
        return (
            "timm_rand_augment",
            {
                "num_layers": _int_arg(self.num_layers, "num_layers"),
                "magnitude": _real(self.magnitude, "magnitude"),
                "magnitude_std": _real(self.magnitude_std, "magnitude_std"),
                "magnitude_max": _real(self.magnitude_max, "magnitude_max"),
                "p": _real(self.p, "p"),
                "ops": tuple(_str(o, "ops") for o in self.ops),
                "fill": _fill(self.fill),
                "interpolation": _mode(self.interpolation, "interpolation"),
                "translate_pct": _real(self.translate_pct, "translate_pct"),
                "weights": None if self.weights is None else _fill(self.weights, "weights"),
            },
        )


@dataclass(frozen=True)
class TimmResizeKeepRatio(Transform):
    """timm's ``ResizeKeepRatio(size, longest, interpolation)`` without its random scale/aspect (timm's eval
    ``crop_mode='border'`` and non-square ``'center'``): both sides divided by ``max(h/th, w/tw)·longest +
    min(h/th, w/tw)·(1 - longest)``, rounded half to even. It folds into the decode like ``Resize``; follow it with
    ``CenterCrop`` or :class:`TimmCenterCropOrPad` to fix the batch's size."""

    size: int | tuple[int, int]
    longest: float = 0.0
    interpolation: Any = "bilinear"

    def _spec(self) -> tuple[Any, ...]:
        spec = ("resize_keep_ratio", {"size": _size(self.size), "longest": _real(self.longest, "longest")})
        return _resampled(spec, self.interpolation, True)


@dataclass(frozen=True)
class TimmCenterCropOrPad(Transform):
    """timm's ``CenterCropOrPad(size, fill, padding_mode)``: pad the dimensions shorter than ``size`` (``fill``
    in pixel units, or torchvision's ``padding_mode``), then crop the centre. With ``fill=0`` and ``'constant'``
    it is torchvision's ``CenterCrop`` (``from_torchvision`` maps it there, where it folds into the decode)."""

    size: int | tuple[int, int]
    fill: Any = 0
    padding_mode: str = "constant"

    def _spec(self) -> tuple[Any, ...]:
        return (
            "center_crop_or_pad",
            {
                "size": _size(self.size),
                "fill": _fill(self.fill),
                "padding_mode": _str(self.padding_mode, "padding_mode"),
            },
        )


#: timm's ``_AUGMIX_TRANSFORMS``, in timm's order.
TIMM_AUGMIX_TRANSFORMS = (
    "AutoContrast", "ColorIncreasing", "ContrastIncreasing", "BrightnessIncreasing", "SharpnessIncreasing",
    "Equalize", "Rotate", "PosterizeIncreasing", "SolarizeIncreasing", "ShearX", "ShearY", "TranslateXRel",
    "TranslateYRel",
)  # fmt: skip


@dataclass(frozen=True)
class TimmAutoAugment(Transform):
    """timm's AutoAugment (``timm.data.auto_augment_transform('original-mstd0.5')``): per sample one sub-policy of
    ``policy`` (a sequence of sub-policies, each a sequence of ``(op name, p, magnitude)``, e.g. timm's
    ``auto_augment_policy('original')`` as data), each step run as timm's ``AugmentOp`` with Pillow's kernels
    (see :class:`TimmRandAugment` for the shared parameters). ``from_torchvision`` converts timm's object."""

    policy: Sequence[Sequence[tuple[str, float, float]]]
    magnitude_std: float = 0.0
    magnitude_max: float = 10.0
    fill: Any = (128, 128, 128)
    interpolation: str = "random"
    translate_pct: float = 0.45

    def _spec(self) -> tuple[Any, ...]:
        bad = ConfigError(
            f"invalid policy: {_shown(self.policy)} must be a sequence of sub-policies, each a sequence of "
            "(op name, p, magnitude)",
            parameter="policy",
        )
        if not _seq(self.policy) or not all(_seq(sub) for sub in self.policy):
            raise bad
        subs = []
        for sub in self.policy:
            steps = []
            for step in sub:
                if not _seq(step) or len(step) != 3:
                    raise bad
                steps.append((_str(step[0], "policy"), _real(step[1], "p"), _real(step[2], "magnitude")))
            subs.append(tuple(steps))
        return (
            "timm_auto_augment",
            {
                "policy": tuple(subs),
                "magnitude_std": _real(self.magnitude_std, "magnitude_std"),
                "magnitude_max": _real(self.magnitude_max, "magnitude_max"),
                "fill": _fill(self.fill),
                "interpolation": _mode(self.interpolation, "interpolation"),
                "translate_pct": _real(self.translate_pct, "translate_pct"),
            },
        )


@dataclass(frozen=True)
class TimmAugMix(Transform):
    """timm's AugMix (``timm.data.augment_and_mix_transform('augmix-m3-w3')``, not torchvision's): ``width`` chains
    of ``depth`` ops (1–3 per chain when ≤ 0) chosen from ``ops`` at ``magnitude`` (timm's default noise:
    uniform in [0, magnitude], ``magnitude_std=inf``), mixed with Dirichlet(``alpha``) weights in f32, truncated to
    uint8 and blended with the original by Beta(``alpha``, ``alpha``) through Pillow's ``Image.blend``.
    ``create_transform`` passes ``translate_pct=0.3``. Defaults are timm's."""

    ops: tuple[str, ...] = TIMM_AUGMIX_TRANSFORMS
    magnitude: float = 3.0
    alpha: float = 1.0
    width: int = 3
    depth: int = -1
    magnitude_std: float = math.inf
    magnitude_max: float = 10.0
    fill: Any = (128, 128, 128)
    interpolation: str = "random"
    translate_pct: float = 0.45

    def _spec(self) -> tuple[Any, ...]:
        if isinstance(self.ops, (str, bytes)) or not _seq(self.ops):
            raise ConfigError(
                f"invalid ops: {_shown(self.ops)} must be a sequence of timm op names", parameter="ops"
            )
        return (
            "timm_augmix",
            {
                "ops": tuple(_str(o, "ops") for o in self.ops),
                "magnitude": _real(self.magnitude, "magnitude"),
                "alpha": _real(self.alpha, "alpha"),
                "width": _int_arg(self.width, "width"),
                "depth": _int_arg(self.depth, "depth"),
                "magnitude_std": _real(self.magnitude_std, "magnitude_std"),
                "magnitude_max": _real(self.magnitude_max, "magnitude_max"),
                "fill": _fill(self.fill),
                "interpolation": _mode(self.interpolation, "interpolation"),
                "translate_pct": _real(self.translate_pct, "translate_pct"),
            },
        )


@dataclass(frozen=True)
class TimmRandomErasing(Transform):
    """timm's ``RandomErasing(probability, min_area, max_area, min_aspect, max_aspect, mode, min_count,
    max_count)``, which timm applies after Normalize: ``re_mode`` (timm's ``mode``) 'const' fills with 0 in normalized units (the mean
    pixel), 'rand' with one N(0, 1) per channel per box, 'pixel' with one per element. trdata erases the uint8
    image before its final normalize, so ``mean``/``std`` must be the Loader's ``normalize`` ([0, 1] units) and the
    fills are quantised to pixels (``round((z·std + mean)·255)``, clipped to 0–255: normals beyond about ±2 are
    clipped where timm keeps them). Defaults are timm's."""

    probability: float = 0.5
    min_area: float = 0.02
    max_area: float = 1 / 3
    min_aspect: float = 0.3
    max_aspect: float | None = None
    re_mode: str = "const"
    min_count: int = 1
    max_count: int | None = None
    mean: Sequence[float] = IMAGENET_MEAN
    std: Sequence[float] = IMAGENET_STD

    def _spec(self) -> tuple[Any, ...]:
        min_aspect = _real(self.min_aspect, "min_aspect")
        # timm: max_aspect = max_aspect or 1 / min_aspect (a zero min_aspect is the core's error, named `ratio`).
        max_aspect = (
            _real(self.max_aspect, "max_aspect") if self.max_aspect else 1 / min_aspect if min_aspect else 0.0
        )
        min_count = _int_arg(self.min_count, "min_count")
        max_count = min_count if self.max_count is None else _int_arg(self.max_count, "max_count")
        # The core's names: its messages say `p` and `ratio` (timm's probability, (min_aspect, max_aspect)).
        return (
            "timm_random_erasing",
            {
                "p": _real(self.probability, "probability"),
                "min_area": _real(self.min_area, "min_area"),
                "max_area": _real(self.max_area, "max_area"),
                "ratio": (min_aspect, max_aspect),
                "min_count": min_count,
                "max_count": max_count,
                "re_mode": _str(self.re_mode, "re_mode").lower() or "const",
                "mean": _fill(self.mean, "mean"),
                "std": _fill(self.std, "std"),
            },
        )


#: The built-in transforms (the only ones the core compiles).
BUILTIN = (
    RandomResizedCrop,
    Resize,
    CenterCrop,
    RandomHorizontalFlip,
    RandomVerticalFlip,
    Pad,
    RandomCrop,
    ColorJitter,
    Grayscale,
    RandomGrayscale,
    GaussianBlur,
    GaussianNoise,
    RandomErasing,
    RandomAutocontrast,
    RandomEqualize,
    RandomSolarize,
    RandomPosterize,
    RandomAdjustSharpness,
    RandomInvert,
    RandomChannelPermutation,
    RandomRotation,
    RandomAffine,
    RandomPerspective,
    AutoAugment,
    RandAugment,
    TrivialAugmentWide,
    AugMix,
    RandomApply,
    RandomChoice,
    RandomOrder,
    TimmResizeKeepRatio,
    TimmCenterCropOrPad,
    TimmRandAugment,
    TimmAutoAugment,
    TimmAugMix,
    TimmRandomErasing,
)


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
                "Rust core, not Python callables; use trdata.transforms' classes, or pass a torchvision pipeline, "
                "which trdata.transforms.from_torchvision converts)",
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
IMAGENET = (IMAGENET_MEAN, IMAGENET_STD)


@dataclass(frozen=True)
class Converted:
    """What :func:`from_torchvision` made of a torchvision pipeline: the trdata transforms, and the Loader's
    ``normalize`` / ``dtype`` from a trailing ``ToTensor``/``ToImage``/``ToDtype``/``Normalize`` (None when
    absent). ``Loader(transforms=converted)`` (or a view of ``views=``) takes all three, exactly as it takes the
    torchvision pipeline itself."""

    transforms: list[Transform]
    normalize: tuple[tuple[float, ...], tuple[float, ...]] | None = None
    dtype: str | None = None
    #: The op that set ``dtype`` when it was an explicit ``ToDtype``/``ConvertImageDtype`` (a Loader's differing
    #: ``dtype=`` then contradicts it); None when ``dtype`` came from ``ToTensor``/``ToImage`` or is absent.
    dtype_op: str | None = field(default=None, repr=False, compare=False)


def dtype_name(dtype: Any) -> Any:
    """A dtype *object* → its name: ``torch.float16`` → ``"float16"``, ``np.dtype("float32")`` → ``"float32"``
    (``torch.bfloat16``, ``torch.half`` too). Anything else is returned as it is (a string, or a value the core's
    ``dtype`` choice then refuses, naming it): only the spelling is translated, which names are valid is the
    core's table (``trdata.loader.CHOICES["dtype"]``)."""
    if isinstance(dtype, str):
        return dtype
    cls = type(dtype)
    if cls.__module__ == "torch" and cls.__name__ == "dtype":
        return str(dtype).removeprefix("torch.")
    import numpy as np  # trdata's dependency; imported on use like every heavy module here

    if isinstance(dtype, np.dtype):
        return dtype.name
    return dtype


def _is_timm(t: Any) -> bool:
    """A timm data transform (timm.data.transforms, auto_augment, random_erasing)."""
    return type(t).__module__.startswith("timm.data")


def _is_torchvision(t: Any) -> bool:
    return type(t).__module__.startswith("torchvision.transforms") or _is_timm(t)


def is_torchvision(transforms: Any) -> bool:
    """Whether ``transforms`` is a torchvision op/Compose, a list holding one, or a :class:`Converted` (the Loader
    then converts it)."""
    if isinstance(transforms, Converted) or _is_torchvision(transforms):
        return True
    return _seq(transforms) and any(_is_torchvision(t) for t in transforms)


#: How deep Compose/list/container nesting may go while converting: the core allows 3 container levels, so
#: deeper is a mistake — or an object that holds itself, which would otherwise recurse until RecursionError.
_MAX_CONVERT_DEPTH = 16


def _too_deep(t: Any) -> ConfigError:
    return _refuse(
        t, 0, f"it nests Compose/lists/containers more than {_MAX_CONVERT_DEPTH} deep (does it hold itself?)"
    )


def _flatten(t: Any, depth: int = 0) -> list[Any]:
    if depth > _MAX_CONVERT_DEPTH:
        raise _too_deep(t)
    if type(t).__name__ == "Compose" and _is_torchvision(t):
        return [x for sub in t.transforms for x in _flatten(sub, depth + 1)]
    if _seq(t):
        return [x for sub in t for x in _flatten(sub, depth + 1)]
    return [t]


def _refuse(t: Any, pos: int, why: str) -> ConfigError:
    return ConfigError(
        f"invalid transforms: {type(t).__module__}.{type(t).__name__} at transforms[{pos}] cannot run in trdata: "
        f"{why}",
        parameter="transforms",
    )


def from_torchvision(t: Any, _depth: int = 0) -> Converted:
    """A torchvision.transforms.v2 (or classic) op, Compose or list of them → the trdata pipeline (trdata ops are
    passed through). Trailing ``ToTensor``/``ToImage``/``PILToTensor``/``ToDtype(float32, scale=True)``/
    ``ConvertImageDtype(float)`` become ``dtype='float32'`` and a trailing ``Normalize`` the Loader's
    ``normalize``; a ``RandomErasing`` after ``Normalize`` has its value converted to pixel units. timm's
    pipelines (``timm.data.create_transform``) convert as well: ``RandomResizedCropAndInterpolation`` (any
    interpolation, 'random' included), ``CenterCropOrPad`` with zero fill, ``MaybeToTensor``/
    ``MaybePILToTensor``/``ToNumpy``, timm's RandAugment/AutoAugment/AugMix (:class:`TimmRandAugment`,
    :class:`TimmAutoAugment`, :class:`TimmAugMix`) and its ``RandomErasing`` (:class:`TimmRandomErasing`, which
    must follow ``Normalize``; README lists what round-trips). Anything else → ConfigError naming the first op
    trdata cannot run. A :class:`Converted` is returned as it is."""
    if isinstance(t, Converted):
        return t
    if _depth > _MAX_CONVERT_DEPTH:
        raise _too_deep(t)
    ops = _flatten(t)
    out: list[Transform] = []
    normalize: tuple[tuple[float, ...], tuple[float, ...]] | None = None
    dtype: str | None = None
    dtype_op: str | None = None
    for pos, op in enumerate(ops):
        if isinstance(op, Transform):
            if normalize is not None:
                raise _refuse(op, pos, "it comes after Normalize (trdata normalizes in the final write)")
            out.append(op)
            continue
        if not _is_torchvision(op):
            raise ConfigError(
                f"invalid transforms: {_shown(op)} at transforms[{pos}] is neither a trdata nor a torchvision "
                "transform",
                parameter="transforms",
            )
        name = type(op).__name__
        if name in _CONTAINERS:
            if normalize is not None:
                raise _refuse(op, pos, "it comes after Normalize (trdata normalizes in the final write)")
            out.append(_convert_container(op, name, pos, _depth))
            continue
        if _is_timm(op):
            if name == "MaybeToTensor":
                dtype = "float32"
                continue
            if name in ("MaybePILToTensor", "ToNumpy"):
                dtype = "uint8"
                continue
            if name == "RandomErasing":
                if normalize is None:
                    raise _refuse(
                        op, pos, "timm's RandomErasing works in normalized units: put it after Normalize"
                    )
                out.append(_convert_timm_erasing(op, normalize))
                continue
            if normalize is not None:
                raise _refuse(op, pos, "it comes after Normalize (trdata normalizes in the final write)")
            try:
                out.append(_convert_timm(op, name))
            except ConfigError as e:
                raise _refuse(op, pos, str(e)) from None
            continue
        if name in ("ToTensor", "ToImage", "PILToTensor", "ToPureTensor"):
            dtype = "float32" if name == "ToTensor" else "uint8" if name != "ToPureTensor" else dtype
            dtype_op = None
            continue
        if name in ("ToDtype", "ConvertImageDtype"):
            dt = getattr(op, "dtype", None)
            dt = dt.get("others", None) if isinstance(dt, dict) else dt
            # ConvertImageDtype always scales; the float types are the Loader's dtypes (values in [0, 1]).
            if str(dt) in _FLOAT_DTYPES and getattr(op, "scale", True):
                dtype, dtype_op = str(dt).removeprefix("torch."), name
                continue
            if str(dt) == "torch.uint8":
                dtype, dtype_op = "uint8", name
                continue
            raise _refuse(
                op,
                pos,
                f"only float32, float16 or bfloat16 with scale=True, or uint8, are supported, not {dt}",
            )
        if name == "Normalize":
            normalize = (tuple(float(v) for v in op.mean), tuple(float(v) for v in op.std))
            continue
        if normalize is not None and name != "RandomErasing":
            raise _refuse(op, pos, "it comes after Normalize (trdata normalizes in the final write)")
        try:
            # A RandomErasing after ToTensor alone has its value in [0, 1] units: (mean 0, std 1) scales it.
            floats = dtype is not None and f"torch.{dtype}" in _FLOAT_DTYPES
            units = normalize if normalize is not None else ((0.0,), (1.0,)) if floats else None
            out.append(_convert(op, name, units))
        except ConfigError as e:
            raise _refuse(op, pos, str(e)) from None
        except (AttributeError, TypeError, KeyError):
            raise _refuse(op, pos, "trdata has no such op (yet)") from None
        except Exception as e:  # a look-alike whose attributes raise: still a configuration error, named
            raise _refuse(op, pos, f"reading its parameters raised {type(e).__name__}: {e}") from e
    return Converted(out, normalize, dtype, dtype_op)


#: A ``ToDtype``/``ConvertImageDtype`` float type (``scale=True``) → the Loader's dtype of the same name.
_FLOAT_DTYPES = ("torch.float32", "torch.float16", "torch.bfloat16")

#: torchvision's containers (v2 and classic have the same names and attributes).
_CONTAINERS = ("RandomApply", "RandomChoice", "RandomOrder")


def _convert_container(op: Any, name: str, pos: int, depth: int = 0) -> Transform:
    """A torchvision RandomApply/RandomChoice/RandomOrder (v2 or classic) → trdata's, its inner list converted
    by :func:`from_torchvision` (a Compose inside is flattened); an inner ToTensor/Normalize is refused."""
    inner = from_torchvision(list(op.transforms), depth + 1)
    if inner.normalize is not None or inner.dtype is not None:
        raise _refuse(op, pos, "it holds ToTensor/ToDtype/Normalize (only the pipeline's end may convert)")
    if name == "RandomApply":
        return RandomApply(inner.transforms, op.p)
    if name == "RandomChoice":
        return RandomChoice(inner.transforms, None if op.p is None else list(op.p))
    return RandomOrder(inner.transforms)


def _convert(op: Any, name: str, normalize: tuple[tuple[float, ...], tuple[float, ...]] | None) -> Transform:
    v2 = ".v2." in type(op).__module__
    if name in ("RandomResizedCrop", "Resize"):
        interpolation = _mode(op.interpolation, "interpolation")
        antialias = getattr(op, "antialias", True)
        antialias = True if antialias is None or antialias == "warn" else antialias
    if name == "RandomResizedCrop":
        return RandomResizedCrop(tuple(op.size), tuple(op.scale), tuple(op.ratio), interpolation, antialias)
    if name == "Resize":
        size = op.size
        if _seq(size) and len(size) == 1:
            size = size[0]
        if size is None:
            raise ConfigError("size=None (max_size alone) is not supported")
        return Resize(size if _is_int(size) else tuple(size), interpolation, op.max_size, antialias)
    if name == "CenterCrop":
        return CenterCrop(tuple(op.size))
    if name in ("RandomHorizontalFlip", "RandomVerticalFlip"):
        return (RandomHorizontalFlip if name == "RandomHorizontalFlip" else RandomVerticalFlip)(p=op.p)
    if name == "Pad":
        return Pad(op.padding, op.fill, op.padding_mode)
    if name == "RandomCrop":
        padding = op.padding
        if v2 and padding is not None:
            left, right, top, bottom = padding  # v2 stores torch's [left, right, top, bottom]
            padding = (left, top, right, bottom)
        return RandomCrop(tuple(op.size), padding, op.pad_if_needed, op.fill, op.padding_mode)
    if name == "ColorJitter":
        return ColorJitter(op.brightness, op.contrast, op.saturation, op.hue)
    if name == "Grayscale":
        return Grayscale(op.num_output_channels)
    if name == "RandomGrayscale":
        return RandomGrayscale(op.p)
    if name == "GaussianBlur":
        return GaussianBlur(tuple(op.kernel_size), tuple(op.sigma))
    if name == "GaussianNoise":
        return GaussianNoise(op.mean, op.sigma, op.clip)
    if name == "RandomErasing":
        value = op.value
        if value is None or value == "random":
            value = "random"
        elif normalize is not None:
            vals = value if _seq(value) else [value]
            mean, std = normalize
            n = max(len(vals), len(mean))
            value = tuple(
                min(
                    255.0,
                    max(
                        0.0,
                        round((float(vals[i % len(vals)]) * std[i % len(std)] + mean[i % len(mean)]) * 255),
                    ),
                )
                for i in range(n)
            )
        return RandomErasing(op.p, tuple(op.scale), tuple(op.ratio), value)
    if name in ("RandomAutocontrast", "RandomEqualize", "RandomInvert"):
        return {
            "RandomAutocontrast": RandomAutocontrast,
            "RandomEqualize": RandomEqualize,
            "RandomInvert": RandomInvert,
        }[name](op.p)
    if name == "RandomChannelPermutation":
        return RandomChannelPermutation()
    if name == "RandomSolarize":
        return RandomSolarize(op.threshold, op.p)
    if name == "RandomPosterize":
        return RandomPosterize(op.bits, op.p)
    if name == "RandomAdjustSharpness":
        return RandomAdjustSharpness(op.sharpness_factor, op.p)
    if name == "RandomRotation":
        return RandomRotation(
            tuple(op.degrees), _mode(op.interpolation, "interpolation"), op.expand, op.center, op.fill
        )
    if name == "RandomAffine":
        return RandomAffine(
            tuple(op.degrees),
            op.translate,
            op.scale,
            op.shear,
            _mode(op.interpolation, "interpolation"),
            op.fill,
            op.center,
        )
    if name == "RandomPerspective":
        return RandomPerspective(op.distortion_scale, op.p, _mode(op.interpolation, "interpolation"), op.fill)
    if name == "AutoAugment":
        return AutoAugment(_mode(op.policy, "policy"), _mode(op.interpolation, "interpolation"), op.fill)
    if name == "RandAugment":
        return RandAugment(
            op.num_ops, op.magnitude, op.num_magnitude_bins, _mode(op.interpolation, "interpolation"), op.fill
        )
    if name == "TrivialAugmentWide":
        return TrivialAugmentWide(op.num_magnitude_bins, _mode(op.interpolation, "interpolation"), op.fill)
    if name == "AugMix":
        return AugMix(
            op.severity,
            op.mixture_width,
            op.chain_depth,
            op.alpha,
            op.all_ops,
            _mode(op.interpolation, "interpolation"),
            op.fill,
        )
    raise KeyError(name)


#: timm classes that have no trdata counterpart, with what to do instead.
_TIMM_REFUSED = {
    "ToTensor": "timm's unscaled ToTensor is not supported: use MaybePILToTensor (uint8) or MaybeToTensor",
}


def _timm_interpolation(v: Any) -> str:
    """timm's interpolation (a torchvision InterpolationMode, a PIL filter, or the bilinear/bicubic tuple that
    means 'random') → the name."""
    if isinstance(v, (tuple, list)):
        names = sorted(_timm_interpolation(x) for x in v)
        if names == ["bicubic", "bilinear"]:
            return "random"
        raise ConfigError(
            f"invalid interpolation: {_shown(v)} must be one filter or timm's (bilinear, bicubic)"
        )
    if hasattr(v, "value") and isinstance(v.value, str):
        return str(v.value).lower()
    return {0: "nearest", 2: "bilinear", 3: "bicubic"}.get(int(v), f"PIL filter {int(v)}")


def _convert_timm(op: Any, name: str) -> Transform:
    """A timm transform (before Normalize) → the trdata one; ConfigError saying why not."""
    if name in _TIMM_REFUSED:
        raise ConfigError(_TIMM_REFUSED[name])
    if name == "RandomResizedCropAndInterpolation":
        # 'random' (bilinear or bicubic per sample) is the core's per-sample filter choice.
        interpolation = _timm_interpolation(op.interpolation)
        return RandomResizedCrop(tuple(op.size), tuple(op.scale), tuple(op.ratio), interpolation, True)
    if name == "ResizeKeepRatio":
        if op.random_scale_prob > 0 or op.random_aspect_prob > 0:
            raise ConfigError(
                "its random scale/aspect (train_crop_mode='rkrc'/'rkrr') is not supported: use train_crop_mode='rrc'"
            )
        return TimmResizeKeepRatio(tuple(op.size), float(op.longest), _timm_interpolation(op.interpolation))
    if name == "CenterCropOrPad":
        fill = op.fill if _seq(op.fill) else [op.fill]
        if op.padding_mode == "constant" and all(float(v) == 0 for v in fill):
            return CenterCrop(
                tuple(op.size)
            )  # torchvision's CenterCrop pads with zeros the same way, and folds
        return TimmCenterCropOrPad(tuple(op.size), op.fill, op.padding_mode)
    if name == "RandAugment":
        return _convert_timm_rand_augment(op)
    if name == "AutoAugment":
        steps = [o for sub in op.policy for o in sub]
        prob, magnitude, *shared = _timm_shared(steps)
        return TimmAutoAugment(
            [[(o.name, float(o.prob), float(o.magnitude)) for o in sub] for sub in op.policy], *shared
        )
    if name == "AugMixAugment":
        if op.blended:
            raise ConfigError(
                "blended=True (timm's 'b1', which timm itself calls not well tested) is not supported"
            )
        prob, magnitude, mstd, mmax, fill, interpolation, translate_pct = _timm_shared(
            list(op.ops), same_level=True
        )
        return TimmAugMix(
            tuple(o.name for o in op.ops), magnitude, float(op.alpha), op.width, op.depth, mstd, mmax, fill,
            interpolation, translate_pct,
        )  # fmt: skip
    raise ConfigError("trdata has no such op (yet)")


#: timm's op names trdata runs (src/augment/timm.rs TIMM_OPS).
_TIMM_OP_NAMES = frozenset(TIMM_RAND_TRANSFORMS + TIMM_RAND_INCREASING_TRANSFORMS + ("PosterizeOriginal",))


def _timm_shared(ops: list[Any], same_level: bool = True) -> tuple[Any, ...]:
    """The parameters timm's ``AugmentOp`` list shares: (prob, magnitude, magnitude_std, magnitude_max, fill,
    interpolation, translate_pct); ConfigError when an op is unknown to trdata or they differ."""
    if not ops:
        raise ConfigError("it has no ops")
    for o in ops:
        if type(o).__name__ != "AugmentOp":
            raise ConfigError(f"{type(o).__name__} is not one of timm's AugmentOp")
        if o.name not in _TIMM_OP_NAMES:
            raise ConfigError(
                f"timm's op {o.name!r} is not in trdata (it runs {', '.join(sorted(_TIMM_OP_NAMES))})"
            )

    def shared(o: Any) -> tuple[Any, ...]:
        fill = o.kwargs["fillcolor"]
        return (
            o.magnitude_std,
            o.magnitude_max,
            tuple(fill) if _seq(fill) else fill,
            _timm_interpolation(o.kwargs["resample"]),
            o.hparams.get("translate_pct", 0.45),
        )

    if any(shared(o) != shared(ops[0]) for o in ops):
        raise ConfigError("its ops must share one magnitude_std, magnitude_max, fill and interpolation")
    mstd, mmax, fill, interpolation, translate_pct = shared(ops[0])
    level = (ops[0].prob, ops[0].magnitude)
    if same_level and any((o.prob, o.magnitude) != level for o in ops):
        level = (math.nan, math.nan)  # AutoAugment: each step keeps its own; the caller does not use these
    return (
        float(level[0]), float(level[1]), float(mstd), float(mmax or 10.0), fill, interpolation, float(translate_pct)
    )  # fmt: skip


def _convert_timm_rand_augment(op: Any) -> TimmRandAugment:
    ops = list(op.ops)
    prob, magnitude, mstd, mmax, fill, interpolation, translate_pct = _timm_shared(ops)
    if math.isnan(prob):
        raise ConfigError("its ops must share one prob and magnitude")
    return TimmRandAugment(
        num_layers=op.num_layers,
        magnitude=magnitude,
        magnitude_std=mstd,
        magnitude_max=mmax,
        p=prob,
        ops=tuple(o.name for o in ops),
        fill=fill,
        interpolation=interpolation,
        translate_pct=translate_pct,
        weights=None if op.choice_weights is None else tuple(float(v) for v in op.choice_weights),
    )


def _convert_timm_erasing(
    op: Any, normalize: tuple[tuple[float, ...], tuple[float, ...]]
) -> TimmRandomErasing:
    lo, hi = op.log_aspect_ratio
    return TimmRandomErasing(
        probability=op.probability,
        min_area=op.min_area,
        max_area=op.max_area,
        min_aspect=math.exp(lo),
        max_aspect=math.exp(hi),
        re_mode=op.mode or "const",
        min_count=op.min_count,
        max_count=op.max_count,
        mean=normalize[0],
        std=normalize[1],
    )
