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

import contextlib
import math
import os
import random
import re
import sys
import threading
import traceback
import types
import warnings
import weakref
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from . import _core
from ._args import (
    _bool_arg,
    _degrees,
    _fill,
    _int_arg,
    _is_int,
    _jitter_range,
    _mode,
    _opt_fill,
    _opt_pair,
    _padding,
    _pair,
    _real,
    _seq,
    _shear,
    _size,
    _str,
)
from .errors import ConfigError, _shown

if TYPE_CHECKING:  # at run time, through __getattr__ below (trdata.convert imports this module)
    from .convert import Converted as Converted
    from .convert import from_torchvision as from_torchvision

_DEFAULTS = _core.DEFAULTS

#: ImageNet mean and std in [0, 1] units (timm's IMAGENET_DEFAULT_MEAN/STD, torchvision's reference values).
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


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
class RandomPhotometricDistort(Transform):
    """torchvision v2 ``RandomPhotometricDistort(brightness=(0.875, 1.125), contrast=(0.5, 1.5),
    saturation=(0.5, 1.5), hue=(-0.05, 0.05), p=0.5)`` (SSD's): each adjustment with probability ``p``, contrast
    before or after saturation and hue, then the channels permuted with probability ``p``."""

    brightness: tuple[float, float] = _DEFAULTS["RandomPhotometricDistort.brightness"]
    contrast: tuple[float, float] = _DEFAULTS["RandomPhotometricDistort.contrast"]
    saturation: tuple[float, float] = _DEFAULTS["RandomPhotometricDistort.saturation"]
    hue: tuple[float, float] = _DEFAULTS["RandomPhotometricDistort.hue"]
    p: float = _DEFAULTS["RandomPhotometricDistort.p"]

    def _spec(self) -> tuple[Any, ...]:
        return (
            "random_photometric_distort",
            {
                "brightness": _pair(self.brightness, "brightness"),
                "contrast": _pair(self.contrast, "contrast"),
                "saturation": _pair(self.saturation, "saturation"),
                "hue": _pair(self.hue, "hue"),
                "p": _real(self.p, "p"),
            },
        )


@dataclass(frozen=True)
class RandomZoomOut(Transform):
    """torchvision v2 ``RandomZoomOut(fill=0, side_range=(1.0, 4.0), p=0.5)``: the image on a canvas ``r`` times
    its size at a random position (``fill`` in pixel units; a detection source's masks are filled with 0, as
    torchvision's references ask with ``fill={Mask: 0}``)."""

    fill: Any = _DEFAULTS["RandomZoomOut.fill"]
    side_range: tuple[float, float] = _DEFAULTS["RandomZoomOut.side_range"]
    p: float = _DEFAULTS["RandomZoomOut.p"]

    def _spec(self) -> tuple[Any, ...]:
        return (
            "random_zoom_out",
            {
                "fill": _fill(self.fill),
                "side_range": _pair(self.side_range, "side_range"),
                "p": _real(self.p, "p"),
            },
        )


@dataclass(frozen=True)
class ScaleJitter(Transform):
    """torchvision v2 ``ScaleJitter(target_size, scale_range=(0.1, 2.0), interpolation='bilinear',
    antialias=True)``: the image resized by ``min(target_h / h, target_w / w) · s``, ``s`` uniform in
    ``scale_range`` (large scale jitter). Its size varies: a later crop, or ``Loader(pad_to=...)``, fixes it."""

    target_size: tuple[int, int]
    scale_range: tuple[float, float] = _DEFAULTS["ScaleJitter.scale_range"]
    interpolation: Any = _DEFAULTS["ScaleJitter.interpolation"]
    antialias: bool = _DEFAULTS["ScaleJitter.antialias"]

    def _spec(self) -> tuple[Any, ...]:
        return (
            "scale_jitter",
            {
                "target_size": _size(self.target_size),
                "scale_range": _pair(self.scale_range, "scale_range"),
                "interpolation": _mode(self.interpolation, "interpolation"),
                "antialias": True if self.antialias is None else _bool_arg(self.antialias, "antialias"),
            },
        )


@dataclass(frozen=True)
class RandomResize(Transform):
    """torchvision v2 ``RandomResize(min_size, max_size, interpolation='bilinear', antialias=True)`` (the
    segmentation recipe's): the shorter side resized to a size drawn uniformly from ``min_size`` to ``max_size - 1``
    (``torch.randint``), the longer side in proportion; boxes, masks, keypoints and label maps move with it (masks
    and maps nearest). Its size varies: a later crop, or ``Loader(pad_to=...)``, fixes it."""

    min_size: int
    max_size: int
    interpolation: Any = _DEFAULTS["RandomResize.interpolation"]
    antialias: bool = _DEFAULTS["RandomResize.antialias"]

    def _spec(self) -> tuple[Any, ...]:
        return (
            "random_resize",
            {
                "min_size": _int_arg(self.min_size, "min_size"),
                "max_size": _int_arg(self.max_size, "max_size"),
                "interpolation": _mode(self.interpolation, "interpolation"),
                "antialias": True if self.antialias is None else _bool_arg(self.antialias, "antialias"),
            },
        )


@dataclass(frozen=True)
class RandomShortestSize(Transform):
    """torchvision v2 ``RandomShortestSize(min_size, max_size=None, interpolation='bilinear', antialias=True)``:
    the shorter side resized to one of ``min_size`` (picked uniformly), the longer side at most ``max_size``. Its
    size varies: a later crop, or ``Loader(pad_to=...)``, fixes it."""

    min_size: int | tuple[int, ...]
    max_size: int | None = None
    interpolation: Any = _DEFAULTS["RandomShortestSize.interpolation"]
    antialias: bool = _DEFAULTS["RandomShortestSize.antialias"]

    def _spec(self) -> tuple[Any, ...]:
        sizes = [self.min_size] if _is_int(self.min_size) else list(self.min_size)
        return (
            "random_shortest_size",
            {
                "min_size": [_real(v, "min_size") for v in sizes],
                "max_size": None if self.max_size is None else _int_arg(self.max_size, "max_size"),
                "interpolation": _mode(self.interpolation, "interpolation"),
                "antialias": True if self.antialias is None else _bool_arg(self.antialias, "antialias"),
            },
        )


@dataclass(frozen=True)
class RandomIoUCrop(Transform):
    """torchvision v2 ``RandomIoUCrop(min_scale=0.3, max_scale=1.0, min_aspect_ratio=0.5, max_aspect_ratio=2.0,
    sampler_options=None, trials=40)`` (SSD's) for a detection source: a crop overlapping (IoU) at least one box
    whose centre it holds by a threshold picked from ``sampler_options`` (default ``[0.0, 0.1, 0.3, 0.5, 0.7,
    0.9, 1.0]``; ≥ 1 leaves the image as it is); boxes whose centre falls outside become zeros for a later
    ``SanitizeBoundingBoxes``. Its size varies: a later resize or crop, or ``Loader(pad_to=...)``, fixes it."""

    min_scale: float = _DEFAULTS["RandomIoUCrop.min_scale"]
    max_scale: float = _DEFAULTS["RandomIoUCrop.max_scale"]
    min_aspect_ratio: float = _DEFAULTS["RandomIoUCrop.min_aspect_ratio"]
    max_aspect_ratio: float = _DEFAULTS["RandomIoUCrop.max_aspect_ratio"]
    sampler_options: Any = None
    trials: int = _DEFAULTS["RandomIoUCrop.trials"]

    def _spec(self) -> tuple[Any, ...]:
        options = (
            [0.0, 0.1, 0.3, 0.5, 0.7, 0.9, 1.0] if self.sampler_options is None else self.sampler_options
        )
        return (
            "random_iou_crop",
            {
                "min_scale": _real(self.min_scale, "min_scale"),
                "max_scale": _real(self.max_scale, "max_scale"),
                "min_aspect_ratio": _real(self.min_aspect_ratio, "min_aspect_ratio"),
                "max_aspect_ratio": _real(self.max_aspect_ratio, "max_aspect_ratio"),
                "sampler_options": [_real(v, "sampler_options") for v in options],
                "trials": _int_arg(self.trials, "trials"),
            },
        )


@dataclass(frozen=True)
class Mosaic(Transform):
    """YOLO's ``Mosaic`` (ultralytics' four-image mosaic; not a torchvision op): the row's image and three
    partners drawn uniformly from the source, each resized so its long side is ``size``, around a centre drawn
    uniformly in ``[size/2, 3·size/2)`` of a ``2·size`` square canvas filled with ``fill``, cut at the canvas; with
    probability ``1 - p`` the row's image alone, resized the same way, centred on the canvas. It must be the first
    transform; the others run on the canvas (e.g. ``RandomAffine`` + ``CenterCrop(size)``). A detection source's
    boxes, labels and iscrowd are merged (clipped to the canvas, empty ones dropped); masks and keypoints are
    refused. Every draw comes from (seed, epoch, index); the worker making the row reads the partners."""

    size: int
    p: float = _DEFAULTS["Mosaic.p"]
    fill: Any = _DEFAULTS["Mosaic.fill"]

    def _spec(self) -> tuple[Any, ...]:
        return (
            "mosaic",
            {"size": _int_arg(self.size, "size"), "p": _real(self.p, "p"), "fill": _fill(self.fill)},
        )


@dataclass(frozen=True)
class SanitizeBoundingBoxes(Transform):
    """torchvision v2 ``SanitizeBoundingBoxes(min_size=1.0, min_area=1.0)`` for a detection source: drops each
    box narrower or shorter than ``min_size``, smaller than ``min_area`` or reaching outside the canvas, with its
    label, ``iscrowd``, mask and keypoints. Pixels are untouched."""

    min_size: float = _DEFAULTS["SanitizeBoundingBoxes.min_size"]
    min_area: float = _DEFAULTS["SanitizeBoundingBoxes.min_area"]

    def _spec(self) -> tuple[Any, ...]:
        return (
            "sanitize_bounding_boxes",
            {"min_size": _real(self.min_size, "min_size"), "min_area": _real(self.min_area, "min_area")},
        )


@dataclass(frozen=True)
class ClampBoundingBoxes(Transform):
    """torchvision v2 ``ClampBoundingBoxes()`` for a detection source: boxes clamped to the canvas."""

    def _spec(self) -> tuple[Any, ...]:
        return ("clamp_bounding_boxes", {})


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


def _unconverted(transforms: Any) -> Any:
    """A :class:`trdata.convert.Converted` (``from_torchvision``'s result) → its transforms, wherever a list of
    transforms goes (its ``normalize``/``dtype`` only the Loader's ``transforms=``/``views=`` can take: ConfigError
    elsewhere); anything else as it is."""
    if type(transforms).__name__ != "Converted" or type(transforms).__module__ != "trdata.convert":
        return transforms
    if transforms.normalize is not None or transforms.dtype is not None:
        raise ConfigError(
            "invalid transforms: this from_torchvision result holds ToTensor/ToDtype/Normalize, which only a "
            "Loader's transforms= or views= can take (its normalize and dtype)",
            parameter="transforms",
        )
    return list(transforms.transforms)


def _inner(transforms: Any, cls: str) -> tuple[tuple[Any, ...], ...]:
    """A container's inner specs (a list of trdata transforms or a ``from_torchvision`` result; the core checks
    the count and nesting)."""
    transforms = _unconverted(transforms)
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
class StepError(RuntimeError):
    """What a :class:`PythonStep`'s function raised, with its traceback (the sample's error)."""


#: Held while a step seeds the global generators and runs: the seeds a step draws from are its own for the
#: whole call, whatever the other workers do (torch releases the GIL inside its ops).
_STEP_LOCK = threading.Lock()


@contextlib.contextmanager
def _seeded_generators(seed: int, torch: Any) -> Iterator[None]:
    """Python's, numpy's and (with torch) torch's CPU generators seeded from the step's draw for the block, their
    states restored after it, so the program's own sequences continue as if no step had run (a draw the program
    makes on another thread *during* a step still shares them: the generators are global)."""
    saved = (
        random.getstate(),
        np.random.get_state(),
        None if torch is None else torch.default_generator.get_state(),
    )
    random.seed(seed)
    np.random.seed(seed % 2**32)
    if torch is not None:
        # the CPU generator only (what a step's CPU tensors draw from): torch.manual_seed also seeds every CUDA
        # device's, ~100× the cost per sample
        torch.default_generator.manual_seed(seed)
    try:
        yield
    finally:
        random.setstate(saved[0])
        np.random.set_state(saved[1])
        if torch is not None:
            torch.default_generator.set_state(saved[2])


class PythonStep(Transform):
    """A per-sample step written in Python, run at its position in the pipeline on the uint8 image. ``fn`` gets the
    image as torchvision would give it there: with ``pil=True`` a ``PIL.Image`` (mode ``RGB``, or ``L`` on a
    1-channel loader), which ``from_torchvision`` sets for an op placed before ``ToImage``/``PILToTensor``/
    ``ToTensor`` (torchvision's input there is the dataset's PIL image); otherwise a uint8 ``(C, H, W)`` torch tensor
    when torch is installed (a numpy ``(H, W, C)`` array without torch). It returns the image at the same size and
    channel count: a PIL image of the same mode, a uint8 ``(C, H, W)`` tensor or a uint8 ``(H, W, C)`` array (a
    step keeps the size). ``v2.Lambda``, a user's ``nn.Module`` or callable, and the torchvision ops trdata does not
    compile (``ElasticTransform``, ``JPEG``, …) become steps (``from_torchvision`` warns once which). The native ops
    before and after stay native.

    When the Loader is built it calls each step once on a probe image (``PROBE_HW``, the loader's channels, fixed
    content and seed): a step that returns another size, channel count, dtype or type, or that raises
    ``TypeError``/``AttributeError`` there (it cannot take the image it is given), is a ``ConfigError`` naming it.
    Any other exception is left to the samples (a step may refuse some images).

    Randomness: before each call, Python's ``random``, numpy's global generator and torch's CPU one are seeded from
    (seed, epoch, index, position), one step at a time (a lock), and restored after it, so a reproducible loader
    stays reproducible and the program's own sequences are left as they were. The
    GIL is held while ``fn`` runs (its torch ops may release it): steps cost Python time per sample.
    An exception in ``fn`` (or a wrong return) is the sample's error, under ``on_error``."""

    def __init__(self, fn: Any, name: str | None = None, *, pil: bool = False) -> None:
        if not callable(fn):
            raise ConfigError(f"invalid fn: {_shown(fn)} must be callable", parameter="fn")
        self.fn = fn
        self.name = name if name is not None else _step_name(fn)
        self.pil = _bool_arg(pil, "pil")
        # looked up once, here: importing torch (or Pillow) on several worker threads at once races (a
        # half-imported module)
        self._torch = _try_torch()
        self._pil_image = _pil_module() if self.pil else None
        self._step = _core.Step(self._call, self.name)
        _STEPS[id(self._step)] = self

    def __repr__(self) -> str:
        return f"PythonStep({self.name}{', pil=True' if self.pil else ''})"

    def _spec(self) -> tuple[Any, ...]:
        return ("python_step", {"step": self._step})

    def _call(self, pixels: np.ndarray, seed: int) -> np.ndarray:
        """The core's call: ``pixels`` uint8 (H, W, C), a fresh copy; returns the step's image as (H, W, C)."""
        try:
            out = self._run(pixels, seed)
        except Exception:
            raise StepError(traceback.format_exc()) from None
        return self._pixels_of(out, pixels.shape)

    def _run(self, pixels: np.ndarray, seed: int) -> Any:
        """``fn`` on ``pixels`` in the form it takes, under the seeded generators; what it returned."""
        with _STEP_LOCK, _seeded_generators(seed, self._torch):
            return self.fn(self._image_of(pixels))

    def _image_of(self, pixels: np.ndarray) -> Any:
        """(H, W, C) uint8 pixels as the step takes them: PIL image, (C, H, W) tensor or the array itself."""
        if self._pil_image is not None:
            return self._pil_image.fromarray(pixels[:, :, 0] if pixels.shape[2] == 1 else pixels)
        if self._torch is not None:
            return self._torch.from_numpy(pixels).permute(2, 0, 1)
        return pixels

    def _pixels_of(self, out: Any, shape: tuple[int, ...]) -> np.ndarray:
        """What the step returned as (H, W, C) uint8 pixels of ``shape`` (its input's), else StepError saying what it
        returned."""
        h, w, c = shape
        torch = self._torch
        if _is_pil(out):
            mode = "L" if c == 1 else "RGB"
            if out.mode != mode:
                raise StepError(
                    f"returned a PIL image of mode {out.mode} for one of mode {mode}: a step keeps the mode"
                )
            out = np.asarray(out)
        elif torch is not None and isinstance(out, torch.Tensor):
            if out.dtype != torch.uint8:
                raise StepError(f"returned a {out.dtype} tensor: a step returns uint8 images")
            out = out.detach().cpu()
            out = (out.permute(1, 2, 0) if out.ndim == 3 else out).contiguous().numpy()
        if not isinstance(out, np.ndarray) or out.dtype != np.uint8:
            what = f"a {out.dtype} array" if isinstance(out, np.ndarray) else type(out).__name__
            raise StepError(f"returned {what}, not a uint8 array")
        if out.ndim == 2:
            out = out[:, :, None]
        if out.shape != shape:
            raise StepError(
                f"returned an image of shape {out.shape} (H, W, C) for one of {shape}: a Python step must keep the "
                "size and the channels (trdata batches each sample at the size its native ops give it: resize and "
                "crop with native ops)"
            )
        return np.ascontiguousarray(out)

    def _probe(self, channels: int, where: str) -> None:
        """ConfigError unless ``fn`` takes the probe image and returns one of its size, channels and type (class
        docs)."""
        pixels = probe_image(channels)
        given = (
            "a PIL image"
            if self.pil
            else "a uint8 (C, H, W) tensor"
            if self._torch
            else "a uint8 (H, W, C) array"
        )
        try:
            out = self._run(pixels.copy(), PROBE_SEED)
        except (TypeError, AttributeError) as e:
            hint = (
                "; torchvision gives a PIL image to an op before ToImage/PILToTensor in a Compose, a tensor after "
                "(trdata.PythonStep(fn, pil=True) takes PIL images anywhere)"
                if self._torch is not None
                else ""
            )
            raise ConfigError(
                f"invalid transforms: the Python step {self.name} at {where} cannot take {given}: called on a probe "
                f"image when the Loader was built, it raised {type(e).__name__}: {e}{hint}",
                parameter="transforms",
            ) from e
        except Exception:
            return  # a step may refuse some images: the samples' errors, under on_error
        try:
            self._pixels_of(out, pixels.shape)
        except StepError as e:
            raise ConfigError(
                f"invalid transforms: the Python step {self.name} at {where}, called on a probe image of "
                f"{pixels.shape[0]}x{pixels.shape[1]} ({given}) when the Loader was built, {e}",
                parameter="transforms",
            ) from None


#: The probe image's (height, width): small, not square (a step that transposes is seen), not a common size.
PROBE_HW = (37, 53)
#: The seed of the generators while a step runs on the probe image.
PROBE_SEED = 0

#: Each live PythonStep by the id of its core Step (what the core's specs hold), for the probe.
_STEPS: weakref.WeakValueDictionary[int, PythonStep] = weakref.WeakValueDictionary()


def probe_image(channels: int) -> np.ndarray:
    """The probe image: uint8 (H, W, channels) of ``PROBE_HW``, a fixed pattern (gradients, no flat colour)."""
    y, x, c = np.ogrid[: PROBE_HW[0], : PROBE_HW[1], :channels]
    pattern: np.ndarray = ((y * 7 + x * 3 + c * 61) % 256).astype(np.uint8)
    return pattern


def probe_steps(specs: Any, channels: int, where: str = "transforms") -> None:
    """Call each Python step of the core's ``specs`` (of ``transforms`` or of ``views``, containers included) once on
    the probe image (``PythonStep._probe``): ConfigError naming the first whose answer trdata cannot batch."""
    for i, spec in enumerate(specs):
        for step in _steps_in(spec):
            owner = _STEPS.get(id(step))
            if owner is not None:
                owner._probe(channels, f"{where}[{i}]")


def _steps_in(spec: Any, depth: int = 0) -> Iterator[Any]:
    """The core Steps in one spec (a step, or a container's nested lists)."""
    if isinstance(spec, _core.Step):
        yield spec
    elif depth <= 64 and isinstance(spec, (list, tuple, dict)):
        for v in spec.values() if isinstance(spec, dict) else spec:
            yield from _steps_in(v, depth + 1)


def _is_pil(x: Any) -> bool:
    return type(x).__module__.startswith("PIL.") and hasattr(x, "mode") and hasattr(x, "size")


def _pil_module() -> Any:
    try:
        from PIL import Image
    except ImportError:
        raise ConfigError(
            "invalid pil: True needs Pillow (pip install pillow): the step takes PIL images", parameter="pil"
        ) from None
    return Image


def _try_torch() -> Any:
    try:
        import torch
    except ImportError:
        return None
    return torch


def _step_name(fn: Any) -> str:
    """How messages name a step: torchvision's class name, a function's qualified name, or the type's."""
    name = getattr(fn, "__name__", None)
    return name if isinstance(name, str) else type(fn).__name__


def steps_warning(steps: list[PythonStep]) -> None:
    """Warn once which ops of a pipeline run in Python."""
    if steps:
        # attributed to the user's line: the first frame outside this package
        package = os.path.dirname(__file__) + os.sep
        frame: types.FrameType | None = sys._getframe(1)
        level = 2
        while frame is not None and frame.f_code.co_filename.startswith(package):
            frame, level = frame.f_back, level + 1
        warnings.warn(
            f"{len(steps)} op(s) of this pipeline run in Python per sample (trdata.PythonStep): "
            f"{', '.join(s.name for s in steps)}; the GIL serializes them across workers",
            stacklevel=level,
        )


BUILTIN = (
    PythonStep,
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
    RandomPhotometricDistort,
    RandomZoomOut,
    ScaleJitter,
    RandomShortestSize,
    RandomResize,
    RandomIoUCrop,
    Mosaic,
    SanitizeBoundingBoxes,
    ClampBoundingBoxes,
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
    """The core's specs of ``transforms`` (a list or tuple of built-in transforms, or a ``from_torchvision``
    result without ``Normalize``/``ToTensor``/``ToDtype``), ConfigError naming ``transforms`` otherwise (a subclass of a built-in is accepted only if it adds no behaviour of its own:
    no ``_spec``, ``__call__`` or ``forward``)."""
    transforms = _unconverted(transforms)
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
    out, steps = [], []
    for t in transforms:
        if not isinstance(t, Transform) and callable(t) and type(t).__module__ != "trdata.batch_ops":
            t = PythonStep(t)  # a user's callable or nn.Module: run in Python at its position
            steps.append(t)
        if type(t).__module__ == "trdata.batch_ops":
            raise ConfigError(
                f"invalid transforms: {_shown(t)} is a batch op, not a per-sample transform: pass it as "
                "Loader(batch_ops=[...]), and pick among batch ops with trdata.BatchRandomChoice",
                parameter="transforms",
            )
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
    steps_warning(steps)
    return out


#: ImageNet mean and std in [0, 1] units: out = (x / 255 - mean) / std. ``Loader(normalize=...)`` also
#: takes them in 0–255 units (``((123.675, 116.28, 103.53), (58.395, 57.12, 57.375))``, the DALI/FFCV
#: habit): any std > 1 or every mean > 1 means 0–255 units; mixed units raise ConfigError (Loader docs).
IMAGENET = (IMAGENET_MEAN, IMAGENET_STD)


def __getattr__(name: str) -> Any:
    """``trdata.transforms.from_torchvision`` and ``Converted`` live in :mod:`trdata.convert` (which imports this
    module, so they are looked up there on first use rather than imported here)."""
    if name in ("from_torchvision", "Converted"):
        from . import convert

        return getattr(convert, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
