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
    interpolation: Any = _DEFAULTS["RandomResizedCrop.interpolation"]
    antialias: bool = _DEFAULTS["RandomResizedCrop.antialias"]

    def __post_init__(self) -> None:
        self._spec()

    def _spec(self) -> tuple[Any, ...]:
        h, w = _size(self.size)
        scale, ratio = _pair(self.scale, "scale"), _pair(self.ratio, "ratio")
        return _resampled(("random_resized_crop", h, w, *scale, *ratio), self.interpolation, self.antialias)


@dataclass(frozen=True)
class Resize(Transform):
    """``Resize(256)``: shorter side to 256 (torchvision ``Resize(int)``); ``Resize((h, w))``: exact size.
    ``max_size`` (with an int ``size``) caps the longer side as torchvision does; such a resize runs on the
    uint8 image after the decode (its size depends on the image, so a later crop must fix it)."""

    size: int | tuple[int, int]
    interpolation: Any = _DEFAULTS["Resize.interpolation"]
    max_size: int | None = None
    antialias: bool = _DEFAULTS["Resize.antialias"]

    def __post_init__(self) -> None:
        self._spec()

    def _spec(self) -> tuple[Any, ...]:
        if self.max_size is not None:
            size: Any = self.size
            size = size[0] if _seq(size) and len(size) == 1 else size
            aa = True if self.antialias is None else _bool_arg(self.antialias, "antialias")
            return (
                "resize_max",
                _size(size)[0] if _is_int(size) else _int_arg(size, "size"),
                _int_arg(self.max_size, "max_size"),
                _mode(self.interpolation, "interpolation"),
                aa,
            )
        if _is_int(self.size):
            return _resampled(("resize_shorter", _size(self.size)[0]), self.interpolation, self.antialias)
        h, w = _size(self.size)
        return _resampled(("resize", h, w), self.interpolation, self.antialias)


def _resampled(spec: tuple[Any, ...], interpolation: Any, antialias: Any) -> tuple[Any, ...]:
    """A resize's spec with its filter: unchanged for antialiased bilinear (the fused default), else wrapped as
    ``("resampled", interpolation, antialias, spec)`` (the values are the core's choice table)."""
    mode = _mode(interpolation, "interpolation")
    aa = True if antialias is None else _bool_arg(antialias, "antialias")
    if mode == "bilinear" and aa:
        return spec
    return ("resampled", mode, aa, spec)


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

    def __post_init__(self) -> None:
        self._spec()

    def _spec(self) -> tuple[Any, ...]:
        return ("vertical_flip", _real(self.p, "p"))


@dataclass(frozen=True)
class Pad(Transform):
    """torchvision ``Pad(padding, fill=0, padding_mode='constant')`` on the uint8 image (fill in pixel units)."""

    padding: Any
    fill: Any = _DEFAULTS["Pad.fill"]
    padding_mode: str = _DEFAULTS["Pad.padding_mode"]

    def __post_init__(self) -> None:
        self._spec()

    def _spec(self) -> tuple[Any, ...]:
        return ("pad", _padding(self.padding), _fill(self.fill), _str(self.padding_mode, "padding_mode"))


@dataclass(frozen=True)
class RandomCrop(Transform):
    """torchvision v2 ``RandomCrop(size, padding=None, pad_if_needed=False, fill=0, padding_mode='constant')``
    (``pad_if_needed`` pads the missing size on both sides, as v2 does)."""

    size: int | tuple[int, int]
    padding: Any = None
    pad_if_needed: bool = False
    fill: Any = _DEFAULTS["Pad.fill"]
    padding_mode: str = _DEFAULTS["Pad.padding_mode"]

    def __post_init__(self) -> None:
        self._spec()

    def _spec(self) -> tuple[Any, ...]:
        h, w = _size(self.size)
        pad = (0, 0, 0, 0) if self.padding is None else _padding(self.padding)
        return (
            "random_crop",
            h,
            w,
            pad,
            _bool_arg(self.pad_if_needed, "pad_if_needed"),
            _fill(self.fill),
            _str(self.padding_mode, "padding_mode"),
        )


@dataclass(frozen=True)
class ColorJitter(Transform):
    """torchvision ``ColorJitter``: brightness, contrast, saturation, hue in a random order per sample."""

    brightness: Any = None
    contrast: Any = None
    saturation: Any = None
    hue: Any = None

    def __post_init__(self) -> None:
        self._spec()

    def _spec(self) -> tuple[Any, ...]:
        return (
            "color_jitter",
            _jitter_range(self.brightness, "brightness", 1.0, True),
            _jitter_range(self.contrast, "contrast", 1.0, True),
            _jitter_range(self.saturation, "saturation", 1.0, True),
            _jitter_range(self.hue, "hue", 0.0, False),
        )


@dataclass(frozen=True)
class Grayscale(Transform):
    """torchvision ``Grayscale``; the Loader's ``channels`` decides the output's channel count (with 3 the gray
    value fills all three, as ``num_output_channels=3``)."""

    num_output_channels: int = _DEFAULTS["Grayscale.num_output_channels"]

    def __post_init__(self) -> None:
        self._spec()

    def _spec(self) -> tuple[Any, ...]:
        if not _is_int(self.num_output_channels):
            raise ConfigError(
                f"invalid num_output_channels: {_shown(self.num_output_channels)} must be an int",
                parameter="num_output_channels",
            )
        return ("grayscale", int(self.num_output_channels))


@dataclass(frozen=True)
class RandomGrayscale(Transform):
    """torchvision ``RandomGrayscale(p=0.1)`` (keeps the channel count)."""

    p: float = _DEFAULTS["RandomGrayscale.p"]

    def __post_init__(self) -> None:
        self._spec()

    def _spec(self) -> tuple[Any, ...]:
        return ("random_grayscale", _real(self.p, "p"))


@dataclass(frozen=True)
class GaussianBlur(Transform):
    """torchvision ``GaussianBlur(kernel_size, sigma=(0.1, 2.0))``; ``kernel_size`` is (x, y) as torchvision's."""

    kernel_size: Any
    sigma: Any = _DEFAULTS["GaussianBlur.sigma"]

    def __post_init__(self) -> None:
        self._spec()

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
        return ("gaussian_blur", kx, ky, (lo, hi))


@dataclass(frozen=True)
class GaussianNoise(Transform):
    """torchvision v2 ``GaussianNoise(mean=0.0, sigma=0.1, clip=True)`` on the uint8 image, as torchvision runs it
    on uint8 tensors: noise ``mean·255 + N(0,1)·sigma·255`` truncated to an integer, added, clamped (``clip``)."""

    mean: float = _DEFAULTS["GaussianNoise.mean"]
    sigma: float = _DEFAULTS["GaussianNoise.sigma"]
    clip: bool = _DEFAULTS["GaussianNoise.clip"]

    def __post_init__(self) -> None:
        self._spec()

    def _spec(self) -> tuple[Any, ...]:
        return (
            "gaussian_noise",
            _real(self.mean, "mean"),
            _real(self.sigma, "sigma"),
            _bool_arg(self.clip, "clip"),
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

    def __post_init__(self) -> None:
        self._spec()

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
            _real(self.p, "p"),
            _pair(self.scale, "scale"),
            _pair(self.ratio, "ratio"),
            value,
        )


@dataclass(frozen=True)
class RandomAutocontrast(Transform):
    """torchvision ``RandomAutocontrast(p=0.5)``."""

    p: float = _DEFAULTS["RandomAutocontrast.p"]

    def __post_init__(self) -> None:
        self._spec()

    def _spec(self) -> tuple[Any, ...]:
        return ("random_autocontrast", _real(self.p, "p"))


@dataclass(frozen=True)
class RandomEqualize(Transform):
    """torchvision ``RandomEqualize(p=0.5)``."""

    p: float = _DEFAULTS["RandomEqualize.p"]

    def __post_init__(self) -> None:
        self._spec()

    def _spec(self) -> tuple[Any, ...]:
        return ("random_equalize", _real(self.p, "p"))


@dataclass(frozen=True)
class RandomInvert(Transform):
    """torchvision ``RandomInvert(p=0.5)``."""

    p: float = _DEFAULTS["RandomInvert.p"]

    def __post_init__(self) -> None:
        self._spec()

    def _spec(self) -> tuple[Any, ...]:
        return ("random_invert", _real(self.p, "p"))


@dataclass(frozen=True)
class RandomSolarize(Transform):
    """torchvision ``RandomSolarize(threshold, p=0.5)``; threshold in pixel units (uint8)."""

    threshold: float
    p: float = _DEFAULTS["RandomSolarize.p"]

    def __post_init__(self) -> None:
        self._spec()

    def _spec(self) -> tuple[Any, ...]:
        return ("random_solarize", _real(self.threshold, "threshold"), _real(self.p, "p"))


@dataclass(frozen=True)
class RandomPosterize(Transform):
    """torchvision ``RandomPosterize(bits, p=0.5)``."""

    bits: int
    p: float = _DEFAULTS["RandomPosterize.p"]

    def __post_init__(self) -> None:
        self._spec()

    def _spec(self) -> tuple[Any, ...]:
        if not _is_int(self.bits):
            raise ConfigError(f"invalid bits: {_shown(self.bits)} must be an int", parameter="bits")
        return ("random_posterize", int(self.bits), _real(self.p, "p"))


@dataclass(frozen=True)
class RandomAdjustSharpness(Transform):
    """torchvision ``RandomAdjustSharpness(sharpness_factor, p=0.5)``."""

    sharpness_factor: float
    p: float = _DEFAULTS["RandomAdjustSharpness.p"]

    def __post_init__(self) -> None:
        self._spec()

    def _spec(self) -> tuple[Any, ...]:
        return (
            "random_adjust_sharpness",
            _real(self.sharpness_factor, "sharpness_factor"),
            _real(self.p, "p"),
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

    def __post_init__(self) -> None:
        self._spec()

    def _spec(self) -> tuple[Any, ...]:
        return (
            "random_rotation",
            _degrees(self.degrees),
            _mode(self.interpolation, "interpolation"),
            _bool_arg(self.expand, "expand"),
            _opt_pair(self.center, "center"),
            _opt_fill(self.fill),
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

    def __post_init__(self) -> None:
        self._spec()

    def _spec(self) -> tuple[Any, ...]:
        return (
            "random_affine",
            _degrees(self.degrees),
            _opt_pair(self.translate, "translate"),
            _opt_pair(self.scale, "scale"),
            _shear(self.shear),
            _mode(self.interpolation, "interpolation"),
            _opt_fill(self.fill),
            _opt_pair(self.center, "center"),
        )


@dataclass(frozen=True)
class RandomPerspective(Transform):
    """torchvision v2 ``RandomPerspective(distortion_scale=0.5, p=0.5, interpolation='bilinear', fill=0)``."""

    distortion_scale: float = _DEFAULTS["RandomPerspective.distortion_scale"]
    p: float = _DEFAULTS["RandomPerspective.p"]
    interpolation: Any = _DEFAULTS["RandomPerspective.interpolation"]
    fill: Any = _DEFAULTS["RandomPerspective.fill"]

    def __post_init__(self) -> None:
        self._spec()

    def _spec(self) -> tuple[Any, ...]:
        return (
            "random_perspective",
            _real(self.distortion_scale, "distortion_scale"),
            _real(self.p, "p"),
            _mode(self.interpolation, "interpolation"),
            _opt_fill(self.fill),
        )


@dataclass(frozen=True)
class AutoAugment(Transform):
    """torchvision v2 ``AutoAugment(policy=AutoAugmentPolicy.IMAGENET, interpolation='nearest', fill=None)``
    (``policy``: 'imagenet', 'cifar10', 'svhn' or the enum)."""

    policy: Any = _DEFAULTS["AutoAugment.policy"]
    interpolation: Any = _DEFAULTS["AutoAugment.interpolation"]
    fill: Any = None

    def __post_init__(self) -> None:
        self._spec()

    def _spec(self) -> tuple[Any, ...]:
        return (
            "auto_augment",
            _mode(self.policy, "policy"),
            _mode(self.interpolation, "interpolation"),
            _opt_fill(self.fill),
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

    def __post_init__(self) -> None:
        self._spec()

    def _spec(self) -> tuple[Any, ...]:
        return (
            "rand_augment",
            _int_arg(self.num_ops, "num_ops"),
            _int_arg(self.magnitude, "magnitude"),
            _int_arg(self.num_magnitude_bins, "num_magnitude_bins"),
            _mode(self.interpolation, "interpolation"),
            _opt_fill(self.fill),
        )


@dataclass(frozen=True)
class TrivialAugmentWide(Transform):
    """torchvision v2 ``TrivialAugmentWide(num_magnitude_bins=31, interpolation='nearest', fill=None)``."""

    num_magnitude_bins: int = _DEFAULTS["TrivialAugmentWide.num_magnitude_bins"]
    interpolation: Any = _DEFAULTS["TrivialAugmentWide.interpolation"]
    fill: Any = None

    def __post_init__(self) -> None:
        self._spec()

    def _spec(self) -> tuple[Any, ...]:
        return (
            "trivial_augment_wide",
            _int_arg(self.num_magnitude_bins, "num_magnitude_bins"),
            _mode(self.interpolation, "interpolation"),
            _opt_fill(self.fill),
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

    def __post_init__(self) -> None:
        self._spec()

    def _spec(self) -> tuple[Any, ...]:
        return (
            "augmix",
            _int_arg(self.severity, "severity"),
            _int_arg(self.mixture_width, "mixture_width"),
            _int_arg(self.chain_depth, "chain_depth"),
            _real(self.alpha, "alpha"),
            _bool_arg(self.all_ops, "all_ops"),
            _mode(self.interpolation, "interpolation"),
            _opt_fill(self.fill),
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

    def __post_init__(self) -> None:
        self._spec()

    def _spec(self) -> tuple[Any, ...]:
        return ("random_apply", _inner(self.transforms, "RandomApply"), _real(self.p, "p"))


@dataclass(frozen=True)
class RandomChoice(Transform):
    """torchvision ``RandomChoice(transforms, p=None)``: one op, picked with weights ``p`` (normalised; None is
    uniform). Every op must give the same output size."""

    transforms: Sequence[Transform]
    p: Sequence[float] | None = None

    def __post_init__(self) -> None:
        self._spec()

    def _spec(self) -> tuple[Any, ...]:
        if self.p is not None and not _seq(self.p):
            raise ConfigError(f"invalid p: {_shown(self.p)} must be None or a list of weights", parameter="p")
        p = None if self.p is None else tuple(_real(v, "p") for v in self.p)
        return ("random_choice", _inner(self.transforms, "RandomChoice"), p)


@dataclass(frozen=True)
class RandomOrder(Transform):
    """torchvision ``RandomOrder(transforms)``: every op, in a random order. Each op must keep the image's
    size."""

    transforms: Sequence[Transform]

    def __post_init__(self) -> None:
        self._spec()

    def _spec(self) -> tuple[Any, ...]:
        return ("random_order", _inner(self.transforms, "RandomOrder"))


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
IMAGENET = ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))


@dataclass(frozen=True)
class Converted:
    """What :func:`from_torchvision` made of a torchvision pipeline: the trdata transforms, and the Loader's
    ``normalize`` / ``dtype`` from a trailing ``ToTensor``/``ToImage``/``ToDtype``/``Normalize`` (None when
    absent)."""

    transforms: list[Transform]
    normalize: tuple[tuple[float, ...], tuple[float, ...]] | None = None
    dtype: str | None = None


def _is_torchvision(t: Any) -> bool:
    return type(t).__module__.startswith("torchvision.transforms")


def is_torchvision(transforms: Any) -> bool:
    """Whether ``transforms`` is a torchvision op/Compose, or a list holding one (the Loader then converts it)."""
    if _is_torchvision(transforms):
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
    ``normalize``; a ``RandomErasing`` after ``Normalize`` has its value converted to pixel units. Anything else
    → ConfigError naming the first op trdata cannot run."""
    if _depth > _MAX_CONVERT_DEPTH:
        raise _too_deep(t)
    ops = _flatten(t)
    out: list[Transform] = []
    normalize: tuple[tuple[float, ...], tuple[float, ...]] | None = None
    dtype: str | None = None
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
        if name in ("ToTensor", "ToImage", "PILToTensor", "ToPureTensor"):
            dtype = "float32" if name == "ToTensor" else "uint8" if name != "ToPureTensor" else dtype
            continue
        if name in ("ToDtype", "ConvertImageDtype"):
            dt = getattr(op, "dtype", None)
            dt = dt.get("others", None) if isinstance(dt, dict) else dt
            if str(dt) == "torch.float32" and getattr(op, "scale", True):
                dtype = "float32"
                continue
            if str(dt) == "torch.uint8":
                dtype = "uint8"
                continue
            raise _refuse(op, pos, f"only float32 with scale=True or uint8 are supported, not {dt}")
        if name == "Normalize":
            normalize = (tuple(float(v) for v in op.mean), tuple(float(v) for v in op.std))
            continue
        if normalize is not None and name != "RandomErasing":
            raise _refuse(op, pos, "it comes after Normalize (trdata normalizes in the final write)")
        try:
            # A RandomErasing after ToTensor alone has its value in [0, 1] units: (mean 0, std 1) scales it.
            units = normalize if normalize is not None else ((0.0,), (1.0,)) if dtype == "float32" else None
            out.append(_convert(op, name, units))
        except ConfigError as e:
            raise _refuse(op, pos, str(e)) from None
        except (AttributeError, TypeError, KeyError):
            raise _refuse(op, pos, "trdata has no such op (yet)") from None
        except Exception as e:  # a look-alike whose attributes raise: still a configuration error, named
            raise _refuse(op, pos, f"reading its parameters raised {type(e).__name__}: {e}") from e
    return Converted(out, normalize, dtype)


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
