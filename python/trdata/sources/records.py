"""Other projects' record files, read in place by the Rust core (src/source/records.rs and one file per format):
:class:`Parquet` (Hugging Face Hub datasets and any Parquet file with an image column), :class:`MDS` (Mosaic
streaming shards), :class:`LitData` (LitData ``optimize()`` chunks) and :class:`TFRecord` (``tf.train.Example``
records).

Each reads its files' indexes once when made (Parquet footers, ``index.json``, offset tables), then the loader's
workers read *units* of samples (a Parquet row group's columns, a run of records, a shard) whole through the
partial pack's block cache: windows of ``window_blocks`` units are shuffled together, the plan's next units are
read ahead (``prefetch_blocks``), at most ``cache_bytes`` bytes are held — the parameters and counters of
``Packed(mode="partial")``. Local paths and URLs (``s3://``, ``gs://``, ``az://``, ``http(s)://``, read with
``storage_options`` as ``Packed`` reads them) alike.

Labels come with each sample's read (as a :class:`DatasetSource`'s do): ``batch.labels`` has them; a sample
without one has -1 (Hugging Face's ``ClassLabel`` value for "no label"). Every other column is an extra
(``batch.extras``), unless ``extras=`` names the ones to keep (``extras=()``: none)."""

from __future__ import annotations

import glob
import os
from collections.abc import Mapping, Sequence
from typing import Any

from .. import _core
from .._progress import progress_callback
from ..errors import ConfigError
from .base import Source
from .extras import encode_all
from .packed import _fs_path, _options

#: A URL's scheme separator: such a path goes to the core as it is (storage/).
_URL = "://"

#: Default for ``label_column``: the format's own default column (absent from the files: no labels).
_DEFAULT: Any = object()


def _expand(paths: Any, suffixes: tuple[str, ...], parameter: str = "paths") -> list[str]:
    """``paths`` as the files the core opens: one path, URL or glob, or a sequence of them; a local directory
    stands for its files ending with one of ``suffixes`` (all its files when empty) below it, sorted; a local glob
    (``*``, ``?``, ``[…]``, ``**``) for its matches, sorted. A glob or directory that names no file is a
    ``ConfigError`` naming ``parameter``; URLs go on as they are."""
    if isinstance(paths, (str, bytes, os.PathLike)):
        paths = [paths]
    if not isinstance(paths, Sequence) or isinstance(paths, (str, bytes)):
        raise ConfigError(
            f"invalid {parameter}: {paths!r} must be a path, URL or glob, or a sequence of them",
            parameter=parameter,
        )
    out: list[str] = []
    for p in paths:
        try:
            path = _fs_path(p)
        except TypeError:
            raise ConfigError(
                f"invalid {parameter}: {p!r} must be a path or URL (str, bytes or os.PathLike)",
                parameter=parameter,
            ) from None
        if _URL in path:
            out.append(path)
            continue
        path = os.path.expanduser(path)
        if os.path.isdir(path):
            found = sorted(
                os.path.join(d, f)
                for d, _, files in os.walk(path, followlinks=True)
                for f in files
                if not suffixes or f.endswith(suffixes)
            )
            what = f"the folder {path!r} holds no {'/'.join(suffixes) or ''} file"
        elif glob.has_magic(path):
            found = sorted(f for f in glob.glob(path, recursive=True) if os.path.isfile(f))
            what = f"the pattern {path!r} matches no file"
        else:
            found, what = [path], ""
        if not found:
            raise ConfigError(f"invalid {parameter}: {what}", parameter=parameter)
        out.extend(found)
    if not out:
        raise ConfigError(f"invalid {parameter}: no file given", parameter=parameter)
    return out


class _Records(Source):
    """What the record sources share (module docs)."""

    #: The core's name of the format (source/formats.rs ``OPENERS``).
    _kind = ""
    #: A local folder stands for its files with these endings (empty: all).
    _suffixes: tuple[str, ...] = ()

    def __init__(
        self,
        paths: Any,
        *,
        image_column: str | None = None,
        label_column: str | None = _DEFAULT,
        extras: Sequence[str] | None = None,
        window_blocks: int | None = None,
        cache_bytes: int | None = None,
        prefetch_blocks: int | None = None,
        storage_options: Mapping[str, str | bool | int | float] | None = None,
    ) -> None:
        self.paths = self._files(paths)
        if extras is not None and (isinstance(extras, (str, bytes)) or not isinstance(extras, Sequence)):
            raise ConfigError(
                f"invalid extras: {extras!r} must be a sequence of column names (() for none)",
                parameter="extras",
            )
        label_given = label_column is not _DEFAULT
        self._native = _core.NativeSource.records(
            self._kind,
            self.paths,
            image_column,
            label_column if label_given else None,
            label_given,
            None if extras is None else list(extras),
            window_blocks,
            cache_bytes,
            prefetch_blocks,
            _options(storage_options),
        )
        self.classes = list(self._native.classes)
        self.class_to_idx = {c: i for i, c in enumerate(self.classes)}
        #: The extra fields each row delivers (``batch.extras``), in the files' column order.
        self.extras: tuple[str, ...] = tuple(self._native.record_fields)

    def _files(self, paths: Any) -> list[str]:
        return _expand(paths, self._suffixes)

    def __len__(self) -> int:
        return len(self._native)

    @property
    def labels(self) -> list[int]:  # type: ignore[override]
        raise AttributeError(
            f"a {type(self).__name__}'s labels are read with its samples (they live in the files' records); "
            "read batch.labels"
        )

    def _native_source(self) -> _core.NativeSource:
        return self._native

    def storage_stats(self) -> dict[str, int]:
        """The counters of the files' reads and of the unit cache, by the names ``Loader.stats()`` shows
        (``storage_requests``, ``storage_bytes``, ``cache_hits``, …: ``Packed.storage_stats``)."""
        return dict(self._native.storage_stats or {})

    def _pack_extras(self, i: int) -> list[tuple[str, int, bytes]]:
        """Sample ``i``'s extras as ``trdata.pack`` stores them, read from its unit (``batch.extras``'s values)."""
        values = self._native.record_extras(i)
        return encode_all(values, i) if values else []

    def describe(self) -> dict[str, Any]:
        """What ``trdata inspect`` shows of these files: the format, the files, the samples, the units the
        workers read (row groups, runs of records, shards), the extra fields and the class names."""
        return {
            "format": self._kind,
            "files": list(self.paths),
            "samples": len(self),
            "units": self._native.record_units,
            "extras": list(self.extras),
            "classes": list(self.classes),
        }

    def verify(self, *, workers: int | None = None, progress: bool = True) -> list[tuple[int, str]]:
        """Read every sample (its unit, its record's checks) and decode it fully, on ``workers`` threads: a
        ``(sample, reason)`` for each bad one (empty: the files are sound). ``trdata verify`` runs it."""
        report, close = progress_callback(progress, f"verifying {self._kind} files", "rec")
        try:
            return list(_core.source_verify(self._native, workers, report))
        finally:
            close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({len(self)} samples, {len(self.paths)} files)"


class Parquet(_Records):
    """Parquet files with an image column, as the Hugging Face Hub keeps every dataset: ``paths`` is a file, a
    folder (its ``*.parquet`` files, sorted), a glob, a URL or a sequence of them. The image column
    (``image_column``, default ``image``) is Hugging Face's ``Image`` struct (``{bytes, path}``, the bytes embedded)
    or a plain binary column; the label column (``label_column``, default ``label``; None: no labels) an integer
    column — a ``ClassLabel``'s names (from the file's Hugging Face metadata) become ``classes``; every other
    column an extra (text, numbers, bytes, lists), or those ``extras`` names.

    A unit is one row group (its image, label and extras columns), read whole and decoded in the workers: only the
    needed columns, never the whole file in memory. Compression: none, snappy, zstd or lz4 (raw); a file written
    with gzip or brotli is refused when opened (rewrite it with snappy or zstd)."""

    _kind = "parquet"
    _suffixes = (".parquet",)


class MDS(_Records):
    """A Mosaic ``streaming`` dataset (``MDSWriter``'s ``index.json`` and ``shard.NNNNN.mds[.zstd]`` files):
    ``root`` is its folder or URL prefix. The image column is the one ``jpeg``, ``png`` or ``pil`` column
    (``image_column`` to choose, or to name a ``bytes`` column); ``label`` (an ``int`` column) the label; the other
    columns extras. Compressed shards (zstd, snappy, gzip) are read and inflated whole."""

    _kind = "mds"

    def _files(self, paths: Any) -> list[str]:
        return [_fs_path(paths) if isinstance(paths, (str, bytes, os.PathLike)) else paths]


class LitData(_Records):
    """LitData ``optimize()`` output (``index.json`` and ``chunk-*.bin`` files): ``root`` is its folder or URL
    prefix. Samples are dicts: the image leaf (``jpeg``, ``pil`` or ``image:<ext>``; ``image_column`` to choose) is
    the image, ``label`` the label, the other leaves extras. zstd-compressed chunks are read and inflated whole."""

    _kind = "litdata"

    def _files(self, paths: Any) -> list[str]:
        return [_fs_path(paths) if isinstance(paths, (str, bytes, os.PathLike)) else paths]


class TFRecord(_Records):
    """TFRecord files of ``tf.train.Example`` records (TFDS, the TPU ImageNet scripts, timm): ``paths`` is a file,
    a folder (its files, sorted, index sidecars left out), a glob, a URL or a sequence of them. The image feature is
    ``image/encoded`` (else ``image``; ``image_column`` to choose), the label ``image/class/label`` (else
    ``label``; the TPU ImageNet files count from 1: subtract it in a batch step if you need 0-based labels), every
    other feature an extra. Both CRCs of every record are checked; a ``<file>.tfindex`` sidecar, when present,
    spares the scan of the file's record lengths when the source is made."""

    _kind = "tfrecord"

    def _files(self, paths: Any) -> list[str]:
        files = _expand(paths, ())
        return [f for f in files if not f.endswith((".tfindex", ".index", ".json"))]


def open_records(
    path: str | os.PathLike[str], storage_options: Mapping[str, str | bool | int | float] | None = None
) -> _Records | None:
    """The record source ``path`` is, told by its content or name (``trdata inspect``/``verify``): a folder (or
    URL prefix ending in ``/``) with an ``index.json`` of MDS shards or LitData chunks, a Parquet file (``PAR1``)
    or folder of them, a ``.tfrecord``/``.tfrec`` file; None for anything else (a packed file)."""
    p = _fs_path(path)
    index = os.path.join(p, "index.json")
    if _URL not in p and os.path.isfile(index):
        with open(index, "rb") as f:
            head = f.read(1 << 16)
        return (LitData if b'"chunks"' in head else MDS)(p, storage_options=storage_options)
    name = p.rstrip("/").lower()
    if name.endswith(".parquet") or (
        _URL not in p and os.path.isdir(p) and glob.glob(os.path.join(p, "**", "*.parquet"), recursive=True)
    ):
        return Parquet(p, storage_options=storage_options)
    if name.endswith((".tfrecord", ".tfrec", ".tfrecords")) or ".tfrecord-" in name:
        return TFRecord(p, storage_options=storage_options)
    if _URL not in p and os.path.isfile(p):
        with open(p, "rb") as f:
            if f.read(4) == b"PAR1":
                return Parquet(p, storage_options=storage_options)
    return None
