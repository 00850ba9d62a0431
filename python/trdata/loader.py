"""The public Loader: configuration surface over the Rust core (epoch plan, pinned worker pool, fused
decode/augment, station). Batches are zero-copy numpy views of the core's batch buffers; a buffer returns to
the core when the last view of it dies, so a batch stays valid exactly as long as Python references it."""

from __future__ import annotations

import logging
import os
from typing import Any, Iterator, Sequence

import numpy as np

from . import _core
from .errors import ConfigError, LoaderClosedError
from .sources import Source
from .transforms import Transform

logger = logging.getLogger("trdata")

_DTYPES = ("uint8", "float16", "bfloat16", "float32")


class Batch:
    """One batch. ``images``: (N, 3, H, W) or (N, H, W, 3) numpy view; ``labels``/``indices``: int64 (N,);
    ``valid``: the first ``valid`` rows are real samples of this epoch, later rows repeat real ones
    (``last_batch='pad'``) or fill a rank up to equal length. Unpacks as ``images, labels = batch``.

    bfloat16 images are ``ml_dtypes.bfloat16`` arrays when ml_dtypes is installed, else their uint16 bits;
    through DLPack (``torch.from_dlpack(batch)``, ``batch.torch()``) they arrive as real bfloat16.

    A Batch is a DLPack producer of its images (``__dlpack__``/``__dlpack_device__``), zero-copy: every
    consumer tensor keeps the batch buffer alive by itself, so it stays valid after the Batch is dropped
    and the loader moved on; the buffer returns to the loader when the last view or tensor of it dies."""

    __slots__ = ("images", "labels", "indices", "valid", "epoch", "_lease")

    def __init__(self, images: np.ndarray, labels: np.ndarray, indices: np.ndarray, valid: int, epoch: int,
                 lease: Any = None):
        self.images = images
        self.labels = labels
        self.indices = indices
        self.valid = valid
        self.epoch = epoch
        # The native lease behind `images` (found through the view's base when not given), or None for a
        # Batch built from plain arrays, which then exports `images` through numpy's own DLPack.
        self._lease = lease if lease is not None else _lease_of(images)

    def __iter__(self) -> Iterator[np.ndarray]:
        yield self.images
        yield self.labels

    def __len__(self) -> int:
        return len(self.labels)

    def __repr__(self) -> str:
        return (f"Batch(images={self.images.shape} {self.images.dtype}, valid={self.valid}, "
                f"epoch={self.epoch})")

    def __dlpack__(self, *, stream: Any = None, max_version: tuple[int, int] | None = None,
                   dl_device: tuple[int, int] | None = None, copy: bool | None = None) -> Any:
        """DLPack capsule of ``images`` (array-API semantics)."""
        if self._lease is not None:
            return self._lease.__dlpack__(stream=stream, max_version=max_version, dl_device=dl_device, copy=copy)
        kwargs = {k: v for k, v in (("max_version", max_version), ("dl_device", dl_device), ("copy", copy))
                  if v is not None}
        return self.images.__dlpack__(stream=stream, **kwargs)

    def __dlpack_device__(self) -> tuple[int, int]:
        """(device_type, device_id) of ``images``; (1, 0) is the CPU."""
        if self._lease is not None:
            return self._lease.__dlpack_device__()
        return self.images.__dlpack_device__()

    def torch(self) -> tuple[Any, Any]:
        """(images, labels) as torch tensors sharing this batch's memory, through DLPack (bfloat16 arrives
        as ``torch.bfloat16``). The tensors stay valid after the Batch is gone."""
        import torch

        return torch.from_dlpack(self), torch.from_dlpack(self.labels)


def _lease_of(images: np.ndarray) -> Any:
    """The BatchLeaseHandle whose memory ``images`` views whole (same data pointer and shape), else None."""
    base = images.base
    while isinstance(base, np.ndarray):
        base = base.base
    if isinstance(base, _core.BatchLeaseHandle) and tuple(base.shape) == images.shape \
            and images.__array_interface__["data"][0] == base.__array_interface__["data"][0]:
        return base
    return None


def _parse_devices(device: Any) -> tuple[list[int] | None, bool]:
    """``device`` → (CUDA ordinals or None for the CPU, whether a list of batches is yielded per step)."""
    def one(d: Any) -> int | None:
        s = str(d)  # accepts torch.device too
        if s == "cpu":
            return None
        if s == "cuda":
            return 0
        if s.startswith("cuda:") and s[5:].isdigit():
            return int(s[5:])
        raise ConfigError(f"invalid device: {d!r}; expected 'cpu', 'cuda', 'cuda:N' or a list of 'cuda:N'",
                          parameter="device")

    if isinstance(device, (list, tuple)):
        if not device:
            raise ConfigError("invalid device: the device list is empty", parameter="device")
        ordinals = [one(d) for d in device]
        if any(o is None for o in ordinals):
            raise ConfigError(f"invalid device: {device!r}; a device list holds CUDA devices only",
                              parameter="device")
        if len(set(ordinals)) != len(ordinals):
            raise ConfigError(f"invalid device: {device!r} lists a device twice", parameter="device")
        return [o for o in ordinals if o is not None], True
    o = one(device)
    return (None if o is None else [o]), False


def _default_workers() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - non-Linux
        return max(1, os.cpu_count() or 1)


class Loader:
    """Batches of decoded, augmented, normalized images from ``source``.

    Workers (persistent Rust threads, pinned ``round-robin`` by default) start on the first iteration and
    are reused across epochs. Each iteration runs one epoch; ``set_epoch(e)`` chooses it, otherwise epochs
    continue e, e+1, … Randomness depends only on (seed, epoch, sample index): with ``reproducible=True``
    batches are byte-identical for any worker count; with ``reproducible=False`` each sample still appears
    exactly once per epoch but may change slot. ``on_error='skip'`` replaces an undecodable sample by a
    deterministic other one (counted in ``stats()['errors_skipped']`` and logged once per file on the
    ``trdata`` logger); ``'raise'`` raises ``DecodeError`` naming the file at the batch holding it.

    ``device='cuda:N'`` yields batches whose ``images`` and ``labels`` are torch CUDA tensors on that GPU
    (``indices`` stays a numpy array): workers fill pinned, NUMA-local host buffers (``prefetch`` of them
    per GPU), a transfer thread copies each into one of ``device_slots`` device slots on its own stream,
    and the tensors are handed over through DLPack on the current torch stream, which waits for the copy
    on the device. A batch's slot is reused only after every tensor viewing it died *and* the stream it was
    used on passed that point. ``device=['cuda:0', 'cuda:1', …]`` runs one engine per GPU with one worker
    pool and yields a list of one Batch per GPU per step (each GPU its own share of the epoch).
    """

    def __init__(
        self,
        source: Source,
        batch_size: int = 64,
        transforms: Sequence[Transform] = (),
        normalize: tuple[Sequence[float], Sequence[float]] | None = None,
        dtype: str = "float32",
        layout: str = "NCHW",
        workers: int | None = None,
        shuffle: bool = False,
        seed: int = 0,
        reproducible: bool = False,
        last_batch: str = "partial",
        device: str = "cpu",
        rank: int = 0,
        world_size: int = 1,
        on_error: str = "raise",
        pin: str = "round-robin",
        prefetch: int = 2,
        max_held_batches: int = 16,
        device_slots: int = 3,
    ) -> None:
        if not isinstance(source, Source):
            raise ConfigError(f"invalid source: expected trdata.ImageFolder or trdata.FileList, got "
                              f"{type(source).__name__}", parameter="source")
        ordinals, per_step_list = _parse_devices(device)
        if isinstance(device_slots, bool) or not isinstance(device_slots, int):
            raise ConfigError(f"invalid device_slots: {device_slots!r} must be an int", parameter="device_slots")
        if dtype not in _DTYPES:
            raise ConfigError(f"invalid dtype: {dtype!r} is not one of {_DTYPES}", parameter="dtype")
        for name, value in (("batch_size", batch_size), ("rank", rank), ("world_size", world_size),
                            ("prefetch", prefetch), ("max_held_batches", max_held_batches)):
            if isinstance(value, bool) or not isinstance(value, int):
                raise ConfigError(f"invalid {name}: {value!r} must be an int", parameter=name)
        if workers is None:
            workers = _default_workers()
        if isinstance(workers, bool) or not isinstance(workers, int):
            raise ConfigError(f"invalid workers: {workers!r} must be an int", parameter="workers")
        if not isinstance(seed, int) or not 0 <= seed < 2**64:
            raise ConfigError(f"invalid seed: {seed!r} must be an int in [0, 2**64)", parameter="seed")
        specs = []
        for t in transforms:
            if not isinstance(t, Transform):
                raise ConfigError(f"invalid transforms: {t!r} is not a trdata transform (transforms are data, "
                                  "not Python callables)", parameter="transforms")
            specs.append(t._spec())
        norm = None
        if normalize is not None:
            mean, std = normalize
            if len(mean) != 3 or len(std) != 3:
                raise ConfigError("invalid normalize: expected (mean[3], std[3])", parameter="normalize")
            norm = (tuple(float(v) for v in mean), tuple(float(v) for v in std))
        self.source = source
        self.batch_size = batch_size
        self.dtype = dtype
        self.layout = layout
        self.workers = workers
        self.device = device
        self._ordinals = ordinals
        self._per_step_list = per_step_list
        self._pid = os.getpid()
        self._native = _core.NativeLoader(
            source.paths, source.labels, list(source.classes),
            batch_size=batch_size, workers=workers, shuffle=bool(shuffle), seed=seed,
            reproducible=bool(reproducible), last_batch=last_batch, rank=rank, world_size=world_size,
            pin=pin, on_error=on_error, prefetch=prefetch, max_held_batches=max_held_batches,
            transforms=specs, normalize=norm, dtype=dtype, layout=layout,
            devices=ordinals, device_slots=device_slots,
        )

    def __len__(self) -> int:
        """Batches per epoch for this rank."""
        return len(self._native)

    @property
    def epoch(self) -> int:
        """Epoch of the next iteration."""
        return self._native.epoch

    def set_epoch(self, epoch: int) -> None:
        """Run epoch ``epoch`` on the next iteration (later iterations continue from it)."""
        if isinstance(epoch, bool) or not isinstance(epoch, int) or epoch < 0:
            raise ConfigError(f"invalid epoch: {epoch!r} must be an int ≥ 0", parameter="epoch")
        self._native.set_epoch(epoch)

    def _log_skipped(self) -> None:
        for path, reason in self._native.drain_skipped():
            logger.warning("trdata: skipping undecodable sample %s (%s)", path, reason)

    def __iter__(self) -> Iterator[Batch]:
        if os.getpid() != self._pid and not self._native.closed:
            raise LoaderClosedError("this Loader was created in another process (fork); create it in the child")
        native = self._native
        if self._ordinals is not None:
            yield from self._iter_cuda()
            return
        native.start_epoch()
        bf16 = self.dtype == "bfloat16"
        while True:
            try:
                item = native.next_batch()
            finally:
                self._log_skipped()
            if item is None:
                return
            lease, labels, indices, valid, epoch = item
            images = np.asarray(lease)  # zero-copy: the array's base is the lease
            if bf16:
                try:
                    import ml_dtypes  # type: ignore[import-not-found]

                    images = images.view(ml_dtypes.bfloat16)
                except ImportError:
                    pass  # raw bits as uint16; Batch.torch() reinterprets as torch.bfloat16
            yield Batch(images, np.asarray(labels, dtype=np.int64), np.asarray(indices, dtype=np.int64),
                        valid, epoch)

    def _iter_cuda(self) -> Iterator[Any]:
        import torch

        native = self._native
        native.start_epoch()
        while True:
            try:
                step = native.next_step()
            finally:
                self._log_skipped()
            if step is None:
                return
            batches = []
            for images_h, labels_h, _labels, indices, valid, epoch in step:
                # torch.from_dlpack passes torch.cuda.current_stream(device) as `stream`, so that stream
                # waits (on the device) for the H2D copy, and its release event guards the slot's reuse.
                images = torch.from_dlpack(images_h)
                labels = torch.from_dlpack(labels_h)
                batches.append(Batch(images, labels, np.asarray(indices, dtype=np.int64), valid, epoch,
                                     lease=images_h))
            yield batches if self._per_step_list else batches[0]

    def device_mem_info(self) -> list[tuple[int, int]]:
        """(free, total) bytes of each GPU this loader feeds (``cuMemGetInfo``; empty before iterating)."""
        return list(self._native.device_mem_info())

    def stats(self) -> dict[str, int]:
        """Counters and per-stage times in ns: samples, batches, bytes_read, read_ns, decode_ns, augment_ns,
        worker_wait_ns (workers blocked on a full station), consumer_wait_ns (the starvation meter),
        errors_skipped, buffers_allocated, epochs. CUDA loaders add h2d_ns (copy issue → completion),
        h2d_bytes, h2d_batches, h2d_wait_host_ns (transfer threads waiting for workers), h2d_wait_slot_ns
        (waiting for a free device slot), device_slots_allocated, unpinned_host_buffers, device_wait_ns, and
        their consumer_wait_ns is the time the training loop waited for a device batch."""
        return dict(self._native.stats())

    def close(self) -> None:
        """Stop the workers and join them; idempotent. Batches still referenced stay valid."""
        self._native.close()

    @property
    def closed(self) -> bool:
        return self._native.closed

    def __enter__(self) -> "Loader":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return (f"Loader({self.source!r}, batch_size={self.batch_size}, workers={self.workers}, "
                f"dtype={self.dtype!r}, layout={self.layout!r})")
