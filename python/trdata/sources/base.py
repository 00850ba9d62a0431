"""The Source base class and the general sources: ImageFolder (torchvision's rules), FileList (explicit paths and
labels), Bytes (encoded images in memory) and Arrays (raw uint8 pixels in memory, no decode). The classic
datasets are in ``classic.py``, WebDataset shards in ``shards.py``, packed files in ``packed.py``.

Targets. Every source has one target per sample, as ``batch.labels`` delivers them (``Source.targets``):

* **class indices** (the default, and what ImageFolder and the classic datasets have): int64 ``(N,)``, given as a
  sequence of ints (or bools, 0/1) or a 1-D integer/bool array. The Rust core holds them (``labels``) and
  ``batch.labels`` is int64 ``(B,)`` — what ``CrossEntropyLoss`` takes.
* **float targets**: anything else numeric — a sequence with a float in it (regression values, soft binary
  labels), or an array of shape ``(N, *S)`` that is not 1-D integer: float arrays of any shape, and integer or
  bool arrays with per-sample shape ``S != ()`` (multi-hot rows) — become float32 ``(N, *S)`` (bools as 0/1),
  as torch's ``BCEWithLogitsLoss`` and soft-label losses take them; a list of equal-shape per-sample arrays is
  stacked the same way. Python keeps them; ``batch.labels`` is the gather ``targets[batch.indices]`` (float32
  ``(B, *S)``; on a CUDA loader a tensor on the batch's device), so padded and filled rows carry their sample's
  target exactly as ``indices`` says. The core gets labels 0 of the same count (its count rule applies as for
  class indices); ``labels`` is then all 0.

Refused with ``ConfigError`` (parameter ``labels``, the core's name for the per-sample target list, whatever the
source calls its argument): strings, sets/dicts, ragged per-sample shapes, non-numeric arrays, non-finite float
targets (a NaN target silently turns every loss into NaN), a count that is not one per sample.

Paths are bytes on Linux and may not be UTF-8: here they are ``str`` as ``os.fsdecode`` gives them
(undecodable bytes become lone surrogates, like ``os.scandir`` gives them to torchvision), and they reach the
Rust core unchanged (``os.fsencode`` restores the exact bytes)."""

from __future__ import annotations

import numbers
import operator
import os
from collections.abc import Iterable, Mapping, MappingView, Sequence, Set
from typing import Any

import numpy as np

from .. import _core
from ..errors import ConfigError
from .extras import check_extras, encode_all

_INT64_MIN = -(2**63)
_INT64_MAX = 2**63 - 1

#: torchvision's ``IMG_EXTENSIONS``: ImageFolder lists files whose lower-cased name ends with one of these.
IMG_EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")


class Source:
    """A list of samples, each an image and a target (module docs). ``classes`` names the class indices where
    known, ``class_to_idx`` maps each name to its index (both as torchvision names them; empty when unknown)."""

    labels: list[int]
    classes: list[str]
    class_to_idx: dict[str, int]
    #: Float targets, float32 (N, *S), when the source has them (module docs); None for class indices.
    _float_targets: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.labels)

    @property
    def targets(self) -> np.ndarray:
        """Every sample's target as ``batch.labels`` delivers it: int64 (N,) class indices, or float32 (N, *S)."""
        if self._float_targets is not None:
            return self._float_targets
        return np.asarray(self.labels, dtype=np.int64)

    def _native_source(self) -> _core.NativeSource:
        """The core's dataset for a Loader."""
        raise NotImplementedError(f"{type(self).__name__} is not a trdata source")

    #: Extra per-sample fields (``extras=``): name → one value per sample; empty without extras.
    _extras: dict[str, list[Any]] | None = None

    @property
    def _has_targets(self) -> bool:
        """Whether rows carry targets made by the workers beside each image (detection, segmentation: the
        source's native side has a target store, src/sample/)."""
        return self._native_source().target_kind is not None

    #: Whether the loader's workers call this source's Python code (``__getitem__``, targets made per read): a
    #: loader over it is closed at interpreter exit, before the interpreter finalizes (dataset.py
    #: ``close_at_exit``).
    _python_in_workers = False

    def _epoch_started(self) -> None:
        """Called by a Loader when it starts an epoch (the previous one over, or cancelled)."""

    @property
    def _has_extras(self) -> bool:
        """Whether rows carry extras: the loader's workers then call :meth:`_row_extras` for each row they make."""
        return bool(self._extras)

    #: Whether the image's own read makes the extras (a dataset's third item): the worker then takes them after
    #: the pixels, and :meth:`_row_extras` must not fail; else it reads them before the pixels.
    _extras_after_pixels = False

    def _row_extras(self, i: int, epoch: int) -> dict[str, Any] | None:
        """Sample ``i``'s extras, name → value (None: it has none), called by the worker that makes its row in
        ``epoch`` before its pixels (src/py/targets.rs ``PyExtras``); reading them here (a shard's member, a pack's
        record) is the worker's read, and a failure is that sample's error under ``on_error``."""
        if not self._extras:
            return None
        return {name: values[i] for name, values in self._extras.items()}

    def _pack_extras(self, i: int) -> list[tuple[str, int, bytes]]:
        """Sample ``i``'s extras as ``trdata.pack`` stores them (extras.py ``encode_all``); called once per
        sample, in order, after the sample was read."""
        if not self._extras:
            return []
        return encode_all({name: values[i] for name, values in self._extras.items()}, i)


class _Files(Source):
    """Sources of image files: ``paths[i]`` with label ``labels[i]``; objects behind URLs when ``_native`` was
    made for them (``_remote_files``)."""

    paths: list[str]
    _native: _core.NativeSource | None = None

    def _native_source(self) -> _core.NativeSource:
        if self._native is not None:
            return self._native
        return _core.NativeSource.files(self.paths, self.labels, list(self.classes))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({len(self)} samples, {len(self.classes)} classes)"


class ImageFolder(_Files):
    """``root/<class>/**/<image>`` with torchvision's ``ImageFolder`` rules, so indices, labels and
    ``classes`` equal torchvision's for the same folder:

    * classes: the sub-directories of ``root`` (symlinks followed), sorted as Python sorts their names;
      label = position; ``class_to_idx`` maps name → label;
    * files: every directory below a class folder (``os.walk(followlinks=True)``) in path order, names
      sorted; a file belongs when its name ends with one of :data:`IMG_EXTENSIONS` (case-insensitive).
      every listed format is decoded; a file whose bytes are another format (AVIF, HEIF, …) fails when
      read, with an error that names the format (``on_error`` decides);
    * ``SourceError`` (a ``FileNotFoundError``) when there is no class folder or a class has no file.

    Unlike torchvision, a directory is entered at most once per class (told by device and inode). Directories
    are entered in the order above, so a directory reached by several paths (symlinks between siblings, a
    link to an ancestor, a loop) has its files listed once, under the first of those paths, whatever order
    the file system returns; torchvision's ``os.walk`` lists them once per path (forever around a cycle).
    Otherwise links are followed as in torchvision: a link to a file is listed, a link to another class is
    entered, nothing is deduplicated across classes. An unreadable directory is an error rather than skipped.
    Names that are not UTF-8 are kept (as ``os.fsdecode`` strings). Scanned once, in parallel, by the Rust
    core; Ctrl-C stops the scan.

    ``root`` may be a bucket prefix (``s3://bucket/train/``, ``gs://``, ``az://``) read with ``storage_options``
    (as ``Packed``'s): listed once, the same rules applied to the keys (first-level "folders" are the classes),
    each image one GET checked against the size and ETag the listing gave; workers start the GETs of their next
    samples ahead (docs/guide/sources.md)."""

    def __init__(
        self,
        root: str | bytes | os.PathLike[str] | os.PathLike[bytes],
        *,
        storage_options: Mapping[str, str | bool | int | float] | None = None,
    ) -> None:
        try:
            self.root = os.fsdecode(root)
        except TypeError:
            raise ConfigError(
                f"invalid root: {root!r} must be a path (str, bytes or os.PathLike), not a {type(root).__name__}",
                parameter="root",
            ) from None
        options = _storage_options(storage_options)
        if _core.check_locations("root", [self.root], options, prefixes=True):
            # a bucket prefix: listed once, torchvision's rules over the keys (source/remote.rs)
            self.paths, self.labels, self.classes, sizes, etags = _core.scan_object_folder(self.root, options)
            self._native = _core.NativeSource.remote_files(
                self.paths, self.labels, list(self.classes), options, sizes, etags
            )
        else:
            self.root = os.path.expanduser(self.root)
            self.paths, self.labels, self.classes = _core.scan_image_folder(self.root)
        self.class_to_idx = {c: i for i, c in enumerate(self.classes)}


class FileList(_Files):
    """Explicit ``paths`` (a sequence of ``str``, ``bytes`` or ``os.PathLike``) and their ``labels`` — the
    targets, one per path (default: all 0) — and optionally ``classes``, the names of the class indices
    (``class_to_idx`` as torchvision has it). Files are opened when decoded: a missing one follows the loader's
    ``on_error`` policy.

    Both must be ordered: lists, tuples, numpy arrays, generators... A ``set``, ``frozenset`` or ``dict``
    (or a dict view) is refused: its order is arbitrary, so index ``i`` and the pairing of paths with labels
    would be too.

    Class indices are integers in the int64 range: Python ``int``, numpy integers, ``bool`` (as 0/1, binary
    labels often come as bools) and 1-D integer/bool arrays. Floats make float32 targets (``[0.7, 2.0]``,
    float arrays, (N, K) multi-hot or soft-label rows: see the module docs). Strings are refused, never
    parsed.

    ``paths`` may all be URLs (``s3://``, ``gs://``, ``az://``, ``http(s)://``) read with ``storage_options``
    (as ``Packed``'s); local paths and URLs are not mixed."""

    def __init__(
        self,
        paths: Iterable[str | bytes | os.PathLike[str] | os.PathLike[bytes]],
        labels: Any = None,
        classes: Iterable[str] = (),
        extras: Mapping[str, Sequence[Any]] | None = None,
        storage_options: Mapping[str, str | bool | int | float] | None = None,
    ) -> None:
        self.paths = _check_paths(paths)
        self._extras = check_extras(extras, len(self.paths))
        if labels is None:
            self.labels = [0] * len(self.paths)
        else:
            self.labels, self._float_targets = _check_targets(_named_targets(labels, classes))
        # the list's rules (non-empty, usable paths, one label per path) are the core's
        _core.check_file_list(self.paths, len(self.labels))
        self.classes, self.class_to_idx = _class_names(classes)
        options = _storage_options(storage_options)
        if _core.check_locations("paths", self.paths, options):  # all URLs (or all local)
            self._native = _core.NativeSource.remote_files(
                self.paths, self.labels, list(self.classes), options
            )


def _storage_options(value: Any) -> Any:
    """``storage_options`` as the core takes it (a dict; anything else goes on for the core to refuse)."""
    return dict(value) if isinstance(value, Mapping) else value


def refuse_url(source: str, parameter: str, value: Any, storage_options: Any) -> None:
    """Sources whose files are read by Python (annotations, the classic datasets' formats) read local files only:
    a URL in ``parameter`` or any ``storage_options`` is the core's ``ConfigError`` saying to pack the data first
    (storage/locations.rs). A value that is no path is left to the source's own checks."""
    if isinstance(value, (str, bytes, os.PathLike)):
        _core.check_local_only(source, parameter, os.fsdecode(os.fspath(value)), storage_options is not None)
    elif storage_options is not None:
        _core.check_local_only(source, parameter, "", True)


def _named_targets(targets: Any, classes: Any) -> Any:
    """String targets as class indices through ``classes`` (``class_to_idx[name]``, as torchvision's datasets map
    folder names): only when ``classes`` is given as a list of names and the targets are a list holding strings;
    a name that is not a class is refused naming it. Anything else is returned as it is (and a string without
    ``classes`` is refused by ``_check_targets``)."""
    if not isinstance(targets, (list, tuple)) or not any(isinstance(t, str) for t in targets):
        return targets
    if not isinstance(classes, (list, tuple)) or not classes:
        return targets
    index = {c: i for i, c in enumerate(classes)}
    out = []
    for i, t in enumerate(targets):
        if isinstance(t, str):
            if t not in index:
                raise _labels_error(f"{t!r} (element {i}) is not one of the classes {list(classes)[:10]}")
            t = index[t]
        out.append(t)
    return out


def _paths_error(message: str) -> ConfigError:
    return ConfigError(f"invalid paths: {message}", parameter="paths")


def _labels_error(message: str) -> ConfigError:
    return ConfigError(f"invalid labels: {message}", parameter="labels")


#: Refused for paths and labels: a set's iteration order is arbitrary (hash order, varying with
#: PYTHONHASHSEED for str), and a dict is a mapping, not a list (keys or values? in which order?), so index i
#: and the pairing of paths with labels would be guesses. Dict views are sets or depend on a dict.
_UNORDERED = (Set, Mapping, MappingView)


def _unordered(obj: Any) -> str:
    return (
        f"a {type(obj).__name__} is not an ordered sequence (sets, dicts and dict views are refused: "
        "paths and labels would pair up in an arbitrary order); pass a list, e.g. sorted(...)"
    )


def _check_paths(paths: Any) -> list[str]:
    if isinstance(paths, (str, bytes, os.PathLike)):
        # A str is a sequence of characters: iterating it would make one "path" per character.
        raise _paths_error(f"{paths!r} is a single path, not a sequence of paths; pass [{paths!r}]")
    if isinstance(paths, _UNORDERED):
        raise _paths_error(_unordered(paths))
    try:
        items = list(paths)
    except TypeError:
        raise _paths_error(f"a {type(paths).__name__} is not a sequence of paths") from None
    out = []
    for i, p in enumerate(items):
        try:
            s = os.fsdecode(p)
        except TypeError:
            raise _paths_error(
                f"{p!r} (element {i}) is a {type(p).__name__}, not a str, bytes or os.PathLike"
            ) from None
        out.append(str(s))  # a plain str, also for str subclasses (numpy.str_ from an array of str)
    return out


def _check_targets(targets: Any) -> tuple[list[int], np.ndarray | None]:
    """Per-sample targets (module docs) → (the core's int64 labels, float32 targets or None). Float targets give
    the core labels 0 of the same count, so the core's one-per-sample rule applies to every kind."""
    if isinstance(targets, (str, bytes)):
        raise _labels_error(f"{targets!r} is a string, not a sequence of targets")
    if isinstance(targets, _UNORDERED):
        raise _labels_error(_unordered(targets))
    if not isinstance(targets, np.ndarray) and hasattr(targets, "__array__"):
        targets = np.asarray(targets)  # a torch tensor, a pandas Series...
    if isinstance(targets, np.ndarray):
        return _split_array(targets)
    try:
        items = list(targets)
    except TypeError:
        raise _labels_error(f"a {type(targets).__name__} is not a sequence of targets") from None
    if any(isinstance(v, np.ndarray) or _is_sequence(v) for v in items):
        return _split_array(_stack(items))
    if all(_is_integral(v) for v in items):
        return [_check_label(v, i) for i, v in enumerate(items)], None
    return _float_targets(np.array([_check_float(v, i) for i, v in enumerate(items)], dtype=np.float64))


def _is_sequence(v: Any) -> bool:
    return isinstance(v, (list, tuple)) or (hasattr(v, "__array__") and getattr(v, "ndim", 0) > 0)


def _is_integral(v: Any) -> bool:
    """An int, numpy integer, bool or integer 0-d tensor (what ``operator.index`` accepts)."""
    if isinstance(v, (str, bytes, np.str_, np.bytes_)):
        return True  # refused with the class-index wording by _check_label
    try:
        operator.index(v)
    except TypeError:
        # None and the like: not a number at all, refused by _check_label with the class-index wording
        return not isinstance(v, numbers.Number) and not hasattr(v, "__float__")
    return True


def _stack(items: list[Any]) -> np.ndarray:
    """Per-sample arrays (lists, tuples, arrays) → one (N, *S) array, refusing ragged shapes."""
    shapes = [np.shape(v) for v in items]
    odd = next((i for i, s in enumerate(shapes) if s != shapes[0]), None)
    if odd is not None:
        raise _labels_error(
            f"element {odd} has shape {shapes[odd]} but element 0 has shape {shapes[0]}: per-sample targets "
            "must all have one shape"
        )
    try:
        return np.asarray(items)
    except (ValueError, TypeError) as e:  # nested raggedness below the first level
        raise _labels_error(f"the per-sample targets do not form one array ({e})") from None


def _split_array(a: np.ndarray) -> tuple[list[int], np.ndarray | None]:
    """A targets array: 1-D integer/bool → class indices; any other numeric array (N, *S) → float32."""
    if a.dtype.kind not in "biuf":
        raise _labels_error(f"an array of dtype {a.dtype} is not numeric targets")
    if a.ndim == 0:
        raise _labels_error(f"a 0-d array ({a!r}) is not one target per sample")
    if a.ndim == 1 and a.dtype.kind in "biu":
        return _check_label_array(a), None
    return _float_targets(a)


def _float_targets(a: np.ndarray) -> tuple[list[int], np.ndarray]:
    with np.errstate(over="ignore"):  # beyond float32: inf, refused below
        f = np.ascontiguousarray(a, dtype=np.float32)
    f.flags.writeable = False  # batches gather from it; a user edit must not change later epochs silently
    bad = ~np.isfinite(f)
    if bad.any():
        at = np.unravel_index(int(np.flatnonzero(bad)[0]), f.shape)
        shown = a[at].item()
        raise _labels_error(
            f"{shown!r} (element {at[0]}) is not finite (float targets must be finite in float32)"
        )
    return [0] * f.shape[0], f


def _check_float(v: Any, i: int) -> float:
    if isinstance(v, (str, bytes, np.str_, np.bytes_)):
        raise _labels_error(f"{v!r} (element {i}) is a string, not a number")
    complex_ = isinstance(v, numbers.Complex) and not isinstance(v, numbers.Real)
    try:
        f = None if complex_ else float(v)  # float, numpy floats, Decimal, float tensors
    except (TypeError, ValueError, OverflowError):
        f = None
    if f is None:
        raise _labels_error(f"{v!r} (element {i}) is a {type(v).__name__}, not a number")
    return f


def _check_label_array(a: np.ndarray) -> list[int]:
    """A 1-D integer or bool array of class indices."""
    if a.size == 0:
        return []
    if a.dtype.kind == "u" and int(a.max()) > _INT64_MAX:
        raise _labels_error(f"{int(a.max())} is outside the int64 range")
    out: list[int] = a.astype(np.int64).tolist()
    return out


def _check_label(v: Any, i: int) -> int:
    """A class index: an int, numpy integer, bool or integer 0-d tensor in the int64 range."""
    if isinstance(v, (str, bytes, np.str_, np.bytes_)):
        raise _labels_error(f"{v!r} (element {i}) is a string, not an integer")
    try:
        # int() because Python 3.9's index(True) is True
        label = int(operator.index(v))
    except TypeError:
        raise _labels_error(f"{v!r} (element {i}) is a {type(v).__name__}, not a number") from None
    if not _INT64_MIN <= label <= _INT64_MAX:
        raise _labels_error(f"{label} (element {i}) is outside the int64 range")
    return label


class Bytes(Source):
    """Encoded images held in memory: ``blobs`` a sequence of ``bytes`` (JPEG or PNG files' contents) and
    ``targets`` of the same length (default: all 0; class indices or float targets, the same rules as
    ``FileList``'s labels);
    ``classes`` optionally names the targets (``classes[t]``, with ``class_to_idx`` as torchvision has it). The bytes
    are copied into the core once. A blob that does not decode follows the loader's ``on_error`` policy and is
    named ``<memory>[i]``."""

    def __init__(
        self,
        blobs: Iterable[bytes],
        targets: Iterable[Any] | None = None,
        classes: Iterable[str] = (),
        extras: Mapping[str, Sequence[Any]] | None = None,
    ) -> None:
        if isinstance(blobs, (str, bytes)) or isinstance(blobs, _UNORDERED):
            raise ConfigError(
                f"invalid blobs: a {type(blobs).__name__} must be a sequence of bytes", parameter="blobs"
            )
        self.blobs = [bytes(b) if isinstance(b, (bytearray, memoryview)) else b for b in blobs]
        for i, b in enumerate(self.blobs):
            if not isinstance(b, bytes):
                raise ConfigError(
                    f"invalid blobs: a {type(b).__name__} (element {i}) must be bytes", parameter="blobs"
                )
        if targets is None:
            self.labels = [0] * len(self.blobs)
        else:
            self.labels, self._float_targets = _check_targets(_named_targets(targets, classes))
        self.classes, self.class_to_idx = _class_names(classes)
        self._native = _core.NativeSource.blobs(self.blobs, self.labels)  # the core's rules: counts, lengths
        self._extras = check_extras(extras, len(self.blobs))

    def _native_source(self) -> _core.NativeSource:
        return self._native


class Arrays(Source):
    """Raw uint8 pixels held in memory, decoded by nobody: ``images`` an (N, H, W) gray or (N, H, W, C) array
    with C 1 or 3 (numpy's HWC, as torchvision's MNIST/CIFAR ``data``), ``targets`` (default 0; class indices
    or float targets, see the module docs) and optional ``classes`` names (``class_to_idx`` as torchvision has
    it).
    Crops, flips and the rest of the pipeline work on the pixels directly. Gray images come out with 1 channel
    (``Loader(channels=3)`` widens them). The array is copied into the core once."""

    def __init__(
        self,
        images: Any,
        targets: Iterable[Any] | None = None,
        classes: Iterable[str] = (),
        extras: Mapping[str, Sequence[Any]] | None = None,
    ) -> None:
        a = np.asarray(images)
        if a.dtype != np.uint8:
            raise ConfigError(
                f"invalid images: an array of dtype {a.dtype} must be uint8 raw pixels (convert it explicitly)",
                parameter="images",
            )
        self.images = np.ascontiguousarray(a)
        n = self.images.shape[0] if self.images.ndim else 0
        if targets is None:
            self.labels = [0] * n
        else:
            self.labels, self._float_targets = _check_targets(_named_targets(targets, classes))
        self.classes, self.class_to_idx = _class_names(classes)
        self._native = _core.NativeSource.pixels(self.images, self.labels)  # the core's rules: shape, counts
        self._extras = check_extras(extras, len(self.labels))

    def _native_source(self) -> _core.NativeSource:
        return self._native


def _class_names(classes: Iterable[str]) -> tuple[list[str], dict[str, int]]:
    """``classes`` (names of targets 0, 1, …) and torchvision's ``class_to_idx``."""
    if isinstance(classes, (str, bytes)) or isinstance(classes, _UNORDERED):
        raise ConfigError(
            f"invalid classes: a {type(classes).__name__} must be a sequence of names", parameter="classes"
        )
    names = list(classes)
    if not all(isinstance(c, str) for c in names):
        raise ConfigError("invalid classes: every class name must be a str", parameter="classes")
    if len(set(names)) != len(names):
        raise ConfigError("invalid classes: the names must be distinct", parameter="classes")
    return names, {c: i for i, c in enumerate(names)}
