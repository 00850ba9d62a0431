"""WebDataset shards: tar files as ``webdataset.TarWriter`` writes them, read in place.

A sample is a run of consecutive members sharing a key (webdataset's rule: the member's path up to the first
``.`` of its file name; the rest is the extension, e.g. ``0001.jpg`` / ``0001.cls``). The index (shard, byte
offset and size of each sample's image member, and its target) is built from the tar headers only (no image is
read then) the first time a shard is opened, and cached (below); the workers read each image member straight
from its shard. Order: shard order as given, then member order, so a reproducible loader over the shards yields
the same batches as one over a FileList of the same images.

Index cache. One small JSON file per shard in ``cache_dir`` (default ``$XDG_CACHE_HOME/trdata/webdataset``, else
``~/.cache/trdata/webdataset``), named by a hash of what makes the index valid: the shard's absolute path, size,
``st_mtime_ns``, device and inode, the ``image_key``/``target_key`` options and the cache format version; the
same fields are stored inside and compared again on read. A cache file is never trusted: one that is stale (the
shard changed), foreign (another shard or options), unparsable or malformed, or holds a member span that does not
lie inside the shard as it is now, is ignored and the index rebuilt from the tar headers (then rewritten). Its
target members are stored as their raw bytes and parsed again by the same rules as on a first open. Files are
written atomically (a temporary file in the same folder, then ``os.replace``), so a reader never sees half of
one; a cache folder that cannot be created or written means no cache, never an error. A shard rewritten in place
with the same size, the same mtime to the nanosecond and the same inode is indistinguishable — don't.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import tarfile
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, Union

import numpy as np

from . import _core
from .errors import DecodeError, SourceError
from .sources import Source, _class_names

#: Image extensions tried, in this order, when ``image_key`` is not given.
IMAGE_KEYS = ("jpg", "jpeg", "png", "webp", "ppm", "pgm", "bmp", "tif", "tiff", "gif")
#: Target members larger than this are refused (a class index, a number or a small JSON array, never a blob).
MAX_TARGET_BYTES = 1 << 16
#: Bumped whenever the cached index's layout or meaning changes: older files then no longer match.
CACHE_VERSION = 1

_KEY_EXT = re.compile(r"^((?:.*/|)[^.]+)[.]([^/]*)$")  # webdataset's base_plus_ext

#: ``cache_dir``: a folder, ``True`` (the default folder) or ``False``/``None`` (no cache).
CacheDir = Union[str, "os.PathLike[str]", bool, None]


def _bad(shard: str, message: str) -> DecodeError:
    return DecodeError(f"{shard}: {message}", path=shard, kind="bad-shard")


def default_cache_dir() -> str:
    """``$XDG_CACHE_HOME/trdata/webdataset``, or ``~/.cache/trdata/webdataset`` when XDG_CACHE_HOME is unset or
    not absolute (the XDG rule)."""
    base = os.environ.get("XDG_CACHE_HOME", "")
    if not os.path.isabs(base):
        base = os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "trdata", "webdataset")


def _target(shard: str, key: str, ext: str, data: bytes) -> int | float | list[Any]:
    """A target member's value: ``.cls`` an integer (ASCII digits); ``.json`` an integer, a finite number or a
    (nested) list of numbers/booleans (multi-hot rows, soft labels)."""
    try:
        value: Any = json.loads(data) if ext == "json" else int(data.decode("ascii").strip())
    except (ValueError, UnicodeDecodeError, RecursionError):
        what = "JSON" if ext == "json" else "an integer"
        raise _bad(shard, f"sample {key!r}: .{ext} target {data[:40]!r} is not {what}") from None
    if isinstance(value, int) and not isinstance(value, bool):
        if not -(2**63) <= value < 2**63:
            raise _bad(shard, f"sample {key!r}: .{ext} target {value!r} is outside the int64 range")
        return value
    if ext == "json" and isinstance(value, (float, list)) and _numeric(value):
        return value
    raise _bad(
        shard, f"sample {key!r}: .{ext} target {value!r} is not an integer, a number or a list of numbers"
    )


def _numeric(v: Any) -> bool:
    """A JSON number (not a bool at the top level: ``true`` is no class index) or a nested list of them."""
    if isinstance(v, list):
        return all(isinstance(x, (bool, int, float)) or (isinstance(x, list) and _numeric(x)) for x in v)
    return isinstance(v, float)


def _shape(v: Any) -> tuple[int, ...] | None:
    """The shape of a JSON target (a number or nested lists); None when ragged."""
    try:
        return tuple(np.shape(v))
    except ValueError:  # numpy refuses inhomogeneous nesting
        return None


def _float_targets(shards: list[str], where: list[tuple[int, str]], values: list[Any]) -> np.ndarray:
    """Targets of which at least one is not an integer → float32 (N, *S): one shape for all, finite."""
    first = _shape(values[0])
    for (si, key), v in zip(where, values):
        shape = _shape(v)
        if shape is None or shape != first:
            raise _bad(
                shards[si],
                f"sample {key!r}: target {str(v)[:60]} has shape {shape if shape is not None else 'ragged'}, "
                f"but the first sample's has shape {first} (every target must have one shape)",
            )
    with np.errstate(over="ignore"):  # beyond float32: inf, refused below
        f = np.ascontiguousarray(np.asarray(values, dtype=np.float64), dtype=np.float32)
    bad = ~np.isfinite(f)
    if bad.any():
        i = int(np.unravel_index(int(np.flatnonzero(bad)[0]), f.shape)[0])
        si, key = where[i]
        raise _bad(shards[si], f"sample {key!r}: target {str(values[i])[:60]} is not finite in float32")
    f.flags.writeable = False
    return f


class _Sample:
    """One sample of a shard's index: its key, image member span, raw target bytes (None: no target) and the
    target's value (``_target``; 0 without a target)."""

    __slots__ = ("key", "offset", "size", "target", "value")

    def __init__(
        self, shard: str, target_key: str | None, key: str, offset: int, size: int, target: bytes | None
    ):
        self.key, self.offset, self.size, self.target = key, offset, size, target
        self.value = 0 if target_key is None or target is None else _target(shard, key, target_key, target)


class WebDataset(Source):
    """Tar ``shards`` (paths) in webdataset's layout. ``image_key``: the image member's extension, or several
    separated by ``;`` (webdataset's spelling, e.g. ``"jpg;png"``); default: the first of ``IMAGE_KEYS``
    present. ``target_key``: the target's extension (``"cls"``: ASCII digits, an integer; ``"json"``: a JSON
    integer, number or list of numbers), or None for no targets (all 0). Integer targets are class indices
    (int64); when any ``.json`` target is a float or a list, all become float32 ``(N, *S)`` targets (one shape
    for all; see ``trdata.sources``). ``classes`` optionally names the class indices.

    ``cache_dir``: where the per-shard index is cached (module docs): ``True`` (default) for
    ``$XDG_CACHE_HOME/trdata/webdataset``, a folder, or ``False``/``None`` for no cache.

    Every sample must have an image and (unless ``target_key`` is None) a target; a shard that is not a tar,
    is truncated or breaks that rule is a ``DecodeError`` naming it, when the source is made. An image member
    that does not decode follows the loader's ``on_error`` policy, named ``shard@offset+size``."""

    def __init__(
        self,
        shards: Sequence[str | os.PathLike[str]] | str | os.PathLike[str],
        image_key: str | None = None,
        target_key: str | None = "cls",
        classes: Iterable[str] = (),
        cache_dir: CacheDir = True,
    ) -> None:
        if isinstance(shards, (str, bytes, os.PathLike)):
            shards = [shards]  # one shard, as webdataset accepts
        self.shards = [os.fspath(s) for s in shards]
        self.image_key, self.target_key = image_key, target_key
        if cache_dir is True:
            self.cache_dir: str | None = default_cache_dir()
        elif cache_dir is False or cache_dir is None:
            self.cache_dir = None
        else:
            self.cache_dir = os.path.abspath(os.path.expanduser(os.fspath(cache_dir)))
        file_index: list[int] = []
        offsets: list[int] = []
        sizes: list[int] = []
        values: list[Any] = []
        where: list[tuple[int, str]] = []
        self.keys: list[str] = []
        for si, shard in enumerate(self.shards):
            for s in self._index(shard):
                file_index.append(si)
                offsets.append(s.offset)
                sizes.append(s.size)
                self.keys.append(s.key)
                where.append((si, s.key))
                values.append(s.value)
        if all(isinstance(v, int) for v in values):
            self.labels = list(values)
        else:
            self._float_targets = _float_targets(self.shards, where, values)
            self.labels = [0] * len(values)
        self.classes, self.class_to_idx = _class_names(classes)
        self._native = _core.NativeSource.spans(self.shards, file_index, offsets, sizes, self.labels)

    # ---- the per-shard index, cached -------------------------------------------------------------------

    def _index(self, shard: str) -> list[_Sample]:
        if not os.path.isfile(shard):
            raise SourceError(f"shard {shard!r} is not a file", shard)
        st = os.stat(shard)
        ident = {
            "version": CACHE_VERSION,
            "shard": os.path.abspath(shard),
            "size": st.st_size,
            "mtime_ns": st.st_mtime_ns,
            "dev": st.st_dev,
            "ino": st.st_ino,
            "image_key": self.image_key,
            "target_key": self.target_key,
        }
        path = self._cache_path(ident)
        if path is not None:
            cached = _read_cache(path, shard, ident)
            if cached is not None:
                return cached
        samples = list(self._scan(shard, st.st_size))
        if path is not None:
            _write_cache(path, ident, samples)
        return samples

    def _cache_path(self, ident: dict[str, Any]) -> str | None:
        if self.cache_dir is None:
            return None
        digest = hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()[:40]
        return os.path.join(self.cache_dir, f"{digest}.json")

    def _scan(self, shard: str, file_size: int) -> Iterator[_Sample]:
        """The index of one shard from its tar headers (the cache's source of truth)."""
        wanted = IMAGE_KEYS if self.image_key is None else tuple(self.image_key.split(";"))
        target_key = self.target_key
        for key, members, data in self._samples(shard, target_key, file_size):
            ext = next((e for e in wanted if e in members), None)
            if ext is None:
                raise _bad(
                    shard, f"sample {key!r} has no image member ({', '.join(wanted)}): {sorted(members)}"
                )
            if target_key is not None and target_key not in data:
                raise _bad(shard, f"sample {key!r} has no .{target_key} target: {sorted(members)}")
            offset, size = members[ext]
            yield _Sample(
                shard, target_key, key, offset, size, None if target_key is None else data[target_key]
            )

    @staticmethod
    def _samples(
        shard: str, target_key: str | None, file_size: int
    ) -> Iterable[tuple[str, dict[str, tuple[int, int]], dict[str, bytes]]]:
        """(key, {ext: (offset, size)}, {target ext: bytes}) per sample, in member order."""
        key: str | None = None
        members: dict[str, tuple[int, int]] = {}
        data: dict[str, bytes] = {}
        try:
            with tarfile.open(shard, mode="r:") as tar:
                for info in tar:
                    if not info.isfile():
                        continue
                    m = _KEY_EXT.match(info.name)
                    if m is None or os.path.basename(info.name).startswith("__"):
                        continue  # webdataset skips names without an extension and its own __key__ entries
                    k, ext = m.group(1), m.group(2)
                    if info.offset_data + info.size > file_size:
                        raise _bad(
                            shard, f"member {info.name!r} runs past the end of the file (truncated shard)"
                        )
                    if k != key:
                        if key is not None:
                            yield key, members, data
                        key, members, data = k, {}, {}
                    members[ext] = (info.offset_data, info.size)
                    if ext == target_key:
                        if info.size > MAX_TARGET_BYTES:
                            raise _bad(
                                shard, f"sample {k!r}: .{ext} target of {info.size} bytes is not a label"
                            )
                        f = tar.extractfile(info)
                        data[ext] = f.read() if f is not None else b""
                end = tar.offset  # where the next header would start
            # tarfile stops quietly at a truncated header; a complete archive ends with two zero blocks there.
            with open(shard, "rb") as f:
                f.seek(end)
                if f.read(1024) != bytes(1024):
                    raise _bad(
                        shard, f"has no end-of-archive marker at byte {end} (truncated or not a tar file)"
                    )
        except (tarfile.TarError, EOFError, OSError) as e:
            raise _bad(shard, f"is not a readable tar file ({e})") from None
        if key is not None:
            yield key, members, data

    def _native_source(self) -> _core.NativeSource:
        return self._native


def _read_cache(path: str, shard: str, ident: dict[str, Any]) -> list[_Sample] | None:
    """The cached index at `path` if it is one for exactly `ident` and well-formed, with every member span
    inside the shard's current size; None otherwise (the caller rebuilds)."""
    try:
        with open(path, "rb") as f:
            doc = json.loads(f.read())
    except (OSError, ValueError, RecursionError):
        return None
    if not isinstance(doc, dict) or doc.get("ident") != ident or not isinstance(doc.get("samples"), list):
        return None
    size = ident["size"]
    out = []
    for s in doc["samples"]:
        if not (isinstance(s, list) and len(s) == 4 and isinstance(s[0], str)):
            return None
        key, offset, length, target = s
        ints = all(type(v) is int for v in (offset, length))  # not bool, not float
        if not ints or offset < 512 or length < 0 or offset + length > size:
            return None  # a tar member's data follows its 512-byte header, inside the file
        if target is None:
            if ident["target_key"] is not None:
                return None
            raw = None
        elif isinstance(target, str) and ident["target_key"] is not None:
            try:
                raw = target.encode("latin-1")
            except UnicodeEncodeError:
                return None
            if len(raw) > MAX_TARGET_BYTES:
                return None
        else:
            return None
        try:
            out.append(_Sample(shard, ident["target_key"], key, offset, length, raw))
        except DecodeError:
            return None  # a target the rules refuse: the shard never made it, rebuild (and fail there if so)
    return out


def _write_cache(path: str, ident: dict[str, Any], samples: list[_Sample]) -> None:
    """Write the index atomically (temporary file + rename in the same folder); any failure: no cache."""
    doc = {
        "ident": ident,
        "samples": [
            [s.key, s.offset, s.size, None if s.target is None else s.target.decode("latin-1")]
            for s in samples
        ],
    }
    folder = os.path.dirname(path)
    tmp = None
    try:
        os.makedirs(folder, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".index-", suffix=".tmp", dir=folder)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(doc, f, separators=(",", ":"))
        os.replace(tmp, path)
        tmp = None
    except (OSError, ValueError):
        pass  # unwritable or full: the index works without its cache
    finally:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass
