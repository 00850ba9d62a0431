"""Any map-style dataset as a source: ``Loader(MyDataset())``, or :class:`DatasetSource` explicitly.

``len(dataset)`` samples; ``dataset[i]`` returns ``(image, target)`` or ``(image, target, extras)`` with
``extras`` a dict of str names to any values (a caption, parsed JSON, an array), delivered as ``batch.extras``; or
a dict with named keys, as a Hugging Face ``datasets`` row is (``{"image": …, "label": …}``): the image under
``image_key`` (default: ``"image"``, else ``"img"``), the target under ``label_key`` (default: ``"label"``, else
``"labels"``), every other key an extra. The keys are found in item 0, read when the source is made (that read
is the first epoch's read of sample 0, so ``__getitem__`` still runs once per sample per epoch): a dict without
them is a ``ConfigError`` naming the keys it has. A ``datasets`` ``ClassLabel`` feature names the classes.
The image is one of:

* encoded bytes (``bytes``/``bytearray``/``memoryview``: a JPEG, PNG, WebP… file's contents), decoded by the core
  as a file would be;
* a path (``str`` or ``os.PathLike``), read by the core with its file rules (regular files, bounded size);
* a uint8 numpy array, ``(H, W)`` gray or ``(H, W, C)`` with C 1 or 3 (HWC, as ``np.asarray(pil_image)``);
* a PIL image (``RGB`` and ``L`` as they are; any other mode converted to RGB as torchvision's ``pil_loader``
  does);
* a uint8 torch tensor, ``(C, H, W)`` with C 1 or 3 or ``(H, W)`` (torchvision's ``decode_image`` / ``PILToTensor``
  layout);
* a dict ``{"bytes": …, "path": …}`` (a ``datasets`` ``Image(decode=False)`` value): the bytes, else the path.

The target is a class index (an ``int``, numpy integer or one-element integer tensor). ``classes`` and
``class_to_idx`` are taken from the dataset when it has them (torchvision's datasets do).

``__getitem__`` runs on trdata's worker threads, exactly once per sample per epoch, in the plan's order, sharded
and resumable like every source. An exception in it, or a return value that is not an image, is a sample error
(``ImageErrorKind`` ``Dataset``) named ``<dataset>[i]`` and carrying the traceback; it follows ``on_error``.

Threads: ``__getitem__`` runs on several worker threads, so by default calls are serialized (one lock per source):
a dataset written for torch's DataLoader, whose workers are processes, may share state (one open file it seeks
and reads) that concurrent calls would interleave. ``DatasetSource(ds, thread_safe=True)`` drops the lock for a
dataset that is safe to call from several threads (its I/O then overlaps). Either way the core's decode and
augment run in parallel, outside the GIL. Return encoded bytes or a path, not decoded pixels, and keep the
rest of the pipeline in trdata; for the full speed, ``trdata.pack`` the dataset once (a ``DatasetSource`` packs
like any source) and train from the packed file.

torchvision's ``ImageFolder``/``DatasetFolder`` with their default loader and no transforms are read without
calling ``__getitem__`` (the core reads the files its ``samples`` lists: the same images, decoded as Pillow
decodes them, without a PIL round trip). A torchvision dataset given with a ``transform`` is refused: its
transform belongs in ``Loader(transforms=...)``.
"""

from __future__ import annotations

import atexit
import contextlib
import operator
import os
import threading
import traceback
import weakref
from collections.abc import Mapping
from typing import Any, Protocol

import numpy as np

from .. import _core
from .._args import _bool_arg
from ..errors import ConfigError, _shown
from .base import Source, _class_names
from .extras import encode_all
from .reads import MISSING, PerRead, weakly

#: The core's per-sample byte limit: a file, an encoded blob or a pixel array.
_MAX_SAMPLE_BYTES: int = _core.MAX_SAMPLE_BYTES

#: Built-in containers that have ``__len__``/``__getitem__`` but are never a dataset here.
_NOT_DATASETS = (str, bytes, bytearray, memoryview, list, tuple, dict, np.ndarray)


class _Closable(Protocol):
    def close(self) -> None: ...


#: Loaders over a DatasetSource not closed yet: closed at exit, before the interpreter finalizes (its workers
#: attach to the interpreter to call __getitem__; a thread that tries while it finalizes would hang there, and
#: the loader's drop would wait on it).
_OPEN: weakref.WeakSet[_Closable] = weakref.WeakSet()


def close_at_exit(loader: _Closable) -> None:
    """Close ``loader`` at interpreter exit if it is still open then."""
    _OPEN.add(loader)


@atexit.register
def _close_open_loaders() -> None:
    for loader in list(_OPEN):
        loader.close()


def is_map_style(obj: Any) -> bool:
    """True for an object the Loader takes as a map-style dataset (``__len__`` and ``__getitem__``, not a
    built-in container)."""
    cls = type(obj)
    return (
        hasattr(cls, "__len__")
        and hasattr(cls, "__getitem__")
        and not isinstance(obj, (Source, *_NOT_DATASETS))
    )


def _torchvision_folder(dataset: Any) -> bool:
    """A torchvision ``DatasetFolder`` (``ImageFolder``) with its default loader: its files can be read directly."""
    cls = type(dataset)
    if not cls.__module__.startswith("torchvision.datasets") or not hasattr(dataset, "samples"):
        return False
    from torchvision.datasets import folder

    return (
        isinstance(dataset, folder.DatasetFolder)
        and getattr(dataset, "loader", None) is folder.default_loader
    )


class DatasetSource(Source):
    """A map-style dataset (module docs): ``len(dataset)`` samples, ``dataset[i]`` → ``(image, target)``."""

    _python_in_workers = True

    def __init__(
        self,
        dataset: Any,
        *,
        thread_safe: bool = False,
        image_key: str | None = None,
        label_key: str | None = None,
    ) -> None:
        if not is_map_style(dataset):
            raise ConfigError(
                f"invalid dataset: a {type(dataset).__name__} must be a map-style dataset (__len__ and __getitem__)",
                parameter="dataset",
            )
        for attr in ("transform", "target_transform", "transforms"):
            if getattr(dataset, attr, None) is not None:
                raise ConfigError(
                    f"invalid dataset: {type(dataset).__name__}.{attr} is set; give the dataset with "
                    f"{attr}=None (trdata's workers read its images) and the pipeline as Loader(transforms=...)",
                    parameter="dataset",
                )
        self.dataset = _undecoded_images(dataset, image_key)
        dataset = self.dataset
        n = operator.index(len(dataset))
        self._len = n
        self._samples = list(dataset.samples) if _torchvision_folder(dataset) else None
        #: Serializes __getitem__ (module docs) unless the dataset is declared thread-safe.
        self._lock: threading.Lock | contextlib.nullcontext[None] = (
            contextlib.nullcontext() if _bool_arg(thread_safe, "thread_safe") else threading.Lock()
        )
        #: Item 0 as read when the source was made, until the first read of sample 0 takes it (module docs).
        self._peeked: dict[int, Any] = {}
        #: The keys of dict items (found in item 0), None for tuple items.
        self._keys = self._item_keys(image_key, label_key)
        classes = getattr(dataset, "classes", None)
        names = (
            list(classes)
            if isinstance(classes, (list, tuple)) and all(isinstance(c, str) for c in classes)
            else _feature_names(dataset, self._keys)
        )
        self.classes, self.class_to_idx = _class_names(names)
        #: The extras each read returned (a third item of __getitem__'s tuple), kept for the row it made (reads.py).
        self._read_extras = PerRead()
        cls = type(dataset)
        # the core's count rule; the class names the dataset in checkpoints (the core's Dataset::identity); the
        # source's fetch held weakly (reads.py weakly: no cycle through the native object)
        fetch = weakly(self._fetch, ("error", "the DatasetSource was freed while a loader read it", 0))
        self._native = _core.NativeSource.external(n, fetch, f"{cls.__module__}.{cls.__qualname__}")

    def __len__(self) -> int:
        return self._len

    def _item_keys(self, image_key: Any, label_key: Any) -> tuple[str, str] | None:
        """Read item 0 (kept for the first read of sample 0): for a dict item, its (image key, label key) —
        ConfigError naming its keys when it has none of them —; None for any other item (``image_key``/``label_key``
        are refused then). An item 0 that raises is left to its read (the sample's error)."""
        name = type(self.dataset).__name__
        if image_key is not None and not isinstance(image_key, str):
            raise ConfigError(
                f"invalid image_key: {_shown(image_key)} must be a str or None", parameter="image_key"
            )
        if label_key is not None and not isinstance(label_key, str):
            raise ConfigError(
                f"invalid label_key: {_shown(label_key)} must be a str or None", parameter="label_key"
            )
        item: Any = None
        if self._samples is None and self._len > 0:
            try:
                with self._lock:
                    item = self.dataset[0]
            except Exception:
                return None
            self._peeked[0] = item
        if not isinstance(item, Mapping):
            what = (
                " is read from its files" if self._samples is not None else
                " has no items" if self._len == 0 else f"[0] is a {type(item).__name__}, not a dict"
            )  # fmt: skip
            if image_key is not None:
                raise ConfigError(
                    f"invalid image_key: the keys name a dict item's fields, and {name}{what}",
                    parameter="image_key",
                )
            if label_key is not None:
                raise ConfigError(
                    f"invalid label_key: the keys name a dict item's fields, and {name}{what}",
                    parameter="label_key",
                )
            return None
        found = list(item)
        keys = []
        for param, given, defaults in (
            ("image_key", image_key, IMAGE_KEYS),
            ("label_key", label_key, LABEL_KEYS),
        ):
            key = given if given is not None else next((k for k in defaults if k in item), None)
            if key is None or key not in item:
                wanted = f"{given!r}" if given is not None else " or ".join(repr(k) for k in defaults)
                raise ConfigError(
                    f"invalid {param}: {name}[0] is a dict with the keys {_shown(found)}, without {wanted}: name its "
                    f"field with trdata.DatasetSource(dataset, {param}=...)",
                    parameter=param,
                )
            keys.append(key)
        if keys[0] == keys[1]:
            raise ConfigError(f"invalid label_key: {keys[1]!r} is the image's key too", parameter="label_key")
        return keys[0], keys[1]

    @property
    def labels(self) -> list[int]:  # type: ignore[override]
        raise AttributeError(
            f"a DatasetSource's labels are known only once its samples are read ({type(self.dataset).__name__}"
            ".__getitem__ returns them); read batch.labels"
        )

    @property
    def targets(self) -> np.ndarray:
        return np.asarray(self.labels)

    def _native_source(self) -> _core.NativeSource:
        return self._native

    def _epoch_started(self) -> None:
        self._read_extras.clear()

    @property
    def _has_extras(self) -> bool:
        """A dataset may return extras with any item: the workers ask for each row's."""
        return self._samples is None

    _extras_after_pixels = True  # __getitem__ returns them with the image

    def _row_extras(self, i: int, epoch: int) -> dict[str, Any] | None:
        """The extras the worker's read of sample ``i`` in ``epoch`` returned (a third item), None without."""
        extras = self._read_extras.take(epoch, i)
        return None if extras is MISSING else extras

    def _pack_extras(self, i: int) -> list[tuple[str, int, bytes]]:
        """The extras the pack's read of sample ``i`` returned (``trdata.pack`` reads every sample once, as epoch 0,
        and asks for its extras after the read)."""
        extras = self._read_extras.take(0, i)
        return [] if extras is MISSING else encode_all(extras, i)

    def _fetch(self, i: int, epoch: int) -> tuple[str, Any, int]:
        """Sample ``i`` as the core takes it (``NativeSource.external``): (kind, payload, label), or ("error",
        traceback, 0) when the dataset's code raised or returned something that is not an image."""
        try:
            if self._samples is not None:
                path, target = self._samples[i]
                return "path", os.fspath(path), operator.index(target)
            item = self._peeked.pop(i, MISSING) if self._peeked else MISSING
            if item is MISSING:
                with self._lock:
                    item = self.dataset[i]
            if self._keys is not None and isinstance(item, Mapping):
                item = _fields(item, self._keys)
            if (
                not isinstance(item, tuple)
                or len(item) not in (2, 3)
                or (len(item) == 3 and not _is_extras(item[2]))
            ):
                raise TypeError(
                    f"__getitem__ returned a {type(item).__name__}"
                    f"{f' of {len(item)} items' if isinstance(item, tuple) else ''}, not (image, target), "
                    "(image, target, {name: extra})"
                    f"{f' or a dict with the keys {self._keys}' if self._keys is not None else ''}"
                )
            kind, payload = _image(item[0])
            label = _label(self.class_to_idx.get(item[1], item[1]) if isinstance(item[1], str) else item[1])
            if len(item) == 3:
                extras = dict(item[2])
                self._read_extras.put(epoch, i, extras)
            return kind, payload, label
        except Exception:
            return "error", f"{type(self.dataset).__name__}[{i}] raised:\n{traceback.format_exc()}", 0


#: The keys of a dict item's image and target when ``image_key``/``label_key`` are not given, in order of preference
#: (Hugging Face ``datasets``' names: ``image`` and ``label`` mostly, ``img`` in CIFAR, ``labels`` in a few).
IMAGE_KEYS = ("image", "img")
LABEL_KEYS = ("label", "labels")


def _undecoded_images(dataset: Any, image_key: str | None) -> Any:
    """A Hugging Face ``datasets.Dataset`` whose image column is an ``Image`` feature that decodes (the default) as
    the same dataset with ``Image(decode=False)``: its items then carry the stored bytes (``{"bytes", "path"}``)
    read from the Arrow table, which the core decodes, instead of a PIL image made per row by ``datasets``. Any
    other dataset as it is."""
    features = getattr(dataset, "features", None)
    cast = getattr(dataset, "cast_column", None)
    if (
        not type(dataset).__module__.startswith("datasets")
        or not isinstance(features, Mapping)
        or cast is None
    ):
        return dataset
    for key in (image_key,) if image_key is not None else IMAGE_KEYS:
        feature: Any = features.get(key)
        if type(feature).__name__ == "Image" and getattr(feature, "decode", False):
            undecoded: Any = type(feature)
            return cast(key, undecoded(decode=False))
    return dataset


def _fields(item: Mapping[str, Any], keys: tuple[str, str]) -> tuple[Any, ...]:
    """A dict item as (image, target, extras): its other keys are the extras."""
    image_key, label_key = keys
    missing = [k for k in keys if k not in item]
    if missing:
        raise TypeError(
            f"__getitem__ returned a dict with the keys {_shown(list(item))}, without {missing[0]!r}"
        )
    return item[image_key], item[label_key], {k: v for k, v in item.items() if k not in keys}


def _feature_names(dataset: Any, keys: tuple[str, str] | None) -> list[str]:
    """The class names of a ``datasets`` ``ClassLabel`` feature under the label key, else []."""
    features = getattr(dataset, "features", None)
    if keys is None or not isinstance(features, Mapping):
        return []
    names = getattr(features.get(keys[1]), "names", None)
    return list(names) if isinstance(names, (list, tuple)) and all(isinstance(c, str) for c in names) else []


def _is_extras(extras: Any) -> bool:
    return isinstance(extras, Mapping) and all(isinstance(k, str) for k in extras)


def _image(image: Any) -> tuple[str, Any]:
    """(kind, payload) of an image as ``__getitem__`` returned it (module docs)."""
    if isinstance(image, bytes):
        return "encoded", image
    if isinstance(image, (bytearray, memoryview)):
        return "encoded", bytes(image)
    if isinstance(image, (str, os.PathLike)):
        return "path", os.fspath(image)
    if isinstance(image, np.ndarray):
        return "pixels", _pixels(image, "a numpy array")
    if isinstance(image, Mapping) and ("bytes" in image or "path" in image):  # datasets' Image(decode=False)
        data = image.get("bytes")
        return _image(data if data is not None else image.get("path"))
    cls = type(image)
    if cls.__module__.startswith("PIL.") and hasattr(image, "mode"):
        if image.mode not in ("RGB", "L"):
            image = image.convert("RGB")  # torchvision's pil_loader
        return "pixels", _pixels(np.asarray(image), "a PIL image")
    if cls.__module__.startswith("torch") and hasattr(image, "permute"):
        if image.ndim == 3:
            image = image.permute(1, 2, 0)  # CHW → HWC
        return "pixels", _pixels(image.detach().cpu().contiguous().numpy(), "a tensor")
    raise TypeError(
        f"the image is a {cls.__name__}: it must be bytes, a path, a uint8 array, a PIL image, a tensor or a "
        "{'bytes': ..., 'path': ...} dict"
    )


def _pixels(a: np.ndarray, what: str) -> np.ndarray:
    if a.dtype != np.uint8:
        raise TypeError(f"{what} of dtype {a.dtype} must be uint8 (the images of a source are 8-bit)")
    if a.ndim not in (2, 3) or (a.ndim == 3 and a.shape[2] not in (1, 3)):
        raise TypeError(
            f"{what} of shape {a.shape} must be (H, W) or (H, W, C) with C 1 or 3 (CHW for tensors)"
        )
    if a.nbytes > _MAX_SAMPLE_BYTES:  # before the contiguous copy (the core checks the same limit)
        raise ValueError(f"{what} of shape {a.shape} is over the {_MAX_SAMPLE_BYTES}-byte sample limit")
    return np.ascontiguousarray(a)


def _label(target: Any) -> int:
    """The class index ``target`` stands for: an int of the core's label type (int64). Messages show the target
    bounded (``_shown``): it may be anything ``__getitem__`` returned."""
    if isinstance(target, (bool, np.bool_)):
        raise TypeError(f"the target {_shown(target)} is a bool, not a class index")
    if hasattr(target, "numel") and target.numel() == 1:
        target = target.item()
    try:
        label = operator.index(target)
    except TypeError:
        raise TypeError(
            f"the target {_shown(target)} is a {type(target).__name__}, not a class index (an int)"
        ) from None
    if not -(2**63) <= label < 2**63:
        raise ValueError(f"the target {_shown(label)} does not fit a class index (int64)")
    return label
