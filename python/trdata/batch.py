"""The batch a Loader yields (:class:`Batch`) and the ``batch_transform`` hook that runs on it.

``batch_transform=fn`` runs ``fn(batch, generator)`` on each batch in a prefetch thread (see
``BatchPrefetcher``), after the batch ops (``trdata.batch_ops``); on CUDA on a side stream the consumer's stream
waits for (``run_on_side_stream``/``wait_handoff``)."""

from __future__ import annotations

import threading
import warnings
import weakref
from collections import deque
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, Protocol, Union, cast

if TYPE_CHECKING:
    from typing_extensions import TypeAlias  # typing.TypeAlias is 3.10+; annotations are not evaluated

import numpy as np

from . import _core
from .errors import ConfigError, _shown

__all__ = ["Batch", "BatchArray", "BatchImages", "DeviceTensor"]


class DeviceTensor(Protocol):
    """A tensor on a CUDA device (on a CUDA loader, ``Batch.images``/``labels`` are ``torch.Tensor`` objects): a
    DLPack producer with a shape and a dtype."""

    def __dlpack__(self, *args: Any, **kwargs: Any) -> Any: ...
    def __dlpack_device__(self) -> tuple[int, int]: ...
    def __len__(self) -> int: ...
    @property
    def shape(self) -> Any: ...
    @property
    def dtype(self) -> Any: ...


#: ``Batch.images`` and ``Batch.labels``: numpy arrays on a CPU loader, device tensors on a CUDA one.
BatchArray: TypeAlias = Union[np.ndarray, DeviceTensor]
#: ``Batch.images``: one ``BatchArray``, or a tuple of them, one per view, for a ``Loader(views=[...])``.
BatchImages: TypeAlias = Union[BatchArray, "tuple[BatchArray, ...]"]


class Batch:
    """One batch. ``images``: (N, C, H, W) or (N, H, W, C) numpy view on a CPU loader, ``torch.Tensor`` on a
    CUDA one (see ``BatchArray``), C = ``Loader.channels`` (1 or 3); with ``Loader(views=[...])`` a tuple of
    them, one per view (each its own H, W), all sharing this batch's one buffer; ``labels``: the rows' targets, numpy or
    ``torch.Tensor`` likewise: int64 (N,) class indices, or float32 (N, *S) = ``source.targets[indices]`` for a
    source with float targets; ``indices``: int64 (N,) numpy; ``extras``: the source's extra fields of these rows
    (``extras=`` of FileList/Bytes/Arrays, a dataset's third item): name → a list in row order, or one stacked
    numpy array when every value is an array of one shape and dtype; ``{}`` without extras; always on the host;
    ``valid``: the first ``valid`` rows are real samples of this epoch, later rows repeat real ones
    (``last_batch='pad'``) or fill a rank up to equal length. Unpacks as ``images, labels = batch``.

    bfloat16 images are ``ml_dtypes.bfloat16`` arrays when ml_dtypes is installed, else their uint16 bits;
    through DLPack (``torch.from_dlpack(batch)``, ``batch.torch()``) they arrive as real bfloat16.

    A detection batch of a ``Loader(pad_to=...)`` holds images of different sizes, each at the top left of a
    padded slot (``padded`` is True): ``image_list()`` gives them at their own sizes (what torchvision's detection
    models take), ``padded_images()`` the padded slots with ``image_sizes``. Such a batch is not one tensor of
    images: ``torch.from_dlpack(batch)``, ``batch.torch()`` and ``images, labels = batch`` raise ``BufferError``
    naming both (the padded canvas given to a detector as if it were the images shrinks every object).

    A Batch is a DLPack producer of its images (``__dlpack__``/``__dlpack_device__``), zero-copy: every
    consumer tensor keeps the batch buffer alive by itself, so it stays valid after the Batch is dropped
    and the loader moved on; the buffer returns to the loader when the last view or tensor of it dies."""

    __slots__ = (
        "_lease",
        "_target_columns",
        "epoch",
        "extras",
        "images",
        "indices",
        "labels",
        "padded",
        "targets",
        "valid",
    )

    images: BatchImages
    labels: BatchArray
    indices: np.ndarray
    valid: int
    epoch: int
    extras: dict[str, Any]
    #: Detection/segmentation targets (a source with them, such as ``CocoDetection``): one dict per row —
    #: ``boxes`` (K, 4) float32 XYXY in output pixels, ``labels`` (K,) int64, ``iscrowd``, ``image_id``,
    #: ``orig_size`` (h, w) of the stored image, ``size`` (h, w) of the image in the batch (less than the
    #: batch's H, W with ``Loader(pad_to=...)``: the image sits at the top left, zeros elsewhere) and, when asked for, ``masks`` (K, H, W) uint8 and ``keypoints`` (K, P, 3) — as torchvision's
    #: detection references take them (torch tensors when torch is installed, on the batch's device); None otherwise.
    targets: list[dict[str, Any]] | None
    #: True for a batch of targets from a ``Loader(pad_to=...)``: its images have their own sizes, each at the top
    #: left of its slot (``image_list()``, ``padded_images()``); it is then no DLPack producer nor a pair.
    padded: bool

    def __init__(
        self,
        images: BatchImages,
        labels: BatchArray,
        indices: np.ndarray,
        valid: int,
        epoch: int,
        lease: _core.BatchLeaseHandle | _core.DeviceTensorHandle | None = None,
        extras: dict[str, Any] | None = None,
        targets: list[dict[str, Any]] | None = None,
        padded: bool = False,
    ) -> None:
        self.images = images
        self.extras = {} if extras is None else extras
        self.targets = targets
        #: The core's target columns (``trdata._target_batch``), when the loader made this batch.
        self._target_columns: dict[str, Any] | None = None
        self.padded = padded and targets is not None
        self.labels = labels
        self.indices = indices
        self.valid = valid
        self.epoch = epoch
        # The native lease behind `images` (found through the view's base when not given), or None for a
        # Batch built from plain arrays, which then exports `images` through numpy's own DLPack.
        if lease is None and isinstance(images, np.ndarray):
            lease = _lease_of(images)
        elif lease is None and isinstance(images, tuple) and images and isinstance(images[0], np.ndarray):
            lease = _lease_of(images[0])  # views of one batch share one lease
        self._lease = lease

    def __iter__(self) -> Iterator[BatchImages]:
        self._check_unpadded("images, labels = batch")
        yield self.images
        yield self.labels

    def __len__(self) -> int:
        return len(self.labels)

    @property
    def image_sizes(self) -> np.ndarray | None:
        """Each row's image size in the batch, int64 (B, 2) as (height, width): with ``Loader(pad_to=...)`` the
        part of each padded slot that holds the image (rows ``[:h]``, columns ``[:w]``). From the targets, so for a
        source with detection targets; None otherwise."""
        if self.targets is None:
            return None
        return np.array([t["size"] for t in self.targets], np.int64).reshape(-1, 2)

    def image_list(self) -> list[Any]:
        """Each row's image at its own size, ``(C, h, w)``: zero-copy views of the batch's buffer (they keep it
        alive), as torchvision's detection models take them (``model(batch.image_list(), batch.targets)``). torch
        tensors on the batch's device when torch is installed (bfloat16 as ``torch.bfloat16``), numpy arrays
        otherwise; with ``layout="NHWC"`` each is a permuted (non-contiguous) view. With ``Loader(pad_to=...)`` row
        ``i`` is ``padded_images()[i, :, :h, :w]`` with ``(h, w) = image_sizes[i]``; a batch without targets has
        its rows whole. BufferError for a multi-view batch (one list per view: slice ``batch.images[k]``)."""
        images = self._images_array()
        nchw = self._nchw()
        sizes = self.image_sizes
        if sizes is None:  # every row whole
            canvas = tuple(images.shape[2:4]) if nchw else tuple(images.shape[1:3])
            sizes = np.array([canvas] * len(images), np.int64).reshape(-1, 2)
        out = []
        for i, (h, w) in enumerate(sizes.tolist()):
            if nchw:
                out.append(images[i, :, :h, :w])
            else:  # NHWC: the same pixels, channels first
                row = images[i, :h, :w, :]
                out.append(row.permute(2, 0, 1) if _is_torch(row) else row.transpose(2, 0, 1))
        return out

    def padded_images(self) -> Any:
        """The images as one array with each row's padded slot: (N, C, H, W) or (N, H, W, C), zeros (after
        normalization) right of and below each image (``image_sizes`` says where it ends) — what
        ``torch.from_dlpack(batch)`` gives for a batch that is not ``padded``. A torch tensor when torch is installed
        (zero-copy; bfloat16 as ``torch.bfloat16``), the numpy array otherwise."""
        return self._images_array()

    def _images_array(self) -> Any:
        """``images`` as torch (when installed: the lease's own export, so bfloat16 is real) or numpy."""
        images = self._check_single_view()
        if _is_torch(images):
            return images
        try:
            import torch  # noqa: F401
        except ImportError:
            return images
        return _torch_of(images)

    def _nchw(self) -> bool:
        """Whether the images are (N, C, H, W): C is the dimension of 1 or 3 (trdata's channel counts); when both
        dims 1 and 3 could be it (a canvas side of 1 or 3), the one the rows' sizes fit, NCHW if both do."""
        shape = tuple(self._check_single_view().shape)
        first, last = shape[1] in (1, 3), shape[3] in (1, 3)
        if first != last:
            return first
        sizes = self.image_sizes
        if sizes is None or not len(sizes):
            return True
        h, w = int(sizes[:, 0].max()), int(sizes[:, 1].max())
        return bool(h <= shape[2] and w <= shape[3])

    def _check_unpadded(self, what: str) -> None:
        """BufferError for a ``padded`` batch: ``what`` would hand over the padded canvas as the images."""
        if self.padded:
            raise BufferError(
                f"{what}: this detection batch's images have their own sizes (Loader(pad_to=...)), each at the top "
                "left of a padded slot; use batch.image_list() (each image at its size, as torchvision's detection "
                "models take them) or, for the padded slots, batch.padded_images() with batch.image_sizes"
            )

    def padded_targets(self) -> dict[str, Any]:
        """``targets`` in fixed shapes, for models that want them: ``boxes`` (B, Kmax, 4) float32 (zeros past a
        row's count), ``labels`` (B, Kmax) int64 (-1 past the count), ``counts`` (B,) int64 — numpy arrays, or
        torch tensors on the targets' device when they are tensors."""
        if self.targets is None:
            raise ValueError("this batch has no detection targets (its source has none)")
        if self.targets and "boxes" not in self.targets[0]:
            raise ValueError(
                "this batch's targets have no boxes (a label-map source): stack its targets' 'mask'"
            )
        from ._target_batch import padded

        return padded(getattr(self, "_target_columns", None), self.targets)

    def __repr__(self) -> str:
        if isinstance(self.images, tuple):
            shown = "(" + ", ".join(f"{v.shape}" for v in self.images) + ")"
            dtype = self.images[0].dtype if self.images else None
            return f"Batch(images={shown} {dtype}, valid={self.valid}, epoch={self.epoch})"
        return (
            f"Batch(images={self.images.shape} {self.images.dtype}, valid={self.valid}, epoch={self.epoch})"
        )

    def __dlpack__(
        self,
        *,
        stream: Any = None,
        max_version: tuple[int, int] | None = None,
        dl_device: tuple[int, int] | None = None,
        copy: bool | None = None,
    ) -> Any:
        """DLPack capsule of ``images`` (array-API semantics). A multi-view batch has one array per view:
        export ``batch.images[k]`` instead (BufferError here), and so does a ``padded`` batch (``image_list()``)."""
        self._check_unpadded("torch.from_dlpack(batch)")
        images: Any = self._check_single_view()  # numpy's or a device tensor's own __dlpack__ below
        if self._lease is not None:
            return self._lease.__dlpack__(
                stream=stream, max_version=max_version, dl_device=dl_device, copy=copy
            )
        kwargs = {
            k: v
            for k, v in (("max_version", max_version), ("dl_device", dl_device), ("copy", copy))
            if v is not None
        }
        return images.__dlpack__(stream=stream, **kwargs)

    def __dlpack_device__(self) -> tuple[int, int]:
        """(device_type, device_id) of ``images``; (1, 0) is the CPU. BufferError for a multi-view or a ``padded``
        batch."""
        self._check_unpadded("torch.from_dlpack(batch)")
        images = self._check_single_view()
        if self._lease is not None:
            return self._lease.__dlpack_device__()
        return images.__dlpack_device__()

    def _check_single_view(self) -> BatchArray:
        """``images`` of a single-pipeline batch; BufferError for a multi-view one (no one tensor to export)."""
        if isinstance(self.images, tuple):
            raise BufferError(
                f"a multi-view Batch holds {len(self.images)} image arrays (Loader(views=...)): export one view, "
                "e.g. torch.from_dlpack(batch.images[k]), or use batch.torch()"
            )
        return self.images

    def torch(self) -> tuple[Any, Any]:
        """(images, labels) as torch tensors sharing this batch's memory, through DLPack (bfloat16 arrives
        as ``torch.bfloat16``); a multi-view batch's images are a tuple of tensors, one per view. The tensors
        stay valid after the Batch is gone. BufferError for a ``padded`` batch (``image_list()``)."""
        self._check_unpadded("batch.torch()")
        import torch

        if isinstance(self.images, tuple):
            return tuple(_torch_of(v) for v in self.images), torch.from_dlpack(self.labels)
        return torch.from_dlpack(self), torch.from_dlpack(self.labels)


def _torch_of(images: Any) -> Any:
    """One view's images as a torch tensor through DLPack: its native lease when it views one whole (so
    bfloat16 arrives as ``torch.bfloat16``), else the array's own export."""
    import torch

    lease = _lease_of(images) if isinstance(images, np.ndarray) else None
    return torch.from_dlpack(images if lease is None else lease)


def _lease_of(images: np.ndarray) -> _core.BatchLeaseHandle | None:
    """The BatchLeaseHandle whose memory ``images`` views whole (same data pointer and shape), else None."""
    base = images.base
    while isinstance(base, np.ndarray):
        base = base.base
    if (
        isinstance(base, _core.BatchLeaseHandle)
        and tuple(base.shape) == images.shape
        and images.__array_interface__["data"][0] == base.__array_interface__["data"][0]
    ):
        return base
    return None


def _is_torch(x: Any) -> bool:
    return not isinstance(x, np.ndarray)


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
