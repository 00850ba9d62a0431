"""Packed datasets: one file that holds a whole source (``trdata.pack`` writes it, ``trdata.Packed`` reads it).

A packed file is a versioned header (class names, write options), large aligned blocks of records and a
fixed-width index (offset, length, CRC32C, target, width, height, format, chroma subsampling,
progressive/CMYK flags) that plans a sample's decode without touching its bytes. The byte layout, every check
of it and the writer live in the Rust core (``src/source/packed.rs``, ``src/pack/``); this module only
translates arguments and draws progress bars.

* ``mode="full"`` reads the file into memory once; ``mode="partial"`` streams blocks with bounded memory and
  shuffles blocks, then samples within windows of ``window_blocks`` blocks (the plan's order, from
  Philox(seed, epoch)), so every sample still comes once per epoch, sharded across ranks and resumable.
* Every record's CRC32C is checked when it is read: a flipped byte is a ``DecodeError`` naming the file and
  the record (or is skipped under ``on_error="skip"``), never garbage pixels. A foreign, truncated or damaged
  file is refused when opened.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import _core
from .._progress import progress_callback
from ..errors import ConfigError, DecodeError, SourceError
from . import packed_targets
from .base import Source
from .dataset import DatasetSource, is_map_style
from .extras import NPY
from .extras import decode as decode_extra
from .segmentation import FILL, decode_label_map
from .targets import python_targets

#: The ``mode`` choices of :class:`Packed`.
MODES = ("full", "partial")


@dataclass(frozen=True)
class Reencode:
    """How ``trdata.pack`` normalizes images: downscale (antialiased, never up) so the short side is
    ``short_side`` or the long side is ``max_side`` (at most one of them; neither = keep the size), then
    re-encode as baseline 4:2:0 JPEG at ``quality``. The core checks the values."""

    short_side: int | None = None
    max_side: int | None = None
    quality: int = 90


def _reencode_options(reencode: Any) -> tuple[int | None, int | None, int | None]:
    """(short_side, max_side, quality) for the core; None everywhere = store the source's bytes."""
    if reencode is None:
        return None, None, None
    if isinstance(reencode, Mapping):
        unknown = set(reencode) - {"short_side", "max_side", "quality"}
        if unknown:
            raise ConfigError(
                f"invalid reencode: keys {sorted(unknown)} must be among short_side, max_side, quality",
                parameter="reencode",
            )
        reencode = Reencode(**reencode)
    if not isinstance(reencode, Reencode):
        raise ConfigError(
            f"invalid reencode: a {type(reencode).__name__} must be None, a trdata.Reencode or a dict",
            parameter="reencode",
        )
    return reencode.short_side, reencode.max_side, reencode.quality


def _fs_path(path: str | bytes | os.PathLike[Any]) -> str:
    """A path as the core takes it: bytes paths (``os.fsencode``'d names, non-UTF-8 ones included) become the
    ``str`` Python's file functions use (surrogate escapes); the core's binding took only str and raised a bare
    TypeError naming no parameter for ``b"/data/x.trdpack"``. Anything else is os.fspath's TypeError."""
    return os.fsdecode(os.fspath(path))


def _options(storage_options: Any) -> Any:
    """``storage_options`` as the core takes it (a dict; anything else goes on for the core to refuse)."""
    return dict(storage_options) if isinstance(storage_options, Mapping) else storage_options


def _check_class_targets(source: Source) -> None:
    """The packed format stores one int64 class index per record: a source whose targets are float (regression
    values, soft or multi-hot labels) is refused rather than packed as something else (they were class 0)."""
    targets = source._float_targets
    if targets is not None:
        raise ConfigError(
            f"invalid labels: this {type(source).__name__} has float targets of shape {targets.shape[1:] or '()'} "
            "(regression, soft or multi-hot labels) and a packed file stores one class index per sample; pack "
            "the images with integer labels and keep the float targets beside the packed file",
            parameter="labels",
        )


def pack(
    source: Source,
    path: str | bytes | os.PathLike[str] | os.PathLike[bytes],
    *,
    reencode: Reencode | Mapping[str, int] | None = None,
    workers: int | None = None,
    progress: bool = True,
    block_bytes: int | None = None,
    storage_options: Mapping[str, str | bool | int | float] | None = None,
) -> dict[str, Any]:
    """Write ``source`` (any trdata source) into the packed file ``path``, in the source's order, with its
    targets and class names. Without ``reencode`` the records hold the source's bytes exactly (raw pixels
    for ``Arrays``), so a reproducible loader over the packed file yields the batches of one over the
    source; with ``reencode`` (a :class:`Reencode` or a dict of its fields) every image is resized and
    re-encoded. ``workers`` threads (default: all CPUs) read and encode; a bar is drawn on stderr with
    ``progress``. ``block_bytes`` sets the block size (default: the core's, a few MiB; smaller blocks mean a
    finer partial-mode shuffle and more seeks). The file appears at ``path`` only when complete (written to a
    temporary sibling of its own, then renamed): an interrupted or failed pack leaves nothing at ``path``, and of
    two packs to one ``path`` at once the file is whole, the one that finished last. ``path`` must name a file in
    an existing folder and be absent or a regular file: a folder, a device node (``/dev/null``), a FIFO or a
    socket is refused (``ConfigError``) before any work. A packed file stores one class index per sample: a
    source with float targets (regression, soft or multi-hot labels) is refused rather than packed as class 0;
    class names must be distinct and every label one of them. A sample that cannot be read or decoded (when
    re-encoding) is a ``DecodeError`` naming it. Memory: finished records wait for their turn in a buffer of at
    most 256 MiB (plus one record per worker). Returns ``{"records", "bytes_in", "bytes_out", "seconds",
    "warnings"}``.

    ``path`` may be a URL of a bucket (``s3://bucket/train.trd``, ``gs://``, ``az://``; not plain ``http(s)://``,
    which is read-only): the pack is written to a temporary file in the system's temporary folder (``TMPDIR``;
    it needs the pack's size free there) exactly as a local pack, then uploaded as one multipart upload with
    ``storage_options`` (as ``Packed``'s): nothing appears at the key until the upload completes, and an error or
    Ctrl-C aborts the upload (its parts are deleted) and names the URL. The object equals the local pack byte for
    byte."""
    if not isinstance(source, Source) and is_map_style(source):
        source = DatasetSource(source)  # a map-style dataset packs as Loader reads it
    if not isinstance(source, Source):
        raise ConfigError(
            f"invalid source: a {type(source).__name__} must be a trdata source (ImageFolder, FileList, "
            "Bytes, Arrays, WebDataset, Packed, MNIST, …) or a map-style dataset",
            parameter="source",
        )
    _check_class_targets(source)
    short_side, max_side, quality = _reencode_options(reencode)
    dst = _fs_path(path)
    options = _options(storage_options)
    if _core.storage_check_target(dst, options):  # a URL: pack here, then upload (checked before any work)
        with tempfile.TemporaryDirectory(prefix="trdata-pack-") as staging:
            local = os.path.join(staging, "pack.trd")
            packed = pack(
                source, local, reencode=reencode, workers=workers, progress=progress, block_bytes=block_bytes
            )
            report, close = progress_callback(progress, f"uploading {os.path.basename(dst)}", "B")
            try:
                _core.storage_upload(local, dst, options, report)
            finally:
                close()
        return packed
    report, close = progress_callback(progress, f"packing {os.path.basename(dst)}", "rec")
    raised: list[BaseException] = []

    def extras_of(i: int) -> list[tuple[str, int, bytes]]:
        try:
            return source._pack_extras(i)
        except BaseException as e:  # re-raised below as it was (the core reports it as a ConfigError)
            raised.append(e)
            raise

    try:
        result: dict[str, Any] = _core.pack(
            source._native_source(),
            dst,
            short_side,
            max_side,
            quality,
            workers,
            list(source.classes),
            report,
            block_bytes,
            extras_of,
            source._has_targets,
        )
    except ConfigError:
        if raised:
            raise raised[0] from None
        raise
    finally:
        close()
    return result


def verify(
    path: str | bytes | os.PathLike[str] | os.PathLike[bytes],
    *,
    workers: int | None = None,
    progress: bool = True,
    storage_options: Mapping[str, str | bool | int | float] | None = None,
) -> list[tuple[int, str]]:
    """Check every record of the packed file ``path`` (a path or a URL, read with ``storage_options``): its CRC32C
    and that it decodes. Returns ``(record, reason)`` for each bad record (empty: the file is sound); a damaged
    header or index raises."""
    report, close = progress_callback(progress, f"verifying {os.path.basename(_fs_path(path))}", "rec")
    try:
        bad: list[tuple[int, str]] = list(
            _core.packed_verify(_fs_path(path), workers, report, _options(storage_options))
        )
    finally:
        close()
    return bad


def inspect(
    path: str | bytes | os.PathLike[str] | os.PathLike[bytes],
    *,
    storage_options: Mapping[str, str | bool | int | float] | None = None,
) -> dict[str, Any]:
    """The header and index of the packed file ``path`` (a path or a URL, read with ``storage_options``) as a
    dict (version, counts, sizes, classes, write options, and per record: length, width, height, format,
    subsampling, progressive, cmyk, label)."""
    info: dict[str, Any] = _core.packed_info(_fs_path(path), _options(storage_options))
    return info


class Packed(Source):
    """A packed file written by ``trdata.pack``: its samples, targets (``labels``) and ``classes`` in the
    order they were packed. ``mode="full"`` reads the whole file into memory once (fastest; memory = file
    size); ``mode="partial"`` streams blocks through a cache of at most ``cache_bytes`` bytes (default: the
    window plus the larger of two blocks per CPU and ``prefetch_blocks``; at least ``window_blocks +
    prefetch_blocks`` of the file's largest blocks), fetching the next ``prefetch_blocks`` blocks of the plan's
    order in the background (default: a whole window, or what an explicit ``cache_bytes`` leaves) and evicting the block needed furthest in the future; it shuffles by blocks: a permutation of the blocks
    each epoch, then a shuffle of the samples within each window of ``window_blocks`` consecutive blocks.
    Opening checks the header and the index (CRC32C); each record's CRC32C is checked when it is read. The
    cache's and the reads' counters are in ``Loader.stats()`` (the user guide's "Cache sizing").

    ``path`` may be a URL: ``s3://bucket/key``, ``gs://``, ``az://``/``abfs://``, ``http(s)://`` (a server
    that answers Range requests). Credentials and endpoints come from the standard environment variables
    (``AWS_ACCESS_KEY_ID``, ``AWS_ENDPOINT_URL``, ``AWS_REGION``, …) and ``storage_options``, a dict with
    object_store's key names (``aws_endpoint``, ``aws_access_key_id``, ``aws_secret_access_key``,
    ``aws_region``, ``aws_allow_http``, …, ``timeout``) plus ``max_retries``, ``retry_init_backoff`` and
    ``retry_max_backoff``. Failed reads are retried with backoff; one that still fails is a bad sample under
    the loader's ``on_error``.

    ``cache_dir`` (partial mode) keeps the blocks read on local disk, at most ``cache_disk_bytes`` bytes (required
    with it): a block missing from memory is read from there before it is fetched, so a restart, a second epoch
    or another process of the node sharing the folder reads it locally. Every cached block is checked (the
    object's URL, ETag and size, the block's range, its CRC32C) before it is used; a damaged one is removed and
    fetched again. Blocks are admitted until the cache is full and then kept (a cache smaller than the file
    serves the same share of every epoch). ``storage_stats()``'s ``disk_*`` counters say what it did."""

    def __init__(
        self,
        path: str | bytes | os.PathLike[str] | os.PathLike[bytes],
        mode: str = "full",
        *,
        window_blocks: int | None = None,
        cache_bytes: int | None = None,
        prefetch_blocks: int | None = None,
        storage_options: Mapping[str, str | bool | int | float] | None = None,
        cache_dir: str | os.PathLike[str] | None = None,
        cache_disk_bytes: int | None = None,
    ) -> None:
        self.path = _fs_path(path)
        self.mode = mode
        options = _options(storage_options)
        disk = None if cache_dir is None else _fs_path(cache_dir)
        self._native = _core.NativeSource.packed(
            self.path, mode, window_blocks, cache_bytes, prefetch_blocks, options, disk, cache_disk_bytes
        )
        self.labels = list(self._native.labels)
        self.classes = list(self._native.classes)
        self.class_to_idx = {c: i for i, c in enumerate(self.classes)}
        self._fields: tuple[str, ...] = tuple(self._native.extras_names)
        #: The extra fields the file holds (``batch.extras`` delivers them), in the order they first appear;
        #: a detection pack's annotations (``target.*``, sources/packed_targets.py) are ``batch.targets`` instead.
        self.extras: tuple[str, ...] = tuple(
            n for n in self._fields if not n.startswith(packed_targets.PREFIX)
        )
        #: "instances" (boxes, labels, masks, keypoints), "semantic" (a label map) or None: what a pack of a
        #: detection or segmentation source holds, delivered as ``batch.targets`` as the source delivered them.
        self.target_kind: str | None = (
            "instances"
            if packed_targets.BOXES in self._fields
            else "semantic"
            if packed_targets.LABEL_MAP in self._fields
            else None
        )
        if self.target_kind is not None:
            self._open_targets()

    def storage_stats(self) -> dict[str, int]:
        """The counters of this file's reads, by the names ``Loader.stats()`` shows: ``storage_requests`` (GETs or
        preads), ``storage_bytes``, ``storage_retries``, ``storage_failures``, ``storage_refetches`` (reads made again
        because their bytes failed the records' CRC32Cs: a fault on the way, not the file's); in partial mode the block cache's
        (``storage_wait_ns``, ``cache_hits``, …: the streaming guide's table); with ``cache_dir`` also ``disk_hits``, ``disk_misses``, ``disk_admitted_bytes``, ``disk_rejected`` (no
        room), ``disk_corrupt_removed``, ``disk_errors`` (failed cache writes, ignored) and
        ``disk_leftovers_removed`` (what crashed processes left, cleaned when opened)."""
        return dict(self._native.storage_stats or {})

    def _field_values(self, name: str) -> list[Any]:
        """Every record's value of the extra field ``name``, decoded, read in one ordered pass of the file."""
        values = []
        for i, data in enumerate(self._native.packed_extras_field(name)):
            if data is None:
                raise SourceError(f"{self.path}#{i}: a detection pack's record lacks {name}", self.path)
            try:
                values.append(decode_extra(NPY, data))
            except ValueError as e:
                raise SourceError(f"{self.path}#{i}: {name} is not valid ({e})", self.path) from None
        return values

    def _open_targets(self) -> None:
        """A detection pack's sizes (and boxes: RandomIoUCrop draws from them in the workers), read at open."""
        sizes = self._field_values(packed_targets.SIZE)
        bad = next(
            (i for i, v in enumerate(sizes) if v.dtype != np.int64 or v.shape != (2,) or v.min() < 1), None
        )
        if bad is not None:
            raise SourceError(f"{self.path}#{bad}: target.size is not an image size", self.path)
        self._sizes = np.array(sizes, np.int64).reshape(-1, 2)  # (width, height)
        # the worker checks each record's size against them, and reads each row's stored annotations (``_record``:
        # a record whose annotations cannot be read is the sample's error, under on_error) and moves them
        stored = {name for name, _, _ in self._stored_extras([0])[0]} if len(sizes) else set()
        self._native = python_targets(
            self._native.with_sizes(self._sizes),
            self._record,
            "label_map" if self.target_kind == "semantic" else "instances",
            self.path,
            masks=packed_targets.PREFIX + "masks" in stored,
            keypoints=packed_targets.PREFIX + "keypoints" in stored,
            fill=FILL,
        )
        ids = self._field_values(packed_targets.PREFIX + "image_id")
        bad = next((i for i, v in enumerate(ids) if v.dtype != np.int64 or v.shape != ()), None)
        if bad is not None:
            raise SourceError(f"{self.path}#{bad}: target.image_id is not an int64 scalar", self.path)
        self._image_ids = np.array(ids, np.int64)
        if self.target_kind == "instances":
            boxes = self._field_values(packed_targets.BOXES)
            bad = next(
                (i for i, b in enumerate(boxes) if b.dtype != np.float64 or b.ndim != 2 or b.shape[1] != 4),
                None,
            )
            if bad is not None:
                raise SourceError(f"{self.path}#{bad}: target.boxes is not a float64 (K, 4) array", self.path)
            offsets = np.concatenate([[0], np.cumsum([len(b) for b in boxes])]).tolist()
            table = np.concatenate(boxes) if boxes else np.zeros((0, 4))
            self._native = self._native.with_boxes(
                offsets, np.ascontiguousarray(table, np.float64).reshape(-1, 4)
            )

    @property
    def _python_in_workers(self) -> bool:  # type: ignore[override]
        return self.target_kind is not None  # the workers read the stored annotations (``_record``)

    def _stored_targets(self, i: int) -> dict[str, Any]:
        """Record ``i``'s stored annotations, checked (sources/packed_targets.py)."""
        return packed_targets.decode_targets(self._stored_extras([i])[0], f"{self.path}#{i}", self.path, i)

    def _record(self, i: int) -> dict[str, Any]:
        """Record ``i``'s target record (sources/targets.py ``python_targets``): its stored annotations (source
        pixels), a semantic pack's label map decoded."""
        t = self._stored_targets(i)
        record = {"image_id": t["image_id"], "size": t["size"]}
        if self.target_kind == "semantic":
            name = f"{self.path}#{i}"
            record["label_map"] = decode_label_map(t["label_map_png"], name, t["size"], name)
        else:
            record.update({k: t[k] for k in ("boxes", "labels", "iscrowd", "keypoints") if k in t})
            if "masks" in t:
                record["masks"] = list(t["masks"])
        return record

    def _stored_extras(self, indices: list[int]) -> list[list[tuple[str, int, bytes]]]:
        names = self._fields
        return [
            [(names[f], kind, data) for f, kind, data in row] for row in self._native.packed_extras(indices)
        ]

    @property
    def _has_extras(self) -> bool:
        return bool(self.extras)

    def _row_extras(self, i: int, epoch: int) -> dict[str, Any] | None:
        """Record ``i``'s extras, read from the file by the worker that makes its row (CRC-checked; a damaged
        record or a value that is not what its kind says is a ``DecodeError`` naming ``file#record`` and the
        field); a field the record lacks is None."""
        if not self.extras:
            return None
        out: dict[str, Any] = dict.fromkeys(self.extras)
        for name, kind, data in self._stored_extras([i])[0]:
            if name not in out:  # a detection pack's target.* fields: batch.targets
                continue
            try:
                out[name] = decode_extra(kind, data)
            except ValueError as e:
                raise DecodeError(
                    f"{self.path}#{i}: extra {name!r} is not valid ({e})",
                    path=self.path,
                    index=i,
                    kind="Corrupt",
                ) from None
        return out

    def _pack_extras(self, i: int) -> list[tuple[str, int, bytes]]:
        return self._stored_extras([i])[0]  # stored as they are

    def _native_source(self) -> _core.NativeSource:
        return self._native

    def __repr__(self) -> str:
        return f"Packed({self.path!r}, mode={self.mode!r}, {len(self)} samples, {len(self.classes)} classes)"
