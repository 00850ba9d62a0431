"""WebDataset shards: tar files as ``webdataset.TarWriter`` writes them, read in place.

A sample is a run of consecutive members sharing a key (webdataset's rule: the member's path up to the first
``.`` of its file name; the rest is the extension, e.g. ``0001.jpg`` / ``0001.cls``). The index (shard, byte
offset and size of each sample's image member, and its target) is built from the tar headers only (no image is
read then) the first time a shard is opened, and cached (below); the workers read each image member straight
from its shard. Order: shard order as given, then member order, so a reproducible loader over the shards yields
the same batches as one over a FileList of the same images.

Index cache. One small file per shard in ``cache_dir`` (default ``$XDG_CACHE_HOME/trdata/webdataset``, else
``~/.cache/trdata/webdataset``), named by a hash of what makes the index valid: the shard's absolute path, size,
``st_mtime_ns``, ``st_ctime_ns``, device and inode, the user id, the ``image_key``/``target_key`` options and the
cache format version; the same fields are stored inside and compared again on read. ``st_ctime_ns`` is there
because no user can set it: a shard edited in place with its size kept and its mtime restored (``os.utime``)
still has a new ctime, so its stale index is not served.

A cache file is never trusted, because whoever can write the cache folder could otherwise choose the labels and
the byte spans the workers read (every identity field is computable from ``stat``). So:

- it is opened ``O_NONBLOCK | O_NOFOLLOW`` and ``fstat``-ed through the opened descriptor: only a regular file
  is read (a FIFO there never blocks, a symlink to ``/dev/zero`` is never followed), and only one of at most the
  shard's size plus ``CACHE_MARGIN_BYTES`` (it holds per sample a key, two numbers and the raw target, which the
  sample's tar headers and data already hold); a larger file is ignored unread, and an index that would be larger
  is not written;
- it carries an HMAC-SHA256 of its index (``mac`` beside ``ident`` and ``samples``) under a per-user key
  (``INDEX_KEY_BYTES`` random bytes in ``$XDG_CACHE_HOME/trdata/index-key``, mode 0600, made on first use; used
  only when it is a regular file of this user that nobody else can read; where that place cannot be written, in
  ``cache_dir`` as ``.index-key-<uid>``). A forged or altered file (other
  labels, moved spans) does not verify. Checking each cached span against the tar header in front of it instead
  would cost one random read per sample (two with the target), about what indexing the tar again costs on a
  network file system, and still would not cover forged labels; the MAC costs one hash of the small file and
  covers everything in it;
- it must then be well-formed for exactly this shard and these options: every member span 512-byte aligned, after
  the previous one, inside the shard as it is now; targets parse by the same rules as on a first open.

Anything else (stale, foreign, unparsable, malformed, unsigned, too large, not a regular file) is ignored and the
index rebuilt from the tar headers (then rewritten). Files are written atomically (a temporary file in the same
folder, then ``os.replace``), so a reader never sees half of one; a cache folder or key that cannot be created or
written means no cache, never an error.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import io
import json
import os
import re
import shlex
import stat
import tarfile
import tempfile
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import IO, Any, Union

import numpy as np

from .. import _core
from ..errors import ConfigError, DecodeError, SourceError, _shown
from .base import Source, _class_names
from .extras import MAX_EXTRA_BYTES, decode, kind_of_extension

#: Image extensions tried, in this order, when ``image_key`` is not given.
IMAGE_KEYS = ("jpg", "jpeg", "png", "webp", "ppm", "pgm", "bmp", "tif", "tiff", "gif")
#: Target members larger than this are refused (a class index, a number or a small JSON array, never a blob).
MAX_TARGET_BYTES = 1 << 16
#: Bumped whenever the cached index's layout or meaning changes: older files then no longer match.
CACHE_VERSION = 3
#: An index file larger than its shard plus this many bytes is ignored unread, and trdata writes none larger. Per
#: sample it holds a key, two numbers and the raw target (~30 bytes + key + target), which the sample's >= 1024
#: bytes of tar headers and data in the shard already hold; so a bound of the shard's own size fits every real
#: index (large soft-label targets included), and a planted file (a 5 GB sparse file, a FIFO's worth of data)
#: costs at most about one read of the shard before it is refused.
CACHE_MARGIN_BYTES = 1 << 20
#: Random bytes of the per-user key that signs index files (HMAC-SHA256).
INDEX_KEY_BYTES = 32

#: Opening a file that may be anything (a FIFO without writer, a device, a terminal) must return at once.
_OPEN_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC

#: Compressed tars (webdataset streams them): (magic at byte 0, name, the command that decompresses). Consulted
#: only when a shard does not read as a tar, so a tar whose first member name starts like a magic is still read.
_COMPRESSIONS = (
    (b"\x1f\x8b", "gzip", "gunzip"),
    (b"BZh", "bzip2", "bunzip2"),
    (b"\xfd7zXZ\x00", "xz", "unxz"),
    (b"\x28\xb5\x2f\xfd", "zstd", "unzstd"),
    (b"\x04\x22\x4d\x18", "lz4", "unlz4"),
)
_COMPRESSED_SUFFIXES = (".tgz", ".gz", ".bz2", ".tbz2", ".xz", ".txz", ".zst", ".zstd", ".lz4")

_KEY_EXT = re.compile(r"^((?:.*/|)[^.]+)[.]([^/]*)$")  # webdataset's base_plus_ext

#: Bytes one ranged GET reads while a remote shard's tar headers are scanned (``_RemoteStream``).
REMOTE_CHUNK_BYTES = 8 << 20

#: ``cache_dir``: a folder, ``True`` (the default folder) or ``False``/``None`` (no cache).
CacheDir = Union[str, bytes, "os.PathLike[str]", bool, None]


def _bad(shard: str, message: str) -> DecodeError:
    return DecodeError(f"{shard}: {message}", path=shard, kind="bad-shard")


def _unlink_quietly(path: str) -> None:
    """Remove a temporary file this process made; gone already or not removable: nothing to do."""
    with contextlib.suppress(OSError):
        os.unlink(path)


def default_cache_dir() -> str:
    """``$XDG_CACHE_HOME/trdata/webdataset``, or ``~/.cache/trdata/webdataset`` when XDG_CACHE_HOME is unset or
    not absolute (the XDG rule)."""
    base = os.environ.get("XDG_CACHE_HOME", "")
    if not os.path.isabs(base):
        base = os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "trdata", "webdataset")


def _target(shard: str, key: str, target_key: str, data: bytes) -> int | float | list[Any]:
    """A target member's value: ``.cls`` an integer (ASCII digits); ``.json`` an integer, a finite number or a
    (nested) list of numbers/booleans (multi-hot rows, soft labels); ``json:field`` that field of a JSON object."""
    ext, _, field = target_key.partition(":")
    try:
        value: Any = json.loads(data) if ext == "json" else int(data.decode("ascii").strip())
    except (ValueError, UnicodeDecodeError, RecursionError):
        what = "JSON" if ext == "json" else "an integer"
        raise _bad(shard, f"sample {key!r}: .{ext} target {data[:40]!r} is not {what}") from None
    if field:
        if not isinstance(value, dict) or field not in value:
            raise _bad(shard, f"sample {key!r}: .{ext} target {data[:40]!r} has no field {field!r}")
        value = value[field]
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

    __slots__ = ("extras", "key", "offset", "size", "target", "value")

    def __init__(
        self,
        shard: str,
        target_key: str | None,
        key: str,
        offset: int,
        size: int,
        target: bytes | None,
        extras: dict[str, tuple[int, int]] | None = None,
    ):
        self.key, self.offset, self.size, self.target = key, offset, size, target
        self.extras = {} if extras is None else extras  # extension → (offset, size) of an extras= member
        self.value = 0 if target_key is None or target is None else _target(shard, key, target_key, target)


def _cache_dir(value: object) -> str | None:
    """The folder ``cache_dir`` names (absolute), or None for no cache; anything else is a ConfigError."""
    if value is True:
        return default_cache_dir()
    if value is False or value is None:
        return None
    accepted = "a folder path (str, bytes or os.PathLike), True (the default folder) or False/None (no cache)"
    if not isinstance(value, (str, bytes, os.PathLike)):  # 0/1, numpy.bool_, 2.5, a list: no folder, no flag
        raise ConfigError(
            f"invalid cache_dir: {_shown(value)} (a {type(value).__name__}) must be {accepted}",
            parameter="cache_dir",
        )
    try:
        path = os.fsdecode(os.fspath(value))
    except TypeError:  # an __fspath__ that returns neither str nor bytes
        raise ConfigError(
            f"invalid cache_dir: {_shown(value)} must be {accepted}", parameter="cache_dir"
        ) from None
    if not path:  # os.path.abspath("") is the working directory: index files would land wherever one runs
        raise ConfigError(
            f"invalid cache_dir: '' is not a folder; it must be {accepted}", parameter="cache_dir"
        )
    if "\0" in path:
        raise ConfigError(f"invalid cache_dir: {_shown(path)} holds a NUL character", parameter="cache_dir")
    return os.path.abspath(os.path.expanduser(path))


def _compression(shard: str, head: bytes) -> str | None:
    """Why a shard starting with `head` is no tar when it is a compressed one, with the fix; else None."""
    for magic, name, command in _COMPRESSIONS:
        if head.startswith(magic):
            base = os.path.basename(shard)
            suffix = next((x for x in _COMPRESSED_SUFFIXES if base.lower().endswith(x)), None)
            if suffix is not None:  # a.tar.gz → a.tar, a.tgz → a.tar
                stem = base[: -len(suffix)]
                out = stem if stem.lower().endswith(".tar") else stem + ".tar"
            else:  # a compressed a.tar → a.decompressed.tar
                out = (base[:-4] if base.lower().endswith(".tar") else base) + ".decompressed.tar"
            out = os.path.join(os.path.dirname(shard), out)
            return (
                f"is {name}-compressed, which trdata does not read: its workers read each image member in place "
                f"by byte offset, which a compressed stream does not have (webdataset decompresses while it "
                f"streams). Decompress it and pass the .tar: {command} -c {shlex.quote(shard)} > {shlex.quote(out)}"
            )
    return None


class _RemoteStream(io.RawIOBase):
    """A remote shard (``_core.RemoteFile``) as the seekable file ``tarfile`` reads: reads are served from one
    buffered chunk of ``REMOTE_CHUNK_BYTES`` fetched by a ranged GET where the position is. tarfile reads the
    headers in order and seeks forward over member data, so indexing a shard reads it once from start to end in
    ``size / REMOTE_CHUNK_BYTES`` GETs, and a member larger than a chunk is skipped without being fetched."""

    def __init__(self, remote: Any) -> None:
        self.remote, self.size, self.pos = remote, int(remote.size), 0
        self.chunk_at, self.chunk = 0, b""

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.pos

    def seek(self, offset: int, whence: int = os.SEEK_SET) -> int:
        base = {os.SEEK_SET: 0, os.SEEK_CUR: self.pos, os.SEEK_END: self.size}[whence]
        self.pos = max(0, base + offset)
        return self.pos

    def pread(self, n: int, offset: int) -> bytes:
        """Up to ``n`` bytes at ``offset`` (fewer at the end of the object)."""
        n = max(0, min(n, self.size - offset))
        if n == 0:
            return b""
        if not (self.chunk_at <= offset and offset + n <= self.chunk_at + len(self.chunk)):
            if n > REMOTE_CHUNK_BYTES:
                return bytes(self.remote.read(offset, n))
            self.chunk_at = offset
            self.chunk = bytes(self.remote.read(offset, min(REMOTE_CHUNK_BYTES, self.size - offset)))
        at = offset - self.chunk_at
        return self.chunk[at : at + n]

    def read(self, n: int = -1) -> bytes:
        if n is None or n < 0:
            n = self.size - self.pos
        data = self.pread(n, self.pos)
        self.pos += len(data)
        return data

    def readinto(self, b: Any) -> int:
        data = self.read(len(b))
        b[: len(data)] = data
        return len(data)


def _pread(f: Any, n: int, offset: int) -> bytes:
    """``n`` bytes at ``offset`` of an open shard: a local file's descriptor or a ``_RemoteStream``."""
    if isinstance(f, _RemoteStream):
        return f.pread(n, offset)
    return os.pread(f.fileno(), n, offset)


class WebDataset(Source):
    """Tar ``shards`` (paths) in webdataset's layout. ``image_key``: the image member's extension, or several
    separated by ``;`` (webdataset's spelling, e.g. ``"jpg;png"``); default: the first of ``IMAGE_KEYS``
    present. ``target_key``: the target's extension (``"cls"``: ASCII digits, an integer; ``"json"``: a JSON
    integer, number or list of numbers), or None for no targets (all 0). Integer targets are class indices
    (int64); when any ``.json`` target is a float or a list, all become float32 ``(N, *S)`` targets (one shape
    for all; see ``trdata.sources``). ``classes`` optionally names the class indices.

    ``extras``: other members to deliver as ``batch.extras`` (webdataset's extensions, e.g. ``("txt", "json")``):
    ``.txt``/``.text`` as str (UTF-8), ``.json`` parsed, ``.npy`` as arrays (no pickles), anything else as bytes;
    read from the shards when a batch is made; a sample without the member gets None; a member over 16 MiB or not
    what its extension says is a ``DecodeError`` naming the shard and key. ``target_key="json:label"`` takes the
    target from a field of a ``.json`` member.

    ``shards``: a list of paths or URLs, or one ``str`` that is expanded as webdataset expands it (brace
    patterns such as ``"train-{000000..000127}.tar"``, ``{a,b}``, several braces, ``::`` between patterns;
    the core's ``src/source/braces.rs``). URLs (``s3://``, ``gs://``, ``az://``, ``http(s)://``) are read with
    ``storage_options`` (as ``Packed``'s): each shard is opened (a HEAD: its size and ETag), its index is built
    from one pass over it in ranged GETs of ``REMOTE_CHUNK_BYTES`` (tar headers parsed as they pass, member data
    skipped or discarded) and cached like a local shard's, keyed by the URL, size and ETag (no ETag: not cached);
    then every image member is one ranged GET when its sample is read (started ahead by the worker, so many are
    in flight), checked against the shard's ETag: a shard that changed since it was indexed is an error naming
    it, never other bytes. Local paths and URLs are not mixed in one source.

    ``cache_dir``: where the per-shard index is cached (module docs): ``True`` (default) for
    ``$XDG_CACHE_HOME/trdata/webdataset``, a folder (str, bytes or os.PathLike; not ``""``), or ``False``/``None``
    for no cache; anything else is a ``ConfigError``.

    Every sample must have an image and (unless ``target_key`` is None) a target, and no extension twice (as
    webdataset, which raises on a duplicate file name in a sample; extensions compared lower-cased); a shard that
    is not a tar (a compressed one is named as such, with the command that decompresses it), is truncated or
    breaks these rules is a ``DecodeError`` naming it (and the sample's key), when the source is made. An image
    member that is empty (0 bytes, ``kind="Empty"``) or does not decode is one bad sample: it follows the loader's
    ``on_error`` policy, named ``shard@offset+size`` (``keys[index]`` is its key)."""

    def __init__(
        self,
        shards: Sequence[str | os.PathLike[str]] | str | os.PathLike[str],
        image_key: str | None = None,
        target_key: str | None = "cls",
        classes: Iterable[str] = (),
        cache_dir: CacheDir = True,
        extras: Sequence[str] = (),
        storage_options: Any = None,
    ) -> None:
        if isinstance(shards, str):
            shards = _core.expand_shards(shards)  # a pattern, as webdataset expands it
        elif isinstance(shards, (bytes, os.PathLike)):
            shards = [shards]  # one shard, as webdataset accepts
        # bytes paths as str: the index file's identity (JSON) names the shard
        self.shards = [os.fsdecode(os.fspath(s)) for s in shards]
        self._options = dict(storage_options) if isinstance(storage_options, Mapping) else storage_options
        #: Per shard, its ``_core.RemoteFile`` (opened: size and ETag) when the shards are URLs.
        self._remote: list[Any] = []
        if _core.check_locations("shards", self.shards, self._options):  # all URLs (or all local)
            self._remote = [_core.RemoteFile(s, self._options) for s in self.shards]
        self._remote_of = dict(zip(self.shards, self._remote))
        self.image_key, self.target_key = image_key, target_key
        self.extra_keys = _extra_keys(extras)
        self.cache_dir = _cache_dir(cache_dir)
        # read (or made) once per source: every shard's index file is checked against it
        self._key = None if self.cache_dir is None else _index_key(self.cache_dir)
        file_index: list[int] = []
        offsets: list[int] = []
        sizes: list[int] = []
        values: list[Any] = []
        where: list[tuple[int, str]] = []
        self.keys: list[str] = []
        spans: list[tuple[int, _Sample]] = []
        for si, shard in enumerate(self.shards):
            for s in self._index(shard):
                if self.extra_keys:
                    spans.append((si, s))
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
        if self._remote:
            self._native = _core.NativeSource.remote_spans(
                self.shards,
                file_index,
                offsets,
                sizes,
                self.labels,
                self._options,
                [r.size for r in self._remote],
                [r.etag for r in self._remote],
            )
        else:
            self._native = _core.NativeSource.spans(self.shards, file_index, offsets, sizes, self.labels)
        # extras= members: (shard index, key, {ext: (offset, size)}) per sample, read by the worker that makes the row
        self._extra_spans = [(si, s.key, s.extras) for si, s in spans] if self.extra_keys else []

    @property
    def _has_extras(self) -> bool:
        return bool(self.extra_keys)

    def _members(self, i: int) -> tuple[str, str, list[tuple[str, bytes]]]:
        """Sample ``i``'s ``extras=`` members that its shard holds, read now: (shard, key, [(extension, bytes)]),
        a pread of the local shard or a ranged GET of a remote one (an unreadable shard: ``SourceError``)."""
        si, key, spans = self._extra_spans[i]
        shard = self.shards[si]
        try:
            fd = None if self._remote else os.open(shard, _OPEN_FLAGS)
            try:
                if fd is None:
                    remote = self._remote[si]
                    read = lambda n, offset: bytes(remote.read(offset, n))  # noqa: E731
                else:
                    read = lambda n, offset: os.pread(fd, n, offset)  # noqa: E731
                members = [
                    (e, _member_bytes(shard, key, e, read, *spans[e])) for e in self.extra_keys if e in spans
                ]
            finally:
                if fd is not None:
                    os.close(fd)
        except OSError as err:
            raise SourceError(f"cannot read extras of {shard!r}: {err.strerror}", shard) from None
        return shard, key, members

    def _row_extras(self, i: int, epoch: int) -> dict[str, Any] | None:
        """Sample ``i``'s ``extras=`` members, each read as its extension says (a missing member: None)."""
        if not self.extra_keys:
            return None
        shard, key, members = self._members(i)
        got = {e: _extra_value(shard, key, e, data) for e, data in members}
        return {e: got.get(e) for e in self.extra_keys}

    def _pack_extras(self, i: int) -> list[tuple[str, int, bytes]]:
        """Sample ``i``'s ``extras=`` members as ``trdata.pack`` stores them: their bytes as they are, of the kind
        their extension says, each checked as ``batch.extras`` would read it (a bad member is a ``DecodeError``
        naming shard and key now, not when the packed file is read)."""
        if not self.extra_keys:
            return []
        shard, key, members = self._members(i)
        for e, data in members:
            _extra_value(shard, key, e, data)  # the checks a read makes
        return [(e, kind_of_extension(e), data) for e, data in members]

    # ---- the per-shard index, cached -------------------------------------------------------------------

    def _index(self, shard: str) -> list[_Sample]:
        if self._remote:
            return self._index_remote(self._remote_of[shard], shard)
        # One descriptor for everything read of the shard: the identity is its fstat (no race with a rename
        # between a stat and an open), and a FIFO given as a shard is refused instead of blocking.
        try:
            fd = os.open(shard, _OPEN_FLAGS)
        except OSError as e:
            raise SourceError(f"shard {shard!r} is not a file ({e.strerror})", shard) from None
        with os.fdopen(fd, "rb") as f:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise SourceError(f"shard {shard!r} is not a regular file", shard)
            ident = {
                "version": CACHE_VERSION,
                "shard": os.path.abspath(shard),
                "size": st.st_size,
                "mtime_ns": st.st_mtime_ns,
                "ctime_ns": st.st_ctime_ns,
                "dev": st.st_dev,
                "ino": st.st_ino,
                "uid": os.geteuid(),
                "image_key": self.image_key,
                "target_key": self.target_key,
                "extras": list(self.extra_keys),
            }
            limit = st.st_size + CACHE_MARGIN_BYTES
            path = self._cache_path(ident)
            if path is not None and self._key is not None:
                cached = _read_cache(path, shard, ident, self._key, limit)
                if cached is not None:
                    return cached
            samples = list(self._scan(shard, f, st.st_size))
        if path is not None and self._key is not None:
            _write_cache(path, ident, samples, self._key, limit)
        return samples

    def _index_remote(self, remote: Any, shard: str) -> list[_Sample]:
        """A remote shard's index: cached under its URL, size and ETag (none without an ETag: a changed object
        could not be told), else one pass over it (``_RemoteStream``)."""
        ident = {
            "version": CACHE_VERSION,
            "url": shard,
            "size": int(remote.size),
            "etag": remote.etag,
            "uid": os.geteuid(),
            "image_key": self.image_key,
            "target_key": self.target_key,
            "extras": list(self.extra_keys),
        }
        limit = int(remote.size) + CACHE_MARGIN_BYTES
        path = self._cache_path(ident) if remote.etag is not None else None
        if path is not None and self._key is not None:
            cached = _read_cache(path, shard, ident, self._key, limit)
            if cached is not None:
                return cached
        samples = list(self._scan(shard, _RemoteStream(remote), int(remote.size)))
        if path is not None and self._key is not None:
            _write_cache(path, ident, samples, self._key, limit)
        return samples

    def _cache_path(self, ident: dict[str, Any]) -> str | None:
        if self.cache_dir is None:
            return None
        digest = hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()[:40]
        return os.path.join(self.cache_dir, f"{digest}.json")

    def _scan(self, shard: str, f: IO[bytes] | _RemoteStream, file_size: int) -> Iterator[_Sample]:
        """The index of one shard from its tar headers (the cache's source of truth)."""
        wanted = IMAGE_KEYS if self.image_key is None else tuple(self.image_key.split(";"))
        target_key = self.target_key
        target_ext = None if target_key is None else target_key.partition(":")[0]
        for key, members, data in self._samples(shard, f, target_ext, file_size):
            ext = next((e for e in wanted if e in members), None)
            if ext is None:
                raise _bad(
                    shard, f"sample {key!r} has no image member ({', '.join(wanted)}): {sorted(members)}"
                )
            if target_ext is not None and target_ext not in data:
                raise _bad(shard, f"sample {key!r} has no .{target_ext} target: {sorted(members)}")
            offset, size = members[ext]
            extras = {e: members[e] for e in self.extra_keys if e in members}
            target = None if target_ext is None else data[target_ext]
            yield _Sample(shard, target_key, key, offset, size, target, extras)

    @staticmethod
    def _samples(
        shard: str, f: IO[bytes] | _RemoteStream, target_key: str | None, file_size: int
    ) -> Iterable[tuple[str, dict[str, tuple[int, int]], dict[str, bytes]]]:
        """(key, {ext: (offset, size)}, {target ext: bytes}) per sample, in member order, from the shard open
        as `f` (at its start)."""
        key: str | None = None
        members: dict[str, tuple[int, int]] = {}
        data: dict[str, bytes] = {}
        seen: set[str] = set()  # this sample's extensions, lower-cased as webdataset compares them
        try:
            with tarfile.open(shard, mode="r:", fileobj=f) as tar:
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
                        key, members, data, seen = k, {}, {}, set()
                    # webdataset's group_by_keys raises ValueError on a repeated extension; last-wins hid it
                    if ext.lower() in seen:
                        raise _bad(
                            shard,
                            f"sample {k!r} has a duplicate .{ext} member {info.name!r} at byte {info.offset} "
                            f"(webdataset refuses a duplicate file name in a sample too; extensions compare "
                            f"case-insensitively)",
                        )
                    seen.add(ext.lower())
                    members[ext] = (info.offset_data, info.size)
                    if ext == target_key:
                        if info.size > MAX_TARGET_BYTES:
                            raise _bad(
                                shard, f"sample {k!r}: .{ext} target of {info.size} bytes is not a label"
                            )
                        t = tar.extractfile(info)
                        data[ext] = t.read() if t is not None else b""
                end = tar.offset  # where the next header would start
            # tarfile stops quietly at a truncated header; a complete archive ends with two zero blocks there.
            if _pread(f, 1024, end) != bytes(1024):
                raise _bad(
                    shard,
                    _compression(shard, _pread(f, 8, 0))
                    or f"has no end-of-archive marker at byte {end} (truncated or not a tar file)",
                )
        except (tarfile.TarError, EOFError, OSError) as e:
            try:
                head = _pread(f, 8, 0)
            except (OSError, SourceError):
                head = b""
            raise _bad(shard, _compression(shard, head) or f"is not a readable tar file ({e})") from None
        if key is not None:
            yield key, members, data

    def _native_source(self) -> _core.NativeSource:
        return self._native


# ---- the index file: key, reading, writing ---------------------------------------------------------------


def _index_key_path() -> str:
    """``$XDG_CACHE_HOME/trdata/index-key`` (or under ``~/.cache``): one key per user, whatever ``cache_dir``."""
    return os.path.join(os.path.dirname(default_cache_dir()), "index-key")


def _read_small(path: str, limit: int) -> tuple[os.stat_result, bytes] | None:
    """(fstat, contents) of `path` when it is a regular file (not a symlink) of at most `limit` bytes; None for
    anything else, without blocking (a FIFO) or reading more than `limit` + 1 bytes (a file that grows)."""
    try:
        fd = os.open(path, _OPEN_FLAGS | os.O_NOFOLLOW)
    except OSError:  # missing, a symlink (ELOOP), unreadable
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > limit:
            return None
        chunks: list[bytes] = []
        n = 0
        while True:
            chunk = os.read(fd, min(1 << 20, limit + 1 - n))
            if not chunk:
                return st, b"".join(chunks)
            chunks.append(chunk)
            n += len(chunk)
            if n > limit:
                return None
    except OSError:
        return None
    finally:
        os.close(fd)


def _load_index_key(path: str) -> bytes | None:
    """The key at `path` if it is a regular file of this user that nobody else can read, of the right size."""
    got = _read_small(path, INDEX_KEY_BYTES)
    if got is None:
        return None
    st, key = got
    if st.st_uid != os.geteuid() or st.st_mode & 0o077 or len(key) != INDEX_KEY_BYTES:
        return None
    return key


def _index_key(cache_dir: str | None = None) -> bytes | None:
    """This user's index-signing key, made on first use (random, mode 0600, published atomically); None when it
    can be neither read nor made (then there is no cache). Where the default place cannot be used (a read-only
    home, common in containers and batch jobs) and ``cache_dir`` is given, the key lives in ``cache_dir`` as
    ``.index-key-<uid>``: the index files the user asked to keep there were otherwise never written. It is as
    safe there: only a regular file of this user that nobody else can read is used as a key, so whoever else
    can write that folder can delete it (the indexes are rebuilt) but not plant one."""
    key = _index_key_at(_index_key_path())
    if key is None and cache_dir is not None:
        key = _index_key_at(os.path.join(cache_dir, f".index-key-{os.geteuid()}"))
    return key


def _index_key_at(path: str) -> bytes | None:
    """The key at `path`, made there if absent or unusable; None when it can be neither read nor made."""
    key = _load_index_key(path)
    if key is not None:
        return key
    folder = os.path.dirname(path)
    tmp = None
    try:
        os.makedirs(folder, mode=0o700, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".index-key-", dir=folder)  # mode 0600
        key = os.urandom(INDEX_KEY_BYTES)
        with os.fdopen(fd, "wb") as f:
            f.write(key)
            f.flush()
            os.fsync(f.fileno())  # after a crash: this key or none, never an empty file under the name
        try:
            os.link(tmp, path)  # never replaces: processes starting together all end up with the first key
        except FileExistsError:
            theirs = _load_index_key(path)
            if theirs is not None:
                return theirs
            os.replace(tmp, path)  # a bad one (another owner, readable by others, wrong size): replaced
            tmp = None
        except OSError:  # a file system without hard links
            os.replace(tmp, path)
            tmp = None
        return key
    except OSError:
        return None
    finally:
        if tmp is not None:
            _unlink_quietly(tmp)


def _cached_extras(spans: Any, wanted: list[str], size: int) -> dict[str, tuple[int, int]] | None:
    """A cached row's extras spans if well-formed (wanted extensions only, block-aligned spans inside the
    shard), else None."""
    if not isinstance(spans, dict):
        return None
    out = {}
    for ext, span in spans.items():
        if ext not in wanted or not (isinstance(span, list) and len(span) == 2):
            return None
        offset, length = span
        if not all(type(v) is int for v in span) or offset % 512 or length < 0 or offset + length > size:
            return None
        out[ext] = (offset, length)
    return out


def _extra_keys(extras: Any) -> tuple[str, ...]:
    """``extras``: a sequence of member extensions (``("txt", "json")``)."""
    if isinstance(extras, (str, bytes)) or not isinstance(extras, Sequence):
        raise ConfigError(
            f"invalid extras: {_shown(extras)} must be a sequence of member extensions, e.g. ('txt', 'json')",
            parameter="extras",
        )
    if not all(isinstance(e, str) and e and "/" not in e for e in extras):
        raise ConfigError(
            f"invalid extras: {_shown(extras)} must hold extensions (non-empty str)", parameter="extras"
        )
    return tuple(dict.fromkeys(extras))


def _extra_value(shard: str, key: str, ext: str, data: bytes) -> Any:
    """One extras= member's value from its bytes (extras.py ``decode``: ``.txt``/``.text`` a str, ``.json``
    parsed, ``.npy`` an array, anything else its bytes). A member that is not what its extension says is a
    ``DecodeError`` naming shard and key."""
    try:
        return decode(kind_of_extension(ext), data)
    except ValueError as e:
        raise _bad(shard, f"sample {key!r}: .{ext} member is not valid ({e})") from None


def _member_bytes(shard: str, key: str, ext: str, read: Any, offset: int, size: int) -> bytes:
    """An extras= member's bytes, at most ``MAX_EXTRA_BYTES`` (else a ``DecodeError`` naming shard and key)."""
    if size > MAX_EXTRA_BYTES:
        raise _bad(
            shard, f"sample {key!r}: .{ext} member of {size} bytes is over the {MAX_EXTRA_BYTES}-byte limit"
        )
    data = bytes(read(size, offset))
    if len(data) != size:
        raise _bad(shard, f"sample {key!r}: .{ext} member was cut short ({len(data)} of {size} bytes)")
    return data


def _signed_body(ident: Any, samples: Any) -> bytes:
    """The bytes an index file's MAC covers: its ``ident`` and ``samples`` as compact JSON (what the writer
    wrote; a parsed file of trdata's serializes back to exactly these bytes)."""
    return json.dumps({"ident": ident, "samples": samples}, separators=(",", ":")).encode()


def _mac(key: bytes, body: bytes) -> str:
    return hmac.new(key, body, hashlib.sha256).hexdigest()


def _read_cache(path: str, shard: str, ident: dict[str, Any], key: bytes, limit: int) -> list[_Sample] | None:
    """The cached index at `path` if it is a regular file of at most `limit` bytes, signed with `key`, for
    exactly `ident` and well-formed, with every member span inside the shard's current size; None otherwise (the
    caller rebuilds). Never raises, never blocks."""
    got = _read_small(path, limit)
    if got is None:
        return None
    try:
        doc = json.loads(got[1])
        if (
            not isinstance(doc, dict)
            or set(doc) != {"ident", "samples", "mac"}
            or not isinstance(doc["mac"], str)
        ):
            return None
        body = _signed_body(doc["ident"], doc["samples"])
    except (ValueError, RecursionError):
        return None
    if not hmac.compare_digest(_mac(key, body).encode(), doc["mac"].encode("utf-8", "replace")):
        return None  # unsigned, altered or forged
    if doc["ident"] != ident or not isinstance(doc["samples"], list):
        return None
    size = ident["size"]
    out = []
    end = 0  # where the previous member's data ends
    with_extras = bool(ident["extras"])
    for s in doc["samples"]:
        if not (isinstance(s, list) and len(s) == 4 + with_extras and isinstance(s[0], str)):
            return None
        key_, offset, length, target = s[:4]
        extras = _cached_extras(s[4], ident["extras"], size) if with_extras else {}
        if extras is None:
            return None
        if not all(type(v) is int for v in (offset, length)):  # not bool, not float
            return None
        # a tar member's data starts on a 512-byte block after its own 512-byte header, after the previous
        # member, and lies inside the file
        if offset % 512 or offset < end + 512 or length < 0 or offset + length > size:
            return None
        end = offset + length
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
            out.append(_Sample(shard, ident["target_key"], key_, offset, length, raw, extras))
        except DecodeError:
            return None  # a target the rules refuse: the shard never made it, rebuild (and fail there if so)
    return out


def _write_cache(path: str, ident: dict[str, Any], samples: list[_Sample], key: bytes, limit: int) -> None:
    """Write the index (``{"ident", "samples", "mac"}``, the MAC over ``_signed_body``) atomically (temporary
    file + rename in the same folder); any failure, or a file that would exceed `limit` bytes: no cache."""
    rows: list[list[Any]] = [
        [s.key, s.offset, s.size, None if s.target is None else s.target.decode("latin-1")] for s in samples
    ]
    if ident["extras"]:  # each row's extras= member spans, {ext: [offset, size]}
        for row, s in zip(rows, samples):
            row.append({e: list(span) for e, span in s.extras.items()})
    folder = os.path.dirname(path)
    tmp = None
    try:
        os.makedirs(folder, exist_ok=True)
        text = io.StringIO()
        json.dump({"ident": ident, "samples": rows}, text, separators=(",", ":"))
        body = text.getvalue().encode("ascii")  # json.dump escapes everything else (ensure_ascii)
        data = body[:-1] + b',"mac":"' + _mac(key, body).encode() + b'"}'
        if len(data) > limit:
            return  # a reader would ignore it unread
        fd, tmp = tempfile.mkstemp(prefix=".index-", suffix=".tmp", dir=folder)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
        tmp = None
    except (OSError, ValueError):
        pass  # unwritable or full: the index works without its cache
    finally:
        if tmp is not None:
            _unlink_quietly(tmp)
