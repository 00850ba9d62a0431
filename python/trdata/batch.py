"""Batch ops and the batch_transform hook: the last stage of the pipeline, after the batch exists on its device
(source → … → transfer → export → **batch ops** → your training step).

``Loader(..., batch_ops=[...])`` runs MixUp, CutMix, a RandomChoice of them and BatchRandomErasing on each
batch, with torchvision v2's arithmetic, on numpy arrays (CPU loaders) or torch tensors (CUDA loaders, on the
current stream). Their random values come from the core's Philox streams keyed by (seed, epoch, global batch
number, op position) (src/rng.rs), so a batch's mixing does not depend on worker count, prefetch or resume:
reproducible mode stays byte-identical. ``batch_transform=fn`` runs ``fn(batch, generator)`` on each batch in a
prefetch thread (see ``BatchPrefetcher``).

Values are checked by the core when the Loader is made (``alpha``, ``num_classes``, RandomChoice's ``p``, the
dtype an op needs, the source's labels as ``one_hot`` class indices: src/rng.rs); this module translates types."""

from __future__ import annotations

import numbers
import threading
import warnings
import weakref
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, cast

import numpy as np

from . import _core
from .errors import ConfigError, _shown
from .transforms import _pair, _real

_DEFAULTS: dict[str, Any] = dict(_core.DEFAULTS)


def _opt_int(v: Any, name: str) -> int | None:
    """None or an int (not a bool) that the core's unsigned 64-bit binding takes; its range is the core's rule
    (a negative int would be an OverflowError of the binding, not a ConfigError naming ``name``)."""
    if v is None:
        return None
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, numbers.Integral):
        raise ConfigError(f"invalid {name}: {_shown(v)} must be an int or None", parameter=name)
    if not 0 <= int(v) < 2**64:
        raise ConfigError(f"invalid {name}: {_shown(v)} must be a positive int or None", parameter=name)
    return int(v)


class BatchOp:
    """Base class of the batch ops (MixUp, CutMix, RandomChoice, BatchRandomErasing): data the Loader applies
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
class RandomChoice(BatchOp):
    """torchvision v2 ``RandomChoice(transforms, p=None)`` over batch ops: each batch runs one of ``ops``,
    picked with probabilities ``p`` (weights, normalized by their sum; None: equal). The reference ImageNet
    recipe is ``RandomChoice([MixUp(alpha=0.2), CutMix(alpha=1.0)])``. If any op mixes labels, every batch's
    labels are soft (an op that leaves labels alone gives one-hot rows), so their shape never changes."""

    ops: Sequence[BatchOp]
    p: Sequence[float] | None = None

    def _spec(self) -> tuple[Any, ...]:
        ops = self.ops
        if isinstance(ops, (str, bytes)) or not isinstance(ops, Sequence):
            raise ConfigError(
                f"invalid batch_ops: RandomChoice ops={_shown(ops)} must be a list", parameter="batch_ops"
            )
        for op in ops:
            if not isinstance(op, BatchOp) or isinstance(op, RandomChoice):
                raise ConfigError(
                    f"invalid batch_ops: {_shown(op)} must be a MixUp, CutMix or BatchRandomErasing "
                    "(RandomChoice picks among batch ops, and a nested RandomChoice must be flattened)",
                    parameter="batch_ops",
                )
        p = self.p
        if p is not None:
            if isinstance(p, (str, bytes)) or not isinstance(p, (Sequence, np.ndarray)):
                raise ConfigError(
                    f"invalid batch_ops: RandomChoice p={_shown(p)} must be a list of numbers",
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
                f"invalid batch_ops: {_shown(op)} must be a trdata.MixUp, CutMix, RandomChoice or BatchRandomErasing",
                parameter="batch_ops",
            )
    return [op._spec() for op in batch_ops]


def _callable_name(fn: Any) -> str:
    """How a warning names the user's callable (``module.qualname``, else its repr)."""
    name = getattr(fn, "__qualname__", None)
    if not isinstance(name, str):
        return _shown(fn, 80)
    module = getattr(fn, "__module__", None)
    return f"{module}.{name}" if isinstance(module, str) else name


def _callable_or_none(fn: Any) -> Callable[..., Any] | None:
    """``batch_transform=``: None or a callable ``fn(batch, generator)``."""
    if fn is not None and not callable(fn):
        raise ConfigError(
            f"invalid batch_transform: {_shown(fn)} must be a callable fn(batch, generator) or None",
            parameter="batch_transform",
        )
    return None if fn is None else cast("Callable[..., Any]", fn)


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

    def apply(self, images: Any, labels: Any, epoch: int, batch: int) -> tuple[Any, Any]:
        """Run every op on (images, labels) of global batch ``batch`` of ``epoch``; returns the new pair."""
        n = len(images)
        h, w = (images.shape[1], images.shape[2]) if self.nhwc else (images.shape[-2], images.shape[-1])
        for pos, (spec, k) in enumerate(zip(self.specs, self.classes)):
            draw = _core.batch_op_draw(
                spec, seed=self.seed, epoch=epoch, batch=batch, position=pos, rows=n, height=h, width=w
            )
            images, labels = self._run(spec, draw, images, labels, k)
        return images, labels

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


def _is_torch(x: Any) -> bool:
    return not isinstance(x, np.ndarray)


def _roll(x: Any) -> Any:
    return x.roll(1, 0) if _is_torch(x) else np.roll(x, 1, axis=0)


_OP_NAMES = {"mixup": "MixUp", "cutmix": "CutMix", "random_choice": "RandomChoice"}


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


def batch_generator(seed: int, epoch: int, batch: int, images: Any) -> Any:
    """``batch_transform``'s generator for global batch ``batch`` of ``epoch``: a ``torch.Generator`` on the
    images' device for torch batches, else a ``numpy.random.Generator`` (Philox), seeded from the core's Philox
    stream of (seed, epoch, batch) — so a batch's transform draws the same values for any worker count, prefetch
    timing or resume."""
    s = _core.batch_seed(seed=seed, epoch=epoch, batch=batch)
    if _is_torch(images):
        import torch

        g = torch.Generator(device=images.device)
        g.manual_seed(s)
        return g
    return np.random.Generator(np.random.Philox(s))


class _PrefetchState:
    """What the prefetch thread and the consumer share (the thread never references the iterator object, so
    dropping the iterator stops the thread through its finalizer)."""

    def __init__(self, depth: int) -> None:
        self.cond = threading.Condition()
        self.items: deque[tuple[str, Any]] = deque()  # ("item", value) | ("error", exc) | ("end", None)
        self.depth = depth
        self.stopped = False
        self.reason: BaseException | None = None  # raised by next() once stopped (closed, superseded)

    def stop(self, reason: BaseException | None = None) -> None:
        with self.cond:
            self.stopped = True
            if reason is not None and self.reason is None:
                self.reason = reason
                self.items.clear()  # batches prepared ahead are not delivered after close/supersede: free them
            self.cond.notify_all()


#: How long ``BatchPrefetcher.stop()`` (Loader.close(), a new ``iter(loader)``, load_state_dict()) waits for the
#: prefetch thread to finish the ``batch_transform`` call in hand. A call that has not returned by then is
#: abandoned with a RuntimeWarning: an unbounded join made close() — and a ``with`` block left by Ctrl-C — hang
#: for ever on a transform that never returns.
STOP_WAIT_S = 5.0


class BatchPrefetcher(Iterator[Any]):
    """Runs ``source`` (the Loader's batch iterator, batch ops included) and ``work(item)`` (the batch_transform
    call, ``what`` in warnings) in one thread, at most ``depth`` finished items ahead of the consumer plus one in
    progress, and delivers the results in order. An exception in the thread is re-raised by ``next()`` at the
    item where it happened (and the iterator ends after it). ``stop()`` (called by Loader.close(), by a new
    ``iter(loader)`` and when this iterator is dropped) ends the thread: it finishes the item in hand and exits;
    it never waits on a full queue after that. Ctrl-C in the consumer interrupts its wait (condition waits are
    interruptible). The thread is a daemon thread, so one stuck in ``work`` never holds the interpreter's exit
    (``threading._shutdown`` joins only non-daemon threads), and ``stop()`` waits for it at most
    ``STOP_WAIT_S``."""

    def __init__(
        self, source: Iterator[Any], work: Callable[[Any], Any], depth: int = 1, what: str = "batch_transform"
    ) -> None:
        self._state = _PrefetchState(depth)
        self._thread = threading.Thread(
            target=_prefetch_run, args=(self._state, source, work), name="trdata-batch-transform", daemon=True
        )
        self._finalizer = weakref.finalize(self, self._state.stop)
        self._done = False
        self._what = what
        self._abandoned = False
        self._thread.start()

    def stop(self, reason: BaseException | None = None) -> None:
        """Stop the thread and wait for it, at most ``STOP_WAIT_S`` (idempotent); a later ``next()`` raises
        ``reason`` (if given). A thread still in ``work`` after the wait is abandoned with a RuntimeWarning: it
        ends by itself if the call ever returns (its result is dropped)."""
        self._state.stop(reason)
        if self._thread is threading.current_thread() or self._abandoned:
            return
        self._thread.join(STOP_WAIT_S)
        if self._thread.is_alive():
            self._abandoned = True
            warnings.warn(
                f"{self._what} has not returned {STOP_WAIT_S:g} s after the loader stopped its thread "
                f"{self._thread.name!r} (close(), a new iter() or load_state_dict()): the thread is abandoned. "
                "It is a daemon thread, so it does not keep the process from exiting; if the call returns, its "
                "batch is dropped",
                RuntimeWarning,
                stacklevel=3,
            )

    def __next__(self) -> Any:
        if self._done:
            raise StopIteration
        st = self._state
        with st.cond:
            while not st.items and not st.stopped:
                st.cond.wait()
            if st.reason is not None:  # closed or superseded: as the core's iterator would say
                raise st.reason
            if not st.items:  # stopped when dropped
                self._done = True
                raise StopIteration
            kind, value = st.items.popleft()
            st.cond.notify_all()
        if kind == "item":
            return wait_handoff(value)
        self._done = True
        if kind == "error":
            raise value
        raise StopIteration


def _prefetch_run(st: _PrefetchState, source: Iterator[Any], work: Callable[[Any], Any]) -> None:
    try:
        for item in source:
            out = work(item)
            with st.cond:
                while len(st.items) >= st.depth and not st.stopped:
                    st.cond.wait()
                if st.stopped:
                    return
                st.items.append(("item", out))
                st.cond.notify_all()
        entry: tuple[str, Any] = ("end", None)
    except BaseException as e:  # re-raised in the consumer at this position, whatever it is
        entry = ("error", e)
    finally:
        close = getattr(source, "close", None)
        if close is not None:
            close()  # the generator's epoch state (the native iteration) is released here, in its own thread
    with st.cond:
        if st.reason is None:
            st.items.append(entry)
        st.cond.notify_all()


def run_on_side_stream(fn: Callable[[Any, Any], Any], batch: Any, generator: Any) -> Any:
    """``fn(batch, generator)`` for a CUDA batch, in the prefetch thread: on a side stream that first waits for
    the thread's current stream (where the batch's tensors were made and its H2D copy is awaited), so the
    user's GPU work overlaps the training step. The returned batch carries an event of the side stream; the
    consumer's stream waits on it (``wait_handoff``) before the batch is handed over, and the result tensors
    are recorded on the consumer's stream so the caching allocator does not reuse them early."""
    import torch

    images = batch.images
    device = (images[0] if isinstance(images, tuple) else images).device  # views: all on one device
    side = torch.cuda.Stream(device=device)
    side.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(side):
        r = fn(batch, generator)
    out = batch if r is None else r
    _handoff[id(out)] = (side, side.record_event())
    return out


#: Side-stream events of batches prepared by the prefetch thread, keyed by id(batch) until handed over.
_handoff: dict[int, tuple[Any, Any]] = {}


def wait_handoff(out: Any) -> Any:
    """Make the consumer's current stream wait for the side stream that prepared ``out`` (a Batch, a tuple or
    a list of them) and record its tensors on that stream; returns ``out``."""
    items = out if isinstance(out, list) else [out]
    for item in items:
        entry = _handoff.pop(id(item), None)
        if entry is None:
            continue
        import torch

        side, event = entry
        if isinstance(item, (tuple, list)):
            tensors = list(item)
        else:
            images = getattr(item, "images", None)
            tensors = [*(images if isinstance(images, tuple) else (images,)), getattr(item, "labels", None)]
        for t in tensors:
            if isinstance(t, torch.Tensor) and t.is_cuda:
                stream = torch.cuda.current_stream(t.device)
                stream.wait_event(event)
                t.record_stream(stream)
    return out
