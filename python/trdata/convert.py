"""torchvision and timm pipelines → trdata's: :func:`from_torchvision` (a Compose, an op or a list of them →
:class:`Converted`, the trdata transforms plus the Loader's ``normalize``/``dtype``) and :func:`batch_ops`
(torchvision's ``v2.MixUp``/``v2.CutMix``, or a ``v2.RandomChoice`` of them → trdata's batch ops).

The Loader calls both: ``Loader(transforms=compose)``, ``views=[compose, ...]`` and ``batch_ops=[v2.MixUp(...)]``
take torchvision's objects as they are; a :class:`Converted` is accepted wherever a list of transforms is
(``transforms=``, ``views=``, the containers ``RandomApply``/``RandomChoice``/``RandomOrder``,
``trdata.transforms.specs``). ``trdata.from_torchvision`` and ``trdata.transforms.from_torchvision`` are this
module's function.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from ._args import _is_int, _mode, _seq
from .batch_ops import BatchOp, BatchRandomChoice, CutMix, MixUp
from .errors import ConfigError, _shown
from .transforms import (
    TIMM_RAND_INCREASING_TRANSFORMS,
    TIMM_RAND_TRANSFORMS,
    AugMix,
    AutoAugment,
    CenterCrop,
    ClampBoundingBoxes,
    ColorJitter,
    GaussianBlur,
    GaussianNoise,
    Grayscale,
    Pad,
    PythonStep,
    RandAugment,
    RandomAdjustSharpness,
    RandomAffine,
    RandomApply,
    RandomAutocontrast,
    RandomChannelPermutation,
    RandomChoice,
    RandomCrop,
    RandomEqualize,
    RandomErasing,
    RandomGrayscale,
    RandomHorizontalFlip,
    RandomInvert,
    RandomIoUCrop,
    RandomOrder,
    RandomPerspective,
    RandomPhotometricDistort,
    RandomPosterize,
    RandomResize,
    RandomResizedCrop,
    RandomRotation,
    RandomShortestSize,
    RandomSolarize,
    RandomVerticalFlip,
    RandomZoomOut,
    Resize,
    SanitizeBoundingBoxes,
    ScaleJitter,
    TimmAugMix,
    TimmAutoAugment,
    TimmCenterCropOrPad,
    TimmRandAugment,
    TimmRandomErasing,
    TimmResizeKeepRatio,
    Transform,
    TrivialAugmentWide,
    steps_warning,
)

__all__ = ["Converted", "batch_ops", "dtype_name", "from_torchvision", "is_torchvision"]


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
    """A dtype *object* → its name: ``torch.float16`` → ``"float16"``, ``np.dtype("float32")`` and the scalar type
    ``np.float32`` → ``"float32"`` (``torch.bfloat16``, ``torch.half`` too). Anything else is returned as it is (a string, or a value the core's
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
    if isinstance(dtype, type) and issubclass(dtype, np.generic):  # np.float32 as numpy's own APIs take it
        return np.dtype(dtype).name
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


#: The ops that turn torchvision's (and timm's) PIL image into a tensor or array: a Python step before the first of
#: them gets a PIL image, as torchvision gives it one there.
_TO_TENSOR = ("ToImage", "PILToTensor", "ToTensor", "MaybeToTensor", "MaybePILToTensor", "ToNumpy")


def from_torchvision(t: Any, _depth: int = 0, _pil: bool | None = None) -> Converted:
    """A torchvision.transforms.v2 (or classic) op, Compose or list of them → the trdata pipeline (trdata ops are
    passed through). Trailing ``ToTensor``/``ToImage``/``PILToTensor``/``ToDtype(float32, scale=True)``/
    ``ConvertImageDtype(float)`` become ``dtype='float32'`` and a trailing ``Normalize`` the Loader's
    ``normalize``; a ``RandomErasing`` after ``Normalize`` has its value converted to pixel units. timm's
    pipelines (``timm.data.create_transform``) convert as well: ``RandomResizedCropAndInterpolation`` (any
    interpolation, 'random' included), ``CenterCropOrPad`` with zero fill, ``MaybeToTensor``/
    ``MaybePILToTensor``/``ToNumpy``, timm's RandAugment/AutoAugment/AugMix (:class:`TimmRandAugment`,
    :class:`TimmAutoAugment`, :class:`TimmAugMix`) and its ``RandomErasing`` (:class:`TimmRandomErasing`, which
    must follow ``Normalize``; README lists what round-trips). An op trdata does not compile (``v2.Lambda``, a
    user's callable) becomes a :class:`PythonStep` that takes what torchvision would give it: a PIL image before the
    pipeline's ``ToImage``/``PILToTensor``/``ToTensor``, a tensor after it or in a pipeline without one. Anything
    else → ConfigError naming the first op trdata cannot run. A :class:`Converted` is returned as it is."""
    if isinstance(t, Converted):
        return t
    if _depth > _MAX_CONVERT_DEPTH:
        raise _too_deep(t)
    ops = _flatten(t)
    # where torchvision's image becomes a tensor (a container's ops take their position's: `_pil`)
    to_tensor = next(
        (k for k, op in enumerate(ops) if _is_torchvision(op) and type(op).__name__ in _TO_TENSOR), -1
    )
    steps: list[PythonStep] = []
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
            if not callable(op):
                raise ConfigError(
                    f"invalid transforms: {_shown(op)} at transforms[{pos}] is neither a trdata nor a torchvision "
                    "transform, nor a callable",
                    parameter="transforms",
                )
            # a user's callable or nn.Module
            out.append(_step(op, pos, normalize, steps, pos < to_tensor if _pil is None else _pil))
            continue
        name = type(op).__name__
        if name in _CONTAINERS:
            if normalize is not None:
                raise _refuse(op, pos, "it comes after Normalize (trdata normalizes in the final write)")
            out.append(_convert_container(op, name, pos, _depth, pos < to_tensor if _pil is None else _pil))
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
        if name in _BATCH_OPS:
            raise _refuse(
                op,
                pos,
                "it mixes the samples of a batch: pass it as Loader(batch_ops=[...]), which takes it as it is",
            )
        if name in ("ToTensor", "ToImage", "PILToTensor", "ToPureTensor"):
            dtype = "float32" if name == "ToTensor" else "uint8" if name != "ToPureTensor" else dtype
            dtype_op = None
            continue
        if name == "ConvertBoundingBoxFormat":
            # a detection source's boxes are XYXY already (torchvision's references convert to XYXY here)
            if str(getattr(op.format, "name", op.format)).upper() == "XYXY":
                continue
            raise _refuse(op, pos, "a detection source's boxes are XYXY: only format=XYXY is supported")
        if name in ("ToDtype", "ConvertImageDtype"):
            dt = getattr(op, "dtype", None)
            if isinstance(
                dt, dict
            ):  # v2's per-type dtypes: the image's entry (the references key it by type)
                dt = next(
                    (v for k, v in dt.items() if getattr(k, "__name__", None) in ("Image", "Tensor")),
                    dt.get("others"),
                )
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
            # v2.Lambda, ElasticTransform, JPEG, …: run in Python
            out.append(_step(op, pos, normalize, steps, pos < to_tensor if _pil is None else _pil))
        except Exception as e:  # a look-alike whose attributes raise: still a configuration error, named
            raise _refuse(op, pos, f"reading its parameters raised {type(e).__name__}: {e}") from e
    if _depth == 0:
        steps_warning(steps)
    return Converted(out, normalize, dtype, dtype_op)


def _step(op: Any, pos: int, normalize: Any, steps: list[PythonStep], pil: bool) -> PythonStep:
    """An op trdata does not compile, as a :class:`PythonStep` (on the uint8 image: refused after Normalize),
    taking a PIL image when ``pil`` (it comes before the pipeline's ToImage/PILToTensor/ToTensor)."""
    if not callable(op):
        raise _refuse(op, pos, "trdata has no such op, and it is not callable (to run in Python)")
    if normalize is not None:
        raise _refuse(op, pos, "it runs in Python on the uint8 image, and comes after Normalize")
    step = op if isinstance(op, PythonStep) else PythonStep(op, pil=pil)
    steps.append(step)
    return step


#: A ``ToDtype``/``ConvertImageDtype`` float type (``scale=True``) → the Loader's dtype of the same name.
_FLOAT_DTYPES = ("torch.float32", "torch.float16", "torch.bfloat16")

#: torchvision's containers (v2 and classic have the same names and attributes).
_CONTAINERS = ("RandomApply", "RandomChoice", "RandomOrder")


def _convert_container(op: Any, name: str, pos: int, depth: int = 0, pil: bool = False) -> Transform:
    """A torchvision RandomApply/RandomChoice/RandomOrder (v2 or classic) → trdata's, its inner list converted
    by :func:`from_torchvision` (a Compose inside is flattened; its steps take PIL images when ``pil``); an inner
    ToTensor/Normalize is refused."""
    inner = from_torchvision(list(op.transforms), depth + 1, pil)
    if inner.normalize is not None or inner.dtype is not None:
        raise _refuse(op, pos, "it holds ToTensor/ToDtype/Normalize (only the pipeline's end may convert)")
    if name == "RandomApply":
        return RandomApply(inner.transforms, op.p)
    if name == "RandomChoice":
        return RandomChoice(inner.transforms, None if op.p is None else list(op.p))
    return RandomOrder(inner.transforms)


def _per_type_fill(fill: Any, key: str) -> Any:
    """torchvision v2's ``_get_fill`` of a per-type ``fill`` dict for the type named ``key`` ("Image": a PIL or
    ``tv_tensors.Image``, "Mask"): the type's entry, else ``"others"``, else ``None`` (zeros). A
    ``defaultdict``'s factory is never asked, as torchvision never asks it (``in`` does not call it): the
    references' ``defaultdict(lambda: mean, {Mask: 0})`` pads the image with zeros in torchvision too."""
    for k, v in fill.items():
        if getattr(k, "__name__", None) == key:
            return v
    return fill.get("others")


def _image_fill(fill: Any) -> Any:
    """An op's ``fill`` for the image: a plain value as it is; a per-type dict (torchvision v2's
    ``{tv_tensors.Mask: 0, "others": 0}``) by torchvision's rule (:func:`_per_type_fill`). Masks keep trdata's
    fills, the references' values: 0 for instance masks, 255 (``ignore_index``) for label maps; a dict that asks
    a mask for anything else is refused, naming ``fill``."""
    if not isinstance(fill, dict):
        return fill
    mask = _per_type_fill(fill, "Mask")
    if mask is not None and (not isinstance(mask, (int, float)) or float(mask) not in (0.0, 255.0)):
        raise ConfigError(
            f"invalid fill: the mask entry {_shown(mask)} must be 0 or 255 (trdata fills instance masks with 0 "
            "and label maps with 255, as torchvision's references ask)",
            parameter="fill",
        )
    return _per_type_fill(fill, "Image")


def _convert(op: Any, name: str, normalize: tuple[tuple[float, ...], tuple[float, ...]] | None) -> Transform:
    v2 = ".v2." in type(op).__module__
    if isinstance(getattr(op, "fill", None), dict):
        import copy

        op = copy.copy(op)
        op.fill = _image_fill(op.fill)
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
    if name == "RandomPhotometricDistort":
        return RandomPhotometricDistort(
            tuple(op.brightness), tuple(op.contrast), tuple(op.saturation), tuple(op.hue), op.p
        )
    if name == "RandomZoomOut":
        return RandomZoomOut(op.fill, tuple(op.side_range), op.p)
    if name == "ScaleJitter":
        mode = _mode(op.interpolation, "interpolation")
        return ScaleJitter(tuple(op.target_size), tuple(op.scale_range), mode, op.antialias)
    if name == "RandomShortestSize":
        mode = _mode(op.interpolation, "interpolation")
        return RandomShortestSize(tuple(op.min_size), op.max_size, mode, op.antialias)
    if name == "RandomResize":
        mode = _mode(op.interpolation, "interpolation")
        return RandomResize(op.min_size, op.max_size, mode, op.antialias)
    if name == "RandomIoUCrop":
        return RandomIoUCrop(
            op.min_scale, op.max_scale, op.min_aspect_ratio, op.max_aspect_ratio, list(op.options), op.trials
        )
    if name == "SanitizeBoundingBoxes":
        return SanitizeBoundingBoxes(op.min_size, op.min_area)
    if name == "ClampBoundingBoxes":
        return ClampBoundingBoxes()
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


#: torchvision's batch ops (v2 only): they mix the samples of a batch, so they go in ``batch_ops=``.
_BATCH_OPS = ("MixUp", "CutMix")


def _is_torchvision_batch_op(op: Any) -> bool:
    return type(op).__name__ in _BATCH_OPS and type(op).__module__.startswith("torchvision.transforms")


def _convert_batch_op(op: Any, where: str) -> BatchOp:
    """One torchvision batch op (or a ``v2.RandomChoice`` of them) → trdata's, with the same ``alpha``,
    ``num_classes`` and, for RandomChoice, ``p`` (torchvision normalizes it; trdata's BatchRandomChoice does the
    same). ``labels_getter`` only says where torchvision finds the labels in its input: a trdata batch holds them
    (``Batch.labels``), so it has no counterpart."""
    name = type(op).__name__
    if _is_torchvision_batch_op(op):
        return (MixUp if name == "MixUp" else CutMix)(alpha=float(op.alpha), num_classes=op.num_classes)
    if name == "RandomChoice" and type(op).__module__.startswith("torchvision.transforms"):
        inner = list(op.transforms)
        if inner and all(_is_torchvision_batch_op(t) or isinstance(t, BatchOp) for t in inner):
            ops = [t if isinstance(t, BatchOp) else _convert_batch_op(t, where) for t in inner]
            return BatchRandomChoice(ops, None if op.p is None else [float(v) for v in op.p])
    raise ConfigError(
        f"invalid batch_ops: {type(op).__module__}.{name} at {where} cannot run in trdata: torchvision's batch ops "
        "trdata runs are MixUp, CutMix and a RandomChoice of them",
        parameter="batch_ops",
    )


def batch_ops(ops: Any) -> Any:
    """``Loader(batch_ops=...)``: torchvision's ``v2.MixUp``/``v2.CutMix`` (or a ``v2.RandomChoice`` of them) in the
    list → trdata's :class:`~trdata.batch_ops.MixUp`/:class:`~trdata.batch_ops.CutMix`/
    :class:`~trdata.batch_ops.BatchRandomChoice` with the same arguments (the same arithmetic: both follow
    torchvision v2's); trdata ops and anything else are left for the Loader's own check. Anything that is not a
    list is returned as it is."""
    if isinstance(ops, (str, bytes)) or not isinstance(ops, (list, tuple)):
        return ops
    out = [
        _convert_batch_op(op, f"batch_ops[{i}]") if type(op).__module__.startswith("torchvision.") else op
        for i, op in enumerate(ops)
    ]
    return type(ops)(out) if isinstance(ops, tuple) else out
