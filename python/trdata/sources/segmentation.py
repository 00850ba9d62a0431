"""Semantic segmentation: an image folder and a folder of PNG label maps (VOC's ``SegmentationClass``, ADE20K's
``annotations``, Cityscapes' ``gtFine``), each map moved with its image.

``SegmentationFolder(images, masks, ids=None, image_suffix=None, mask_suffix=".png", classes=())``
pairs each label map with its image by key: the map ``masks/<key><mask_suffix>``, the image
``images/<key><image_suffix>`` (or, without ``image_suffix``, the one file ``images/<key>.<ext>`` with an image
extension of ``IMG_EXTENSIONS``). Samples are the keys of ``ids`` in its order (VOC's
``ImageSets/Segmentation/train.txt``: ``ids=open(path).read().split()``), else every map below ``masks``
(recursively) in sorted order. Cityscapes: ``image_suffix="_leftImg8bit.png"``,
``mask_suffix="_gtFine_labelIds.png"`` (its keys keep their city folder).

A label map holds class indices: palette PNGs (mode ``P``, VOC's) are read as their indices, not their colors;
``L`` (ADE20K, Cityscapes), ``I``/``I;16`` with values up to 255 and bilevel ``1`` are accepted; an RGB map, a map
that is not a PNG, or one whose size is not its image's is a ``SourceError`` naming both files (checked from the
headers at construction); so is a FIFO, a device or a directory where a map or an image belongs (the files are
opened by the core's rules, never waited on). ``batch.targets[i]["mask"]`` is the map moved with the image: uint8 ``(h, w)``,
nearest, 255 (``FILL``, the ``ignore_index`` of torchvision's segmentation references) wherever the output
leaves the image (pads, crops larger than the image, warps); also ``image_id`` (the index), ``orig_size`` and
``size`` (h, w). The maps are read by the loader's workers (Pillow, each beside its image's decode) and moved
there: a map that cannot be read or no longer fits its image is that sample's ``DecodeError(kind="Target")`` under
``on_error``. Under a ``trdata.Mosaic`` a row's map is 255 but for its parts' windows, each holding the part's map
nearest-resized as its pixels were (src/sample/mod.rs ``merge_mosaic``).
"""

from __future__ import annotations

import io
import os
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from .. import _core
from ..errors import ConfigError, SourceError
from . import packed_targets
from .base import IMG_EXTENSIONS, Source, _class_names, refuse_url
from .extras import MAX_EXTRA_BYTES
from .targets import (
    ImageHeader,
    list_files,
    open_regular,
    opt_str,
    path_arg,
    pillow,
    python_targets,
    read_header,
)

#: Pillow modes of a label map of class indices.
MAP_MODES = ("P", "L", "I", "I;16", "1")
#: The label where a moved map leaves its image: torchvision's segmentation references' ignore_index.
FILL = 255


class SegmentationFolder(Source):
    """Images + PNG label maps paired by key (module docs)."""

    def __init__(
        self,
        images: str | os.PathLike[str],
        masks: str | os.PathLike[str],
        *,
        ids: Sequence[str] | None = None,
        image_suffix: str | None = None,
        mask_suffix: str = ".png",
        classes: Iterable[str] = (),
        storage_options: Any = None,
    ) -> None:
        refuse_url("SegmentationFolder", "images", images, storage_options)
        refuse_url("SegmentationFolder", "masks", masks, None)
        self.images_root = path_arg(images, "images")
        self.masks_root = path_arg(masks, "masks")
        mask_suffix = opt_str(mask_suffix, "mask_suffix") or ""
        image_suffix = opt_str(image_suffix, "image_suffix")
        self.classes, self.class_to_idx = _class_names(classes)
        keys = _keys(ids)
        if keys is None:
            maps = [m for m in list_files(self.masks_root, (mask_suffix.lower(),)) if m.endswith(mask_suffix)]
            keys = [os.path.relpath(m, self.masks_root) for m in maps]
            keys = [k[: len(k) - len(mask_suffix)] for k in keys]
        else:
            maps = [os.path.join(self.masks_root, k + mask_suffix) for k in keys]
        if not maps:
            raise SourceError(f"{self.masks_root}: no label map (*{mask_suffix})", self.masks_root)
        self.keys = keys
        self.mask_paths = maps
        self.paths = self._image_paths(keys, image_suffix)
        image = pillow("SegmentationFolder")
        self._sizes = np.zeros((len(keys), 2), np.int64)  # (width, height), as target_plans takes them
        for i, (p, m) in enumerate(zip(self.paths, self.mask_paths)):
            header = read_header(image, p)
            if not os.path.exists(m):  # anything else that is not a regular file: read_header says what it is
                raise SourceError(f"{m}: no label map for the image {p}", m)
            _check_map(read_header(image, m), m, header, p)
            self._sizes[i] = header.width, header.height
        self.labels = [0] * len(self.paths)  # the per-image class the core holds: none (the target is a map)
        # the sizes read here: the worker checks each decoded image against its own (its map was checked too),
        # and reads each row's label map (``_record``; a map that cannot be read is the sample's error, under
        # on_error) and moves it with the image
        native = _core.NativeSource.files(self.paths, self.labels, []).with_sizes(self._sizes)
        self._native = python_targets(native, self._record, "label_map", self.masks_root, fill=FILL)

    def _image_paths(self, keys: list[str], image_suffix: str | None) -> list[str]:
        if image_suffix is not None:
            paths = [os.path.join(self.images_root, k + image_suffix) for k in keys]
            missing = next((p for p in paths if not os.path.exists(p)), None)
            if missing is not None:
                raise SourceError(f"{missing}: no such image", missing)
            return paths
        by_key: dict[str, list[str]] = {}
        for p in list_files(self.images_root, IMG_EXTENSIONS):
            by_key.setdefault(os.path.splitext(os.path.relpath(p, self.images_root))[0], []).append(p)
        out = []
        for k, m in zip(keys, self.mask_paths):
            found = by_key.get(k, [])
            if len(found) != 1:
                what = "no image" if not found else f"{len(found)} images ({', '.join(found[:3])})"
                raise SourceError(
                    f"{m}: {what} named {k}.<ext> in {self.images_root} (image_suffix= names one)", m
                )
            out.append(found[0])
        return out

    def __repr__(self) -> str:
        return f"SegmentationFolder({self.images_root!r}, {self.masks_root!r}, {len(self)} images)"

    def _native_source(self) -> _core.NativeSource:
        return self._native

    #: The workers read the label maps (``_record``).
    _python_in_workers = True

    def label_map(self, i: int) -> np.ndarray:
        """Sample ``i``'s label map as stored: uint8 ``(H, W)`` class indices (palette indices for mode P)."""
        w, h = (int(v) for v in self._sizes[i])
        return decode_label_map(self.mask_paths[i], self.mask_paths[i], (w, h), self.paths[i])

    def _record(self, i: int) -> dict[str, Any]:
        """Sample ``i``'s target record (sources/targets.py ``python_targets``): its label map as stored."""
        w, h = (int(v) for v in self._sizes[i])
        return {"image_id": i, "size": (w, h), "label_map": self.label_map(i)}

    def _pack_extras(self, i: int) -> list[tuple[str, int, bytes]]:
        """Sample ``i``'s label map file, as ``trdata.pack`` stores it (sources/packed_targets.py)."""
        path = self.mask_paths[i]
        try:
            with open_regular(path) as f:
                png = f.read(MAX_EXTRA_BYTES + 1)
        except SourceError:  # not a regular file
            raise
        except OSError as e:
            raise SourceError(f"{path}: cannot read the label map ({e.strerror})", path) from None
        if len(png) > MAX_EXTRA_BYTES:
            raise SourceError(
                f"{path}: a label map file larger than {MAX_EXTRA_BYTES} bytes cannot be packed", path
            )
        return packed_targets.encode({"size": self._sizes[i], "image_id": i, "label_map_png": png})


def decode_label_map(src: str | bytes, name: str, size: tuple[int, int], image: str) -> np.ndarray:
    """A label map (a PNG file's path, or its bytes) decoded to uint8 ``(H, W)`` class indices and checked against
    its image's ``size`` (w, h); ``name`` (the file, or ``file#record`` in a pack) and ``image`` name them in the
    ``SourceError``."""
    pil = pillow("SegmentationFolder")
    w, h = size
    try:
        with io.BytesIO(src) if isinstance(src, bytes) else open_regular(src) as f, pil.open(f) as im:
            if im.mode not in MAP_MODES:
                raise SourceError(f"{name}: mode {im.mode} is not a label map of class indices", name)
            if im.size != (w, h):  # before decoding: the file may have changed since the source was made
                raise SourceError(
                    f"{name}: a label map of {im.size[0]}x{im.size[1]} for the image {image} of {w}x{h}", name
                )
            a = np.asarray(im)
    except SourceError:
        raise
    except Exception as e:  # Pillow raises many kinds for a damaged file
        raise SourceError(f"{name}: cannot decode the label map ({type(e).__name__}: {e})", name) from None
    if a.shape != (h, w):  # a decoder's surprise (a multi-band mode): refused rather than reshaped
        raise SourceError(f"{name}: decoded to shape {a.shape}, not ({h}, {w})", name)
    if a.dtype != np.uint8:
        if a.dtype == np.bool_:
            a = a.astype(np.uint8)
        elif a.size and (int(a.max()) > 255 or int(a.min()) < 0):
            raise SourceError(f"{name}: class index {int(a.max())} does not fit a uint8 label map", name)
        else:
            a = a.astype(np.uint8)
    return a


def _keys(ids: Any) -> list[str] | None:
    """``ids``: None or a sequence of str keys."""
    if ids is None:
        return None
    if isinstance(ids, (str, bytes)) or not isinstance(ids, Sequence):
        raise ConfigError(
            f"invalid ids: a {type(ids).__name__} must be a sequence of keys (str)", parameter="ids"
        )
    bad = next((k for k in ids if not isinstance(k, str)), None)
    if bad is not None:
        raise ConfigError(f"invalid ids: {bad!r} is a {type(bad).__name__}, not a key (str)", parameter="ids")
    return list(ids)


def _check_map(m: ImageHeader, mask_path: str, image: ImageHeader, image_path: str) -> None:
    """A label map's header against its image's: a PNG of class indices of the image's size."""
    if m.format != "PNG":
        raise SourceError(
            f"{mask_path}: a {m.format} file, not a PNG label map (for the image {image_path})", mask_path
        )
    if m.mode not in MAP_MODES:
        raise SourceError(
            f"{mask_path}: mode {m.mode} is not a label map of class indices ({', '.join(MAP_MODES)}; an RGB "
            f"color-coded map must be converted to indices first), for the image {image_path}",
            mask_path,
        )
    if (m.width, m.height) != (image.width, image.height):
        raise SourceError(
            f"{mask_path}: a label map of {m.width}x{m.height} for the image {image_path} of "
            f"{image.width}x{image.height}",
            mask_path,
        )
