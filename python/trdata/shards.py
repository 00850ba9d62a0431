"""WebDataset shards: tar files as ``webdataset.TarWriter`` writes them, read in place.

A sample is a run of consecutive members sharing a key (webdataset's rule: the member's path up to the first
``.`` of its file name; the rest is the extension, e.g. ``0001.jpg`` / ``0001.cls``). The index (shard, byte
offset and size of each sample's image member, and its target) is built once when the source is made, from
the tar headers only (no image is read then); the workers read each image member straight from its shard.
Order: shard order as given, then member order, so a reproducible loader over the shards yields the same
batches as one over a FileList of the same images."""

from __future__ import annotations

import json
import os
import re
import tarfile
from collections.abc import Iterable, Sequence
from typing import Any

from . import _core
from .errors import DecodeError, SourceError
from .sources import Source, _class_names

#: Image extensions tried, in this order, when ``image_key`` is not given.
IMAGE_KEYS = ("jpg", "jpeg", "png", "webp", "ppm", "pgm", "bmp", "tif", "tiff", "gif")
#: Target members larger than this are refused (a class index or a small JSON value, never a blob).
MAX_TARGET_BYTES = 1 << 16

_KEY_EXT = re.compile(r"^((?:.*/|)[^.]+)[.]([^/]*)$")  # webdataset's base_plus_ext


def _bad(shard: str, message: str) -> DecodeError:
    return DecodeError(f"{shard}: {message}", path=shard, kind="bad-shard")


def _target(shard: str, key: str, ext: str, data: bytes) -> int:
    try:
        value: Any = json.loads(data) if ext == "json" else int(data.decode("ascii").strip())
    except (ValueError, UnicodeDecodeError):
        raise _bad(shard, f"sample {key!r}: .{ext} target {data[:40]!r} is not an integer") from None
    if isinstance(value, bool) or not isinstance(value, int) or not -(2**63) <= value < 2**63:
        raise _bad(shard, f"sample {key!r}: .{ext} target {value!r} is not an int64 integer")
    return value


class WebDataset(Source):
    """Tar ``shards`` (paths) in webdataset's layout. ``image_key``: the image member's extension, or several
    separated by ``;`` (webdataset's spelling, e.g. ``"jpg;png"``); default: the first of ``IMAGE_KEYS``
    present. ``target_key``: the integer target's extension (``"cls"``: ASCII digits; ``"json"``: a JSON
    integer), or None for no targets (all 0). ``classes`` optionally names the targets.

    Every sample must have an image and (unless ``target_key`` is None) a target; a shard that is not a tar,
    is truncated or breaks that rule is a ``DecodeError`` naming it, when the source is made. An image member
    that does not decode follows the loader's ``on_error`` policy, named ``shard@offset+size``."""

    def __init__(
        self,
        shards: Sequence[str | os.PathLike[str]],
        image_key: str | None = None,
        target_key: str | None = "cls",
        classes: Iterable[str] = (),
    ) -> None:
        if isinstance(shards, (str, bytes, os.PathLike)):
            shards = [shards]  # one shard, as webdataset accepts
        self.shards = [os.fspath(s) for s in shards]
        wanted = IMAGE_KEYS if image_key is None else tuple(image_key.split(";"))
        file_index: list[int] = []
        offsets: list[int] = []
        sizes: list[int] = []
        self.labels = []
        self.keys: list[str] = []
        for si, shard in enumerate(self.shards):
            for key, members, data in self._samples(shard, target_key):
                ext = next((e for e in wanted if e in members), None)
                if ext is None:
                    raise _bad(
                        shard, f"sample {key!r} has no image member ({', '.join(wanted)}): {sorted(members)}"
                    )
                offset, size = members[ext]
                file_index.append(si)
                offsets.append(offset)
                sizes.append(size)
                self.keys.append(key)
                if target_key is None:
                    self.labels.append(0)
                elif target_key not in data:
                    raise _bad(shard, f"sample {key!r} has no .{target_key} target: {sorted(members)}")
                else:
                    self.labels.append(_target(shard, key, target_key, data[target_key]))
        self.classes, self.class_to_idx = _class_names(classes)
        self._native = _core.NativeSource.spans(self.shards, file_index, offsets, sizes, self.labels)

    @staticmethod
    def _samples(
        shard: str, target_key: str | None
    ) -> Iterable[tuple[str, dict[str, tuple[int, int]], dict[str, bytes]]]:
        """(key, {ext: (offset, size)}, {target ext: bytes}) per sample, in member order."""
        if not os.path.isfile(shard):
            raise SourceError(f"shard {shard!r} is not a file", shard)
        file_size = os.path.getsize(shard)
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
