"""Batch ops: the ops that mix samples, run on each finished batch on its device (source → … → transfer →
export → **batch ops** → ``batch_transform`` → your training step).

``Loader(..., batch_ops=[...])`` runs :class:`MixUp`, :class:`CutMix`, a :class:`BatchRandomChoice` of them and
:class:`BatchRandomErasing` on each batch, with torchvision v2's arithmetic, on numpy arrays (CPU loaders) or
torch tensors (CUDA loaders, on the current stream). Each batch op's name says it works on a batch: MixUp and
CutMix have no per-sample twin, and the batch versions of per-sample ops carry a ``Batch`` prefix
(``BatchRandomChoice`` vs the per-sample transform ``trdata.RandomChoice``, ``BatchRandomErasing`` vs
``trdata.RandomErasing``). torchvision's own ``v2.MixUp``/``v2.CutMix`` (and a ``v2.RandomChoice`` of them) are
converted by the Loader (``trdata.convert.batch_ops``).

Their random values come from the core's Philox streams keyed by (seed, epoch, global batch number, op
position) (src/rng.rs), so a batch's mixing does not depend on worker count, prefetch or resume: reproducible
mode stays byte-identical. Values are checked by the core when the Loader is made (``alpha``, ``num_classes``,
BatchRandomChoice's ``p``, the dtype an op needs, the source's labels as ``one_hot`` class indices:
src/rng.rs); this module translates types."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from . import _core
from ._args import _opt_int, _pair, _real
from .batch import _is_torch
from .errors import ConfigError, _shown

__all__ = [
    "BatchOp",
    "BatchOpPlan",
    "BatchRandomChoice",
    "BatchRandomErasing",
    "CutMix",
    "DetectionMixUp",
    "MixUp",
]

_DEFAULTS: dict[str, Any] = dict(_core.DEFAULTS)


class BatchOp:
    """Base class of the batch ops (MixUp, CutMix, BatchRandomChoice, BatchRandomErasing): data the Loader applies
    to each batch on its device, not Python callables (use ``batch_transform=`` for your own code)."""

    def __post_init__(self) -> None:
        self._spec()  # the dataclass ops check their arguments at construction

    def _spec(self) -> tuple[Any, ...]:
        raise NotImplementedError


@dataclass(frozen=True)
class MixUp(BatchOp):
    """torchvision v2 ``MixUp(alpha=1.0, num_classes=None)``: one λ ~ Beta(α, α) per batch; images become
    ``x.roll(1, 0) * (1 - λ) + x * λ`` (row b mixed with row b-1, row 0 with the last), labels the same mix of
    one-hot float32 (N, num_classes) rows. ``num_classes=None``: the source's class count, or the width K of
    (N, K) float targets (mixed as they are). Needs float images: on ``dtype='uint8'`` the Loader raises
    ConfigError (torchvision's MixUp raises on uint8 too)."""

    alpha: float = _DEFAULTS["MixUp.alpha"]
    num_classes: int | None = None

    def _spec(self) -> tuple[Any, ...]:
        return (
            "mixup",
            {"alpha": _real(self.alpha, "alpha"), "num_classes": _opt_int(self.num_classes, "num_classes")},
        )


@dataclass(frozen=True)
class CutMix(BatchOp):
    """torchvision v2 ``CutMix(alpha=1.0, num_classes=None)``: λ ~ Beta(α, α); a box centred uniformly (x
    first) with half sizes ``int(0.5·√(1-λ)·W)``, ``int(0.5·√(1-λ)·H)``, clipped to the image, is copied from
    the batch rolled by one row; λ is corrected to the box's clipped area and mixes the one-hot labels as in
    MixUp. Copies pixels, so it also runs on uint8 images (as torchvision's does)."""

    alpha: float = _DEFAULTS["CutMix.alpha"]
    num_classes: int | None = None

    def _spec(self) -> tuple[Any, ...]:
        return (
            "cutmix",
            {"alpha": _real(self.alpha, "alpha"), "num_classes": _opt_int(self.num_classes, "num_classes")},
        )


@dataclass(frozen=True)
class DetectionMixUp(BatchOp):
    """YOLO's MixUp for detection (ultralytics' ``MixUp``; not torchvision's): with probability ``p`` per batch,
    one ``r ~ Beta(alpha, alpha)`` per batch (ultralytics draws Beta(32, 32)), row b becomes ``r·x[b] +
    (1 − r)·x[b−1]`` (the batch rolled by one, row 0 mixed with the last, torchvision's MixUp convention) and its
    targets the concatenation of row b's and row b−1's (boxes, labels, iscrowd, masks, keypoints; ``size`` the
    larger of the two). Labels (``batch.labels``) stay. uint8 images are mixed in float32 and truncated back to
    uint8 (ultralytics' ``astype``); float images stay float. A batch of one row (``batch_size=1``, or a last
    partial batch of one) has no partner and is left as it is. Needs a source with detection targets."""

    alpha: float = _DEFAULTS["DetectionMixUp.alpha"]
    p: float = _DEFAULTS["DetectionMixUp.p"]

    def _spec(self) -> tuple[Any, ...]:
        return ("detection_mixup", {"alpha": _real(self.alpha, "alpha"), "p": _real(self.p, "p")})


@dataclass(frozen=True)
class BatchRandomChoice(BatchOp):
    """torchvision v2 ``RandomChoice(transforms, p=None)`` over batch ops: each batch runs one of ``ops``,
    picked with probabilities ``p`` (weights, normalized by their sum; None: equal). The reference ImageNet
    recipe is ``BatchRandomChoice([MixUp(alpha=0.2), CutMix(alpha=1.0)])``. Named apart from the per-sample
    ``trdata.RandomChoice`` (a transform, which picks among transforms for each sample). If any op mixes labels, every batch's
    labels are soft (an op that leaves labels alone gives one-hot rows), so their shape never changes."""

    ops: Sequence[BatchOp]
    p: Sequence[float] | None = None

    def _spec(self) -> tuple[Any, ...]:
        ops = self.ops
        if isinstance(ops, (str, bytes)) or not isinstance(ops, Sequence):
            raise ConfigError(
                f"invalid batch_ops: BatchRandomChoice ops={_shown(ops)} must be a list",
                parameter="batch_ops",
            )
        for op in ops:
            if not isinstance(op, BatchOp) or isinstance(op, (BatchRandomChoice, DetectionMixUp)):
                raise ConfigError(
                    f"invalid batch_ops: {_shown(op)} must be a MixUp, CutMix or BatchRandomErasing "
                    "(BatchRandomChoice picks among batch ops; a nested RandomChoice of batch ops must be "
                    "flattened)",
                    parameter="batch_ops",
                )
        p = self.p
        if p is not None:
            if isinstance(p, (str, bytes)) or not isinstance(p, (Sequence, np.ndarray)):
                raise ConfigError(
                    f"invalid batch_ops: BatchRandomChoice p={_shown(p)} must be a list of numbers",
                    parameter="batch_ops",
                )
            p = [_real(v, "batch_ops") for v in p]
        return ("random_choice", {"ops": [op._spec() for op in ops], "p": p})


@dataclass(frozen=True)
class BatchRandomErasing(BatchOp):
    """RandomErasing applied per row of the finished batch, on its device. Each row draws exactly what
    torchvision v2's ``RandomErasing(p, scale, ratio, value)`` draws for one image (gate, up to 10 tries of
    area and log-uniform aspect, position), from the batch's stream in row order, and the box is set to
    ``value`` in the batch's own units (after ``normalize``, as torchvision places RandomErasing after
    Normalize) or, with ``value='random'``, to N(0, 1) noise. Differences from the per-sample
    ``trdata.RandomErasing``: that one runs on the uint8 image before normalize with ``value`` in pixel units
    and draws from the sample's stream (the same for any batch it lands in); this one runs on the batch's dtype
    (float, or uint8 with a numeric value, truncated as torch assigns) and its draws depend on the batch and
    row. ``value``: one number (any, NaN included, as torchvision) or ``'random'`` (float images only)."""

    p: float = 0.5
    scale: tuple[float, float] = (0.02, 0.33)
    ratio: tuple[float, float] = (0.3, 3.3)
    value: float | str = 0.0

    def _spec(self) -> tuple[Any, ...]:
        if isinstance(self.value, str):
            if self.value != "random":
                raise ConfigError(
                    f"invalid value: {_shown(self.value)} must be a number or 'random'", parameter="value"
                )
            value: Any = "random"
        else:
            value = _real(self.value, "value")
        return (
            "batch_random_erasing",
            {
                "p": _real(self.p, "p"),
                "scale": _pair(self.scale, "scale"),
                "ratio": _pair(self.ratio, "ratio"),
                "value": value,
            },
        )


def _batch_op_specs(batch_ops: Any) -> list[tuple[Any, ...]]:
    """``batch_ops=`` → the ops' spec tuples (a list of trdata batch ops; their values: the core's)."""
    if isinstance(batch_ops, (str, bytes)) or not isinstance(batch_ops, Sequence):
        raise ConfigError(
            f"invalid batch_ops: {_shown(batch_ops)} must be a list of batch ops", parameter="batch_ops"
        )
    for op in batch_ops:
        if not isinstance(op, BatchOp) or type(op)._spec is BatchOp._spec:
            raise ConfigError(
                f"invalid batch_ops: {_shown(op)} must be a trdata.MixUp, CutMix, BatchRandomChoice or BatchRandomErasing",
                parameter="batch_ops",
            )
    return [op._spec() for op in batch_ops]


class BatchOpPlan:
    """The checked batch ops of one Loader, applied to each batch (``apply``)."""

    def __init__(
        self,
        specs: list[tuple[Any, ...]],
        *,
        seed: int,
        layout: str,
        float_images: bool,
        classes: int | None,
        target_shape: tuple[int, ...] | None,
        views: int = 1,
        source: Any = None,
    ) -> None:
        """``source``: the loader's native source, whose int labels the core checks against the class count of
        each op that makes one-hot rows of them (None: float targets, nothing to check)."""
        _core.batch_ops_check_len(len(specs), views)
        self.specs = specs
        self.seed = seed
        self.nhwc = layout == "NHWC"
        self.classes = [
            _core.batch_op_check(
                s,
                i,
                float_images=float_images,
                classes=classes,
                target_shape=None if target_shape is None else list(target_shape),
                source=source,
            )
            for i, s in enumerate(specs)
        ]

    def apply(
        self, images: Any, labels: Any, epoch: int, batch: int, targets: list[dict[str, Any]] | None = None
    ) -> tuple[Any, Any, list[dict[str, Any]] | None]:
        """Run every op on (images, labels, detection targets) of global batch ``batch`` of ``epoch``; returns
        the new triple."""
        n = len(images)
        h, w = (images.shape[1], images.shape[2]) if self.nhwc else (images.shape[-2], images.shape[-1])
        for pos, (spec, k) in enumerate(zip(self.specs, self.classes)):
            draw = _core.batch_op_draw(
                spec, seed=self.seed, epoch=epoch, batch=batch, position=pos, rows=n, height=h, width=w
            )
            if spec[0] == "detection_mixup":
                images, targets = _detection_mixup(draw, images, targets)
                continue
            images, labels = self._run(spec, draw, images, labels, k)
        return images, labels, targets

    def _run(
        self, spec: tuple[Any, ...], draw: list[float], x: Any, y: Any, k: int | None
    ) -> tuple[Any, Any]:
        kind, params = spec
        if kind == "random_choice":
            j = int(draw[0])
            if k is not None and params["ops"][j][0] == "batch_random_erasing":
                y = _soft(y, 1.0, k)  # one-hot: the choice's labels are soft whichever op runs
            return self._run(params["ops"][j], draw[1:], x, y, k)
        if kind == "mixup":
            lam = draw[0]
            out = (
                _roll(x).mul_(1.0 - lam).add_(x.mul(lam))
                if _is_torch(x)
                else _roll(x) * (1.0 - lam) + x * lam
            )
            return out, _soft(y, lam, k)
        if kind == "cutmix":
            lam, y1, y2, x1, x2 = draw[0], int(draw[1]), int(draw[2]), int(draw[3]), int(draw[4])
            box: Any = (
                (slice(None), slice(y1, y2), slice(x1, x2))
                if self.nhwc
                else (Ellipsis, slice(y1, y2), slice(x1, x2))
            )
            out = x.clone() if _is_torch(x) else x.copy()
            out[box] = _roll(x[box])
            return out, _soft(y, lam, k)
        # batch_random_erasing: in place on this batch's own buffer
        value = params["value"]
        noise_seed = (int(draw[-2]) << 32) | int(draw[-1])
        rows = np.asarray(draw[:-2], dtype=np.int64).reshape(-1, 4)
        gen = _noise_generator(x, noise_seed) if value == "random" else None
        for r, (top, left, eh, ew) in enumerate(rows.tolist()):
            if eh == 0:
                continue
            box = (
                (r, slice(top, top + eh), slice(left, left + ew))
                if self.nhwc
                else (r, Ellipsis, slice(top, top + eh), slice(left, left + ew))
            )
            if gen is None:
                x[box] = value
            else:
                shape = tuple(x[box].shape)
                x[box] = _normal(x, gen, shape)
        return x, y


def _detection_mixup(draw: list[float], x: Any, targets: list[dict[str, Any]] | None) -> tuple[Any, Any]:
    """DetectionMixUp's images and targets for its draw ``[gate, r]`` (the class docs). A batch of one row has no
    partner: it is left as it is (rolled by one, the row would be mixed with itself and every box doubled)."""
    if not draw[0] or len(x) < 2:
        return x, targets
    r = draw[1]
    if _is_torch(x):
        mixed = _roll(x).float().mul_(1.0 - r).add_(x.float().mul_(r))
        out = mixed.to(x.dtype) if x.dtype.is_floating_point else mixed.trunc_().to(x.dtype)
    else:
        mixed = x.astype(np.float32) * np.float32(r) + _roll(x).astype(np.float32) * np.float32(1.0 - r)
        out = mixed.astype(x.dtype)
    if targets is None:
        return out, targets
    return out, [_cat_targets(t, targets[b - 1]) for b, t in enumerate(targets)]


#: The per-instance fields of a detection target (concatenated by DetectionMixUp); the others are per image.
_INSTANCE_FIELDS = ("boxes", "labels", "iscrowd", "masks", "keypoints")


def _cat_targets(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """Row ``a``'s target with row ``b``'s instances appended (trailing dimensions zero-padded to the larger:
    masks of rows of different sizes under ``pad_to``, keypoints of different counts); ``size`` the larger."""
    out = dict(a)
    for k in _INSTANCE_FIELDS:
        if k in a and k in b:
            out[k] = _cat_padded(a[k], b[k])
    if "size" in a and "size" in b:
        out["size"] = tuple(max(int(u), int(v)) for u, v in zip(a["size"], b["size"]))
    return out


def _cat_padded(u: Any, v: Any) -> Any:
    shape = [max(p, q) for p, q in zip(u.shape[1:], v.shape[1:])]
    if _is_torch(u):
        import torch

        def pad_t(t: Any) -> Any:
            z = t.new_zeros((t.shape[0], *shape))
            z[(slice(None), *[slice(0, s) for s in t.shape[1:]])] = t
            return z

        return torch.cat([pad_t(u), pad_t(v)])

    def pad_n(t: Any) -> Any:
        z = np.zeros((t.shape[0], *shape), t.dtype)
        z[(slice(None), *[slice(0, s) for s in t.shape[1:]])] = t
        return z

    return np.concatenate([pad_n(np.asarray(u)), pad_n(np.asarray(v))])


def _roll(x: Any) -> Any:
    return x.roll(1, 0) if _is_torch(x) else np.roll(x, 1, axis=0)


_OP_NAMES = {"mixup": "MixUp", "cutmix": "CutMix", "random_choice": "BatchRandomChoice"}


def _soft(y: Any, lam: float, k: int | None) -> Any:
    """torchvision's ``_mixup_label``: one-hot (N, k) float32 of int labels (float (N, K) targets as they are),
    then ``y.roll(1, 0) * (1 - lam) + y * lam``. O(N·k) memory (k up to 2**20 classes); the labels were checked
    against k by the core when the Loader was made (``rng::check_batch_op_input``)."""
    if k is None:
        return y
    if _is_torch(y):
        import torch

        if y.ndim == 1:
            y = torch.nn.functional.one_hot(y, num_classes=k)
        if not y.dtype.is_floating_point:
            y = y.float()
        return y.roll(1, 0).mul_(1.0 - lam).add_(y.mul(lam))
    if y.ndim == 1:
        hot = np.zeros((len(y), k), dtype=np.float32)
        hot[np.arange(len(y)), y] = 1.0
        y = hot
    y = y.astype(np.float32, copy=False)
    return np.roll(y, 1, axis=0) * np.float32(1.0 - lam) + y * np.float32(lam)


def _noise_generator(x: Any, seed: int) -> Any:
    if _is_torch(x):
        import torch

        g = torch.Generator(device=x.device)
        g.manual_seed(seed)
        return g
    return np.random.Generator(np.random.Philox(seed))


def _normal(x: Any, gen: Any, shape: tuple[int, ...]) -> Any:
    if _is_torch(x):
        import torch

        return torch.randn(shape, generator=gen, device=x.device, dtype=x.dtype)
    return gen.standard_normal(shape, dtype=np.float32)
