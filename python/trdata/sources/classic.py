"""Readers of the classic datasets in exactly the on-disk layouts torchvision's downloads leave, so a user's
existing ``root`` works unchanged: MNIST, FashionMNIST and KMNIST (idx files under ``root/<Name>/raw/``, plain
or ``.gz``) and CIFAR-10 / CIFAR-100 (Python pickles under ``root/cifar-10-batches-py/`` and
``root/cifar-100-python/``). Pure Python + numpy; the result is raw pixels and targets in torchvision's sample
order, which the sources at the end of this module (``MNIST``, ``FashionMNIST``, ``KMNIST``, ``CIFAR10``,
``CIFAR100``: in-memory ``Arrays``) hold.

These files come from strangers, so every reader treats them as hostile:

* only regular files are read (a symlink to one is fine): a FIFO would block ``open`` until a writer comes and a
  device can be endless, so the path is opened non-blocking and checked with ``fstat`` before any read;
* every size taken from a header is checked *before* anything of that size is allocated or inflated: against
  the bytes a plain file holds, against what a ``.gz`` of its size can inflate to (deflate expands at most
  1032:1), and against ``_IDX_MAX_PAYLOAD_BYTES``; both idx headers (images, labels) are read and compared
  before either payload. A ``.gz`` is then inflated in bounded chunks up to the claimed size + 1 byte, so memory
  is bounded by the (checked) claim, never by how far a hostile stream expands;
* the CIFAR pickles are read by a restricted unpickler (``pickle.load`` runs code): it resolves only the
  globals the genuine files reference (numpy's array reconstruction) and refuses every other one before
  anything is called; it sets the state (BUILD) of nothing but the arrays and dtypes it made, and only to a plain
  numeric dtype (no fields, no subarray, no object); the data it builds is bounded by the file's size, and a
  pre-scan of the opcode stream bounds every counted length and memo index by the file's size first;
* every failure is typed and names the file: ``SourceError`` (a ``FileNotFoundError``) for a missing root or
  file (with the file name torchvision expects) or something other than a regular file at its path,
  ``DecodeError`` for bad contents (``kind`` says which check failed), ``ConfigError`` for a wrong argument.
"""

from __future__ import annotations

import contextlib
import gzip
import io
import math
import os
import pickle
import pickletools
import stat
import struct
import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, ClassVar, Final

import numpy as np
import numpy.typing as npt

from .._args import _bool_arg
from ..errors import ConfigError, DecodeError, SourceError, _shown
from .base import Arrays, refuse_url

__all__ = [
    "CIFAR10",
    "CIFAR100",
    "FashionMNIST",
    "KMNIST",
    "MNIST",
    "CIFAR10_NORM",
    "CIFAR100_NORM",
    "FASHION_MNIST_NORM",
    "MNIST_NORM",
    "MNIST_CLASSES",
    "ClassicData",
    "read_cifar",
    "read_mnist",
]

# Normalization presets: ((mean per channel), (std per channel)) of the training split, pixels scaled to [0, 1].
# MNIST: the values of pytorch/examples (mnist/main.py: transforms.Normalize((0.1307,), (0.3081,))).
# The others are the widely used training-split statistics (per-channel mean and the standard deviation over
# all training pixels) quoted across the torchvision/pytorch example ecosystem; they were not recomputed here
# (no real copy of the datasets is available offline). Note CIFAR-10's std is (0.2470, 0.2435, 0.2616), the
# population std of the training pixels, not the frequently copied (0.2023, 0.1994, 0.2010).
#: MNIST training-set mean and std (pytorch/examples mnist/main.py).
MNIST_NORM: Final = ((0.1307,), (0.3081,))
#: FashionMNIST training-set mean and std.
FASHION_MNIST_NORM: Final = ((0.2860,), (0.3530,))
#: CIFAR-10 training-set per-channel mean and std (RGB).
CIFAR10_NORM: Final = ((0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616))
#: CIFAR-100 training-set per-channel mean and std (RGB).
CIFAR100_NORM: Final = ((0.5071, 0.4865, 0.4409), (0.2673, 0.2564, 0.2762))

#: torchvision's ``classes`` attribute of each idx dataset, by its class name (the folder under ``root``).
MNIST_CLASSES: Final[dict[str, tuple[str, ...]]] = {
    "MNIST": (
        "0 - zero",
        "1 - one",
        "2 - two",
        "3 - three",
        "4 - four",
        "5 - five",
        "6 - six",
        "7 - seven",
        "8 - eight",
        "9 - nine",
    ),
    "FashionMNIST": (
        "T-shirt/top",
        "Trouser",
        "Pullover",
        "Dress",
        "Coat",
        "Sandal",
        "Shirt",
        "Sneaker",
        "Bag",
        "Ankle boot",
    ),
    "KMNIST": ("o", "ki", "su", "tsu", "na", "ha", "ma", "ya", "re", "wo"),
}

# idx ("SN3 Pascal Vincent") magic numbers, big-endian: 0x00 0x00 <type> <ndim>; type 0x08 is uint8.
_IDX_IMAGES_MAGIC: Final = 0x00000803
_IDX_LABELS_MAGIC: Final = 0x00000801
# A .gz is inflated in chunks of this size, so a forged header never sizes an allocation on its own.
_GZ_CHUNK_BYTES: Final = 1 << 20
# The most payload (pixel or label bytes) one idx file may claim: 2 GiB, 45x the largest genuine file (MNIST's
# 47 MB of training images). A claim above it is refused from the header, before anything is read or inflated,
# so no file (a sparse plain one, a small .gz) can make the reader allocate more.
_IDX_MAX_PAYLOAD_BYTES: Final = 1 << 31
# deflate's largest expansion: a 258-byte match coded in 2 bits, 1032 bytes out per byte in. A .gz of n bytes
# (one member or several) never inflates to more than n * 1032, so a header claiming more is truncated for sure.
_DEFLATE_MAX_RATIO: Final = 1032
# The longest image side a loader takes (the core's pixel sources: 1..=65535 per side). A taller or wider idx
# image is refused here, naming the file, rather than later by the source, naming a parameter the user never set.
_IDX_MAX_SIDE: Final = 65_535
_CIFAR_PIXELS: Final = 3 * 32 * 32


@dataclass(frozen=True)
class ClassicData:
    """One split of a classic dataset, in torchvision's sample order.

    ``images`` is uint8: (N, H, W) for the idx datasets (28×28), (N, 32, 32, 3) HWC for CIFAR (what
    ``np.asarray(dataset[i][0])`` gives with torchvision); ``targets`` is int64 (N,); ``classes`` and
    ``class_to_idx`` are torchvision's attributes; ``files`` lists the paths read, in reading order."""

    images: npt.NDArray[np.uint8]
    targets: npt.NDArray[np.int64]
    classes: list[str]
    class_to_idx: dict[str, int]
    files: list[str]

    def __len__(self) -> int:
        return int(self.targets.shape[0])

    def __repr__(self) -> str:
        return (
            f"ClassicData({len(self)} samples, images {self.images.shape}, {len(self.classes)} classes, "
            f"{len(self.files)} files)"
        )


def _root_dir(root: object) -> str:
    if not isinstance(root, (str, os.PathLike)):
        raise ConfigError(
            f"invalid root: a {type(root).__name__} must be a path (str or os.PathLike)", "root"
        )
    path = os.path.expanduser(os.fsdecode(os.fspath(root)))
    if not os.path.isdir(path):
        raise SourceError(f"dataset root {path!r} is not a directory", path)
    return path


def _check_train(train: object) -> bool:
    return _bool_arg(train, "train")


def _decode_error(path: str, message: str, kind: str, index: int | None = None) -> DecodeError:
    return DecodeError(f"{path}: {message}", path=path, index=index, kind=kind)


# ---------------------------------------------------------------------------------------------------- idx


def read_mnist(root: str | os.PathLike[str], train: bool = True, variant: str = "MNIST") -> ClassicData:
    """Read one split of MNIST, FashionMNIST or KMNIST from torchvision's layout.

    ``root`` is what torchvision's ``datasets.<variant>(root)`` takes: the files are
    ``root/<variant>/raw/{train,t10k}-{images-idx3,labels-idx1}-ubyte``, each read plain if present, else from
    its ``.gz`` (torchvision's download leaves both). Same checks as torchvision's ``read_image_file`` /
    ``read_label_file`` (exact magic, uint8, 3-D images / 1-D labels, size = product of the dims), plus: one
    label per image and every label a valid class index.

    Both headers are read and checked (against the files' sizes, ``_IDX_MAX_PAYLOAD_BYTES`` and each other)
    before either payload is read or inflated. A split of 0 images is refused naming the images file
    (``kind="empty"``): no genuine file has none, and a loader could do nothing with it.

    Raises ``ConfigError`` (unknown ``variant``, non-bool ``train``), ``SourceError`` (missing root or file, or
    not a regular file) and ``DecodeError`` (bad contents; ``kind`` says which check failed)."""
    if not isinstance(variant, str) or variant not in MNIST_CLASSES:
        raise ConfigError(
            f"invalid variant: {variant!r} must be one of {sorted(MNIST_CLASSES)}",
            "variant",
        )
    split = "train" if _check_train(train) else "t10k"
    raw = os.path.join(_root_dir(root), variant, "raw")
    classes = list(MNIST_CLASSES[variant])

    image_path, image_gz = _idx_file(raw, f"{split}-images-idx3-ubyte", variant)
    label_path, label_gz = _idx_file(raw, f"{split}-labels-idx1-ubyte", variant)
    with contextlib.ExitStack() as files:
        images = _open_idx(files, image_path, image_gz, _IDX_IMAGES_MAGIC, 3)
        n_images, height, width = images.dims
        if n_images == 0:
            raise _decode_error(
                image_path, f"0 images (dims {list(images.dims)}); a split needs at least one", "empty"
            )
        if not (0 < height <= _IDX_MAX_SIDE and 0 < width <= _IDX_MAX_SIDE):
            raise _decode_error(
                image_path,
                f"images of {height}x{width} pixels (each side must be 1..{_IDX_MAX_SIDE})",
                "bad-dims",
            )
        labels = _open_idx(files, label_path, label_gz, _IDX_LABELS_MAGIC, 1)
        (n_labels,) = labels.dims
        if n_labels != n_images:
            raise _decode_error(
                label_path,
                f"{n_labels} labels for the {n_images} images of {image_path}",
                "count-mismatch",
            )
        images_flat = _read_payload(images)
        labels_flat = _read_payload(labels)
    targets = labels_flat.astype(np.int64)
    _check_targets(label_path, targets, len(classes))
    return ClassicData(
        images=images_flat.reshape(n_images, height, width),
        targets=targets,
        classes=classes,
        class_to_idx={c: i for i, c in enumerate(classes)},
        files=[image_path, label_path],
    )


def _idx_file(raw: str, name: str, variant: str) -> tuple[str, bool]:
    """The path to read for torchvision's file ``name`` (plain first, like torchvision, else ``name.gz``) and
    whether it is gzip. A path that exists but is no regular file is refused here (``SourceError``), before
    anything is opened."""
    plain = os.path.join(raw, name)
    for path, is_gzip in ((plain, False), (plain + ".gz", True)):
        if _regular_file_at(path):
            return path, is_gzip
    raise SourceError(
        f"{variant}: {plain} is missing (torchvision's {variant} expects {name} or {name}.gz in {raw})",
        plain,
    )


def _regular_file_at(path: str) -> bool:
    """False if nothing is at ``path`` (a dangling symlink included); True for a regular file (or a symlink to
    one); ``SourceError`` for anything else (FIFO, device, directory, socket), which is never opened."""
    try:
        mode = os.stat(path).st_mode
    except (FileNotFoundError, NotADirectoryError):
        return False
    except OSError as e:
        raise SourceError(f"{path} cannot be examined ({type(e).__name__}: {e})", path) from e
    if not stat.S_ISREG(mode):
        raise _not_regular(path, mode)
    return True


def _not_regular(path: str, mode: int) -> SourceError:
    kinds = (
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISSOCK, "a socket"),
    )
    what = next((name for test, name in kinds if test(mode)), f"file type 0o{stat.S_IFMT(mode):o}")
    return SourceError(
        f"{path} is not a regular file ({what}); only regular files are read (a symlink to one is fine)", path
    )


def _open_regular(path: str) -> io.BufferedReader:
    """``open(path, "rb")`` for a regular file only. The path is opened non-blocking (opening a FIFO for reading
    otherwise waits for a writer, forever) and the opened file is checked with ``fstat``, so a FIFO or device
    swapped in after an earlier check of the path is refused too, without a read. Symlinks are followed, as
    torchvision does."""
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        raise SourceError(f"{path} is missing", path) from None
    except OSError as e:
        raise _decode_error(path, f"open failed ({type(e).__name__}: {e})", "read-error") from e
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise _not_regular(path, mode)
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


@dataclass(frozen=True)
class _IdxStream:
    """An idx file whose header was read and checked; ``stream`` (the file, or the gzip stream over it) is at
    the first payload byte."""

    path: str
    is_gzip: bool
    dims: tuple[int, ...]
    payload_bytes: int
    stream: io.BufferedIOBase


@contextlib.contextmanager
def _idx_errors(path: str, is_gzip: bool) -> Iterator[None]:
    """Every failure of reading an idx file as a ``DecodeError`` naming it."""
    try:
        yield
    except (DecodeError, SourceError):
        raise
    except (gzip.BadGzipFile, EOFError, zlib.error) as e:
        raise _decode_error(path, f"corrupt gzip stream ({type(e).__name__}: {e})", "corrupt-gzip") from e
    except OSError as e:
        if is_gzip:
            # gzip reports a bad header or trailer as a plain OSError on some versions.
            raise _decode_error(path, f"corrupt gzip stream ({type(e).__name__}: {e})", "corrupt-gzip") from e
        raise _decode_error(path, f"read failed ({type(e).__name__}: {e})", "read-error") from e


def _open_idx(files: contextlib.ExitStack, path: str, is_gzip: bool, magic: int, ndim: int) -> _IdxStream:
    """Open a uint8 idx file (closed with ``files``) and check its header: exact magic, then the payload the dims
    claim against what the file can hold (a plain file: exactly its size; a ``.gz``: at most 1032x its size) and
    against ``_IDX_MAX_PAYLOAD_BYTES``. Nothing of the payload is read or inflated here (a ``.gz`` inflates at
    most one buffer, 128 KiB, for the header)."""
    raw = files.enter_context(_open_regular(path))
    with _idx_errors(path, is_gzip):
        file_bytes = os.fstat(raw.fileno()).st_size
        f: io.BufferedIOBase = raw
        if is_gzip:
            f = files.enter_context(gzip.GzipFile(filename=path, mode="rb", fileobj=raw))
        header = _read_exact(f, 4 + 4 * ndim)
        if len(header) < 4:
            raise _decode_error(path, f"{len(header)} bytes, too short for an idx magic number", "truncated")
        (found,) = struct.unpack(">I", header[:4])
        if found != magic:
            raise _decode_error(
                path,
                f"magic number 0x{found:08x}, expected 0x{magic:08x} "
                f"(uint8 idx with {ndim} dimension{'s' if ndim > 1 else ''})",
                "bad-magic",
            )
        if len(header) < 4 + 4 * ndim:
            raise _decode_error(path, f"header cut short ({len(header)} bytes)", "truncated")
        dims = struct.unpack(f">{ndim}I", header[4:])
        payload_bytes = math.prod(dims)  # a Python int: no overflow, however large the dims
        if is_gzip:
            most = file_bytes * _DEFLATE_MAX_RATIO
            if len(header) + payload_bytes > most:
                raise _decode_error(
                    path,
                    f"the header's dims {list(dims)} need {payload_bytes} bytes of data; a .gz of {file_bytes} "
                    f"bytes inflates to at most {most} (deflate expands at most 1032:1)",
                    "truncated",
                )
        elif file_bytes - len(header) != payload_bytes:
            raise _size_error(path, payload_bytes, file_bytes - len(header), dims)
        if payload_bytes > _IDX_MAX_PAYLOAD_BYTES:
            raise _decode_error(
                path,
                f"the header's dims {list(dims)} need {payload_bytes} bytes of data, more than the "
                f"{_IDX_MAX_PAYLOAD_BYTES} (2 GiB) an idx file may hold; refused before reading them",
                "too-large",
            )
    return _IdxStream(path, is_gzip, dims, payload_bytes, f)


def _read_payload(idx: _IdxStream) -> npt.NDArray[np.uint8]:
    """The flat payload of an idx file opened by ``_open_idx``: exactly the claimed bytes, then end of data
    (more is trailing data, less is truncated). A ``.gz`` inflates chunk by chunk up to the claim + 1 byte."""
    with _idx_errors(idx.path, idx.is_gzip):
        if idx.is_gzip:
            data = _inflate_exact(idx.stream, idx.path, idx.payload_bytes, idx.dims)
        else:
            data = _read_plain_exact(idx.stream, idx.path, idx.payload_bytes, idx.dims)
    return np.frombuffer(data, dtype=np.uint8)


def _read_exact(f: io.BufferedIOBase, n: int) -> bytes:
    """Up to ``n`` bytes (fewer only at the end of the stream)."""
    parts = []
    while n > 0:
        chunk = f.read(n)
        if not chunk:
            break
        parts.append(chunk)
        n -= len(chunk)
    return b"".join(parts)


def _read_plain_exact(
    f: io.BufferedIOBase, path: str, payload_bytes: int, dims: tuple[int, ...]
) -> bytearray:
    """The payload of a plain file whose size matched the claim when opened (it may change while read)."""
    data = bytearray(payload_bytes)
    got = 0
    with memoryview(data) as view:
        while got < payload_bytes:
            n = f.readinto(view[got:])
            if not n:
                raise _size_error(path, payload_bytes, got, dims)
            got += n
    _refuse_trailing_data(f, path, payload_bytes, dims)
    return data


def _refuse_trailing_data(f: io.BufferedIOBase, path: str, payload_bytes: int, dims: tuple[int, ...]) -> None:
    """A payload ends where its dims say: one more byte is a ``DecodeError`` (kind ``trailing-data``)."""
    if f.read(1):
        raise _decode_error(
            path,
            f"more data after the {payload_bytes} bytes that dims {list(dims)} describe",
            "trailing-data",
        )


def _inflate_exact(f: io.BufferedIOBase, path: str, payload_bytes: int, dims: tuple[int, ...]) -> bytearray:
    """Inflate exactly ``payload_bytes`` (already checked against the limits), growing the buffer chunk by chunk
    as data really arrives, then at most 1 byte more: memory never exceeds the claim, whatever follows."""
    data = bytearray()
    while len(data) < payload_bytes:
        chunk = f.read(min(_GZ_CHUNK_BYTES, payload_bytes - len(data)))
        if not chunk:
            raise _size_error(path, payload_bytes, len(data), dims)
        data += chunk
    _refuse_trailing_data(f, path, payload_bytes, dims)
    return data


def _size_error(path: str, expected: int, present: int, dims: tuple[int, ...]) -> DecodeError:
    what = "truncated" if present < expected else "trailing-data"
    return _decode_error(
        path,
        f"the header's dims {list(dims)} need {expected} bytes of data, the file holds {present}",
        what,
    )


def _check_targets(path: str, targets: npt.NDArray[np.int64], n_classes: int) -> None:
    bad = np.flatnonzero((targets < 0) | (targets >= n_classes))
    if bad.size:
        i = int(bad[0])
        raise _decode_error(
            path,
            f"label {int(targets[i])} of sample {i} is not a class index (0..{n_classes - 1}); "
            f"{bad.size} such label(s)",
            "bad-label",
            index=i,
        )


# ---------------------------------------------------------------------------------------------------- CIFAR

_CIFAR_LAYOUTS: Final[dict[int, tuple[str, tuple[str, ...], tuple[str, ...], str, str, str]]] = {
    # variant: (folder, train files, test files, meta file, meta key, labels key) - torchvision's lists.
    10: (
        "cifar-10-batches-py",
        ("data_batch_1", "data_batch_2", "data_batch_3", "data_batch_4", "data_batch_5"),
        ("test_batch",),
        "batches.meta",
        "label_names",
        "labels",
    ),
    100: ("cifar-100-python", ("train",), ("test",), "meta", "fine_label_names", "fine_labels"),
}


def read_cifar(root: str | os.PathLike[str], train: bool = True, variant: int = 10) -> ClassicData:
    """Read one split of CIFAR-10 (``variant=10``) or CIFAR-100 (``variant=100``, fine labels) from
    torchvision's layout: ``root/cifar-10-batches-py/{data_batch_1..5, test_batch, batches.meta}`` or
    ``root/cifar-100-python/{train, test, meta}``. Images are (N, 32, 32, 3) HWC uint8, the reshape and
    transpose torchvision applies, in its order (batches in its order, rows within each).

    The pickles are read by a restricted unpickler (see the module docstring): a pickle that references any
    global other than numpy's array reconstruction is refused (``DecodeError``, kind ``"forbidden-global"``)
    before anything it names is called; one that sets the state of anything but its arrays and their plain
    dtypes, or uses an opcode no CIFAR file uses, too (kinds ``"forbidden-build"``, ``"forbidden-opcode"``). A
    batch of 0 images is refused naming it (``kind="empty"``). Raises ``ConfigError`` (bad
    ``variant``/``train``), ``SourceError`` (missing root or file, or not a regular file) and ``DecodeError``
    (bad contents)."""
    # 10.0 and True compare equal to 10 and 1: only integers name a variant.
    if (
        isinstance(variant, bool)
        or not isinstance(variant, (int, np.integer))
        or int(variant) not in _CIFAR_LAYOUTS
    ):
        raise ConfigError(f"invalid variant: {variant!r} must be 10 or 100", "variant")
    variant = int(variant)
    folder, train_files, test_files, meta_name, meta_key, labels_key = _CIFAR_LAYOUTS[variant]
    base = os.path.join(_root_dir(root), folder)
    names = train_files if _check_train(train) else test_files
    # Every file must exist before any is parsed: a missing one is reported as such, not after minutes of work.
    paths = [_cifar_file(base, name, variant) for name in (*names, meta_name)]
    batch_paths, meta_path = paths[:-1], paths[-1]

    classes = _cifar_classes(meta_path, meta_key)
    chunks: list[npt.NDArray[np.uint8]] = []
    target_chunks: list[npt.NDArray[np.int64]] = []
    for path in batch_paths:
        entry = _load_pickle_dict(path)
        data = _entry_value(entry, "data", path)
        if not isinstance(data, np.ndarray) or data.dtype != np.uint8 or data.ndim != 2:
            raise _decode_error(
                path, f"'data' is {_describe(data)}, expected a uint8 array (N, 3072)", "bad-data"
            )
        if data.shape[1] != _CIFAR_PIXELS:
            raise _decode_error(
                path,
                f"'data' has rows of {data.shape[1]} bytes, expected {_CIFAR_PIXELS} (3x32x32)",
                "bad-data",
            )
        if data.shape[0] == 0:
            raise _decode_error(path, "'data' holds 0 images; a CIFAR batch holds at least one", "empty")
        # torchvision takes 'labels' when present, else 'fine_labels' (CIFAR-100's batches have both keys'
        # siblings 'coarse_labels'/'fine_labels'; CIFAR-10's only 'labels').
        key = "labels" if _has_key(entry, "labels") else labels_key
        labels = _cifar_labels(_entry_value(entry, key, path), path, key)
        if labels.shape[0] != data.shape[0]:
            raise _decode_error(
                path, f"{labels.shape[0]} labels for {data.shape[0]} images", "count-mismatch"
            )
        _check_targets(path, labels, len(classes))
        chunks.append(data)
        target_chunks.append(labels)

    # torchvision's vstack + reshape(-1, 3, 32, 32) + transpose(0, 2, 3, 1), written in one copy and
    # C-contiguous (each image one HWC block, as an in-memory source wants it).
    images = np.empty((sum(c.shape[0] for c in chunks), 32, 32, 3), dtype=np.uint8)
    row = 0
    for chunk in chunks:
        images[row : row + chunk.shape[0]] = chunk.reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1)
        row += chunk.shape[0]
    targets = np.concatenate(target_chunks) if len(target_chunks) > 1 else target_chunks[0]
    return ClassicData(
        images=images,
        targets=targets,
        classes=classes,
        class_to_idx={c: i for i, c in enumerate(classes)},
        files=[*batch_paths, meta_path],
    )


def _cifar_file(base: str, name: str, variant: int) -> str:
    path = os.path.join(base, name)
    if not _regular_file_at(path):
        raise SourceError(
            f"CIFAR-{variant}: {path} is missing (torchvision's CIFAR{variant} expects {name} in {base})",
            path,
        )
    return path


def _cifar_classes(path: str, key: str) -> list[str]:
    meta = _load_pickle_dict(path)
    names = _entry_value(meta, key, path)
    if not isinstance(names, list) or not names:
        raise _decode_error(
            path, f"{key!r} is {_describe(names)}, expected a non-empty list of names", "bad-meta"
        )
    classes = []
    for i, name in enumerate(names):
        if isinstance(name, bytes):
            name = name.decode("latin1")
        if not isinstance(name, str):
            raise _decode_error(
                path, f"{key!r}[{i}] is {_describe(name)}, expected a str", "bad-meta", index=i
            )
        classes.append(name)
    # class_to_idx would silently merge a repeated name (and a source refuses it naming its parameter).
    seen: dict[str, int] = {}
    for i, name in enumerate(classes):
        if name in seen:
            raise _decode_error(
                path,
                f"{key!r}[{i}] repeats the class name {_shown(name, 60)} of [{seen[name]}]",
                "bad-meta",
                index=i,
            )
        seen[name] = i
    return classes


def _cifar_labels(value: object, path: str, key: str) -> npt.NDArray[np.int64]:
    if isinstance(value, np.ndarray):
        if value.ndim != 1 or value.dtype.kind not in "iu":
            raise _decode_error(path, f"{key!r} is {_describe(value)}, expected a list of ints", "bad-label")
        return value.astype(np.int64)
    if not isinstance(value, list):
        raise _decode_error(path, f"{key!r} is {_describe(value)}, expected a list of ints", "bad-label")
    for i, label in enumerate(value):
        # bool is an int subclass but never a class index; a huge int would overflow the int64 conversion.
        if type(label) is not int or not -(2**63) <= label < 2**63:
            raise _decode_error(
                path, f"{key!r}[{i}] is {_describe(label)}, expected an int", "bad-label", index=i
            )
    return np.array(value, dtype=np.int64).reshape(len(value))


def _has_key(entry: dict[Any, Any], key: str) -> bool:
    return key in entry or key.encode("latin1") in entry


def _entry_value(entry: dict[Any, Any], key: str, path: str) -> object:
    """``entry[key]``: str keys as the genuine (Python 2) files decode with latin1, bytes keys as a Python 3
    re-save gives them."""
    for k in (key, key.encode("latin1")):
        if k in entry:
            value = entry[k]
            # Unpickled arrays are _CheckedArray instances; callers get plain ndarrays.
            return value.view(np.ndarray) if isinstance(value, np.ndarray) else value
    # _shown: a hostile key's repr may be huge or raise (a deeply nested tuple).
    keys = [_shown(k, 40) for k in list(entry)[:8]]
    raise _decode_error(path, f"no {key!r} entry (keys: {', '.join(keys)})", "bad-data")


def _describe(value: object) -> str:
    if isinstance(value, np.ndarray):
        return f"an array of dtype {value.dtype} and shape {value.shape}"
    return f"a {type(value).__name__}"


# ---------------------------------------------------------------------------------------------------- pickle

# The largest CIFAR pickle read: 1 GiB (the genuine CIFAR-100 train file is 155 MB, a Python 3 re-save ~230 MB).
# The file is read whole, so this bounds that allocation (a sparse file can claim any size).
_PICKLE_MAX_FILE_BYTES: Final = 1 << 30
# The bytes a pickle may build (bytes literals through _codecs.encode, array buffers) per byte of the file, plus
# a constant. A genuine file builds each of its bytes at most twice (a Python 3 re-save: text -> bytes ->
# array); a hostile one that reuses one memoized string for many calls would otherwise build n x its size.
_PICKLE_BUILD_FACTOR: Final = 2
_PICKLE_BUILD_SLACK_BYTES: Final = 1 << 20


class _Refused(Exception):
    """Raised inside the unpickler for what no CIFAR file holds; ``_load_pickle_dict`` turns it into a
    ``DecodeError`` of ``kind`` naming the file."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


def _is_plain_dtype(dtype: object) -> bool:
    """A numeric numpy dtype exactly as ``np.dtype(its str)`` makes it: kind u/i/f/b, no fields, no subarray,
    no metadata, and the flags, size and alignment numpy gives it. Anything else can make numpy read outside the
    array's buffer (a field beyond the item, a subarray larger than the itemsize) or treat bytes as object
    pointers (the refcount flag)."""
    if (
        not isinstance(dtype, np.dtype)
        or dtype.kind not in "uifb"
        or dtype.fields is not None
        or dtype.subdtype is not None
        or dtype.metadata is not None
    ):
        return False
    fresh = np.dtype(dtype.str)
    return (
        dtype.flags == fresh.flags
        and dtype.itemsize == fresh.itemsize
        and dtype.alignment == fresh.alignment
        and dtype == fresh
    )


def _is_plain_dtype_state(state: object) -> bool:
    """The state ``dtype.__reduce__`` writes for a plain dtype, in every numpy since 1.0:
    ``(3, byte order, None, None, None, -1, -1, 0)`` (no subarray, names, fields; no size, alignment, flags)."""
    return (
        type(state) is tuple
        and len(state) == 8
        and all(type(v) is int for v in (state[0], *state[5:]))
        and state[0] == 3
        and type(state[1]) is str
        and state[1] in ("<", ">", "|", "=")
        and state[2] is None
        and state[3] is None
        and state[4] is None
        and state[5:] == (-1, -1, 0)
    )


def _dtype(spec: object, align: object, copy: object) -> np.dtype[Any]:
    """Stands in for ``numpy.dtype`` as ``dtype.__reduce__`` calls it: a type string, align off, copy on -
    ``('u1', 0, 1)`` with ints in the numpy 1.x that wrote the genuine CIFAR files (descriptor.c's ``"(Nii)"``),
    ``('u1', False, True)`` in today's. Copy on means a
    fresh dtype, never numpy's shared one, is what BUILD may then set. Only plain numeric dtypes are made."""
    if (
        type(spec) is not str
        or type(align) not in (bool, int)
        or type(copy) not in (bool, int)
        or align != 0
        or copy != 1
    ):
        raise pickle.UnpicklingError("numpy.dtype is only allowed as dtype.__reduce__ writes it: (str, 0, 1)")
    dtype = np.dtype(spec, False, True)
    if not _is_plain_dtype(dtype):
        raise pickle.UnpicklingError(
            f"numpy dtype {_shown(spec, 40)}: only plain numeric dtypes (u, i, f, b) are allowed"
        )
    return dtype


def _empty_bytes(*args: object) -> bytes:
    """Stands in for ``bytes`` in Python 3 protocol-2 pickles, which spell ``b""`` (an empty array's buffer) as
    ``bytes()``. Only the empty call is accepted: ``bytes(n)`` would allocate n bytes."""
    if args:
        raise pickle.UnpicklingError("bytes() is only allowed without arguments (an empty bytes literal)")
    return b""


def _latin1_bytes(text: object, encoding: object = "utf-8") -> bytes:
    """Stands in for ``_codecs.encode`` in Python 3 protocol-2 pickles, which spell each ``bytes`` value (an
    array's raw buffer, a bytes key) as ``_codecs.encode(<latin-1 text>, 'latin1')``. Only that exact use is
    accepted: no other codec is looked up, nothing but a str of the pickle's own text is converted."""
    if type(text) is not str or type(encoding) is not str or encoding not in ("latin1", "latin-1"):
        raise pickle.UnpicklingError(
            f"_codecs.encode({type(text).__name__}, {_shown(encoding, 40)}) is not a bytes literal"
        )
    return text.encode("latin1")


# The function ndarray.__reduce__ names, taken from numpy itself: no import of the deprecated numpy.core alias
# (numpy 2 warns on it), and the same object whatever numpy version wrote the file.
_NUMPY_RECONSTRUCT: Final[Callable[..., Any]] = np.zeros(0).__reduce__()[0]  # type: ignore[assignment]


class _NdarrayToken:
    """What the pickle's ``numpy.ndarray`` resolves to: a token ``_array_reconstruct`` accepts as its subtype,
    not the class itself, which a REDUCE opcode could call to allocate an array of any size."""

    __slots__ = ()


_NDARRAY_TOKEN: Final = _NdarrayToken()


class _CheckedArray(np.ndarray):
    """The class every unpickled array is built as: its ``__setstate__`` (the BUILD opcode) checks the state
    before numpy acts on it. numpy allocates an object array's shape before reading its items, so a pickle
    claiming an object array of 2**32 items would cost 32 GiB; here only plain numeric dtypes pass (see
    ``_is_plain_dtype``), and the buffer must hold exactly shape x itemsize bytes, i.e. the array can never be
    larger than the file."""

    def __setstate__(self, state: Any) -> None:
        if not isinstance(state, tuple) or len(state) not in (4, 5):
            raise pickle.UnpicklingError(
                "ndarray state is not numpy's (version, shape, dtype, fortran, data)"
            )
        if len(state) == 5 and (type(state[0]) is not int or state[0] != 1):
            raise pickle.UnpicklingError(f"ndarray state version {_shown(state[0], 40)}, expected 1")
        shape, dtype, fortran, raw = state[-4:]
        if not _is_plain_dtype(dtype):
            raise pickle.UnpicklingError(
                f"ndarray of numpy dtype {_shown(dtype, 60)} (only plain numeric dtypes are allowed)"
            )
        if (
            not isinstance(shape, tuple)
            or not all(type(d) is int and d >= 0 for d in shape)
            or type(fortran) not in (bool, int)
            or not isinstance(raw, (bytes, str))
            or math.prod(shape) * dtype.itemsize != len(raw)
        ):
            raise pickle.UnpicklingError("ndarray shape and data size disagree")
        super().__setstate__(state)


def _array_reconstruct(subtype: object, shape: object, dtype_code: object) -> Any:
    """numpy's ``_reconstruct`` for exactly the call ``ndarray.__reduce__`` writes, ``(ndarray, (0,), b'b')``:
    an empty ``_CheckedArray`` that BUILD then fills from the pickle's own bytes."""
    if (
        subtype is not _NDARRAY_TOKEN
        or type(shape) is not tuple
        or shape != (0,)
        or type(dtype_code) not in (bytes, str)
        or dtype_code not in (b"b", "b")
    ):
        raise pickle.UnpicklingError("_reconstruct is only allowed as ndarray.__reduce__ writes it")
    return _NUMPY_RECONSTRUCT(_CheckedArray, (0,), dtype_code)


# The globals a CIFAR pickle may name, each mapped to a checked stand-in. The genuine files (Python 2, protocol
# 2) name exactly numpy's array reconstruction: numpy.core.multiarray._reconstruct (numpy >= 2 writes
# numpy._core.multiarray), numpy.ndarray (its subtype argument) and numpy.dtype. _codecs.encode and bytes appear
# in Python 3 protocol-2 re-saves (bytes values, b""). No entry can run code named by the file or allocate more
# than it holds: _reconstruct builds an empty _CheckedArray, dtype parses a type string, encode/bytes only build
# bytes literals, and BUILD fills the array from the pickle's own bytes after _CheckedArray's checks. None of
# them can be a BUILD target (the unpickler refuses), so a file cannot set their attributes either.
_PICKLE_GLOBALS: Final[dict[tuple[str, str], object]] = {
    ("numpy.core.multiarray", "_reconstruct"): _array_reconstruct,
    ("numpy._core.multiarray", "_reconstruct"): _array_reconstruct,
    ("numpy", "ndarray"): _NDARRAY_TOKEN,
    ("numpy", "dtype"): _dtype,
    ("_codecs", "encode"): _latin1_bytes,
    ("__builtin__", "bytes"): _empty_bytes,
    ("builtins", "bytes"): _empty_bytes,
}
# What REDUCE may call, by identity (a hostile object's __eq__/__hash__ is never consulted).
_CALLABLE_IDS: Final = frozenset(id(f) for f in (_array_reconstruct, _dtype, _latin1_bytes, _empty_bytes))


def _opcode_table() -> list[tuple[str, int, int] | None]:
    """Per opcode byte: (name, argument kind, size) from pickletools' own table, for the pre-scan. Kind 0: a
    fixed ``size`` bytes; 1: ``size`` newline-terminated lines; 2: a little-endian length of ``size`` bytes
    (negative when signed), then that many bytes."""
    counted = {
        pickletools.TAKEN_FROM_ARGUMENT1: 1,
        pickletools.TAKEN_FROM_ARGUMENT4: -4,
        pickletools.TAKEN_FROM_ARGUMENT4U: 4,
        pickletools.TAKEN_FROM_ARGUMENT8U: 8,
    }
    table: list[tuple[str, int, int] | None] = [None] * 256
    for op in pickletools.opcodes:
        arg = op.arg
        if arg is None:
            entry = (op.name, 0, 0)
        elif arg.n >= 0:
            entry = (op.name, 0, arg.n)
        elif arg.n == pickletools.UP_TO_NEWLINE:
            entry = (op.name, 1, 2 if arg.name == "stringnl_noescape_pair" else 1)
        else:
            entry = (op.name, 2, counted[arg.n])
        table[ord(op.code)] = entry
    return table


_OPCODES: Final = _opcode_table()
_MEMO_OPCODES: Final = frozenset({"PUT", "BINPUT", "LONG_BINPUT"})


class _RestrictedUnpickler(pickle._Unpickler):
    """The pure-Python unpickler (``pickle._Unpickler``, whose opcode table can be changed per class, unlike the C
    one's) with these changes, each for something no CIFAR file does:

    * GLOBAL resolves only ``_PICKLE_GLOBALS``; any other global refuses the whole file before anything is called;
    * REDUCE calls only the stand-ins of those globals, with a tuple;
    * BUILD (``__setstate__``, or setting ``__dict__`` entries and attributes of any object) applies only to the
      arrays and dtypes this load made, each once, and only a plain dtype's state; otherwise a file could set
      attributes of the stand-ins for the rest of the process, or give a dtype fields and subarrays that make
      numpy read outside an array;
    * INST, OBJ, NEWOBJ(_EX), EXT1/2/4, sets, persistent ids and out-of-band buffers are refused;
    * items are set only on dicts, with str or bytes keys (colliding int keys made loading quadratic);
    * the bytes built (bytes literals, array buffers) are bounded by ``_PICKLE_BUILD_FACTOR`` x the file's size.

    It is slower than the C unpickler only per opcode, and a CIFAR file is a few large strings plus a few opcodes
    per label and file name: measured with the pre-scan, a 31 MB CIFAR-10 batch (Python 2 layout) loads in
    ~50 ms (the C unpickler took ~75 ms), the 156 MB CIFAR-100 train file in ~0.66 s (C: ~0.54 s)."""

    dispatch: ClassVar[dict[int, Callable[[Any], None]]] = dict(pickle._Unpickler.dispatch)

    def __init__(self, data: bytes, path: str) -> None:
        super().__init__(io.BytesIO(data), encoding="latin1")
        self._path = path
        self._build_budget_bytes = _PICKLE_BUILD_FACTOR * len(data) + _PICKLE_BUILD_SLACK_BYTES
        # id -> object of every array and dtype that took a state (or whose dtype an array took): each is set
        # once. The object is kept so its id cannot be reused by another during the load.
        self._settled: dict[int, object] = {}

    def find_class(self, module: str, name: str) -> Any:
        try:
            return _PICKLE_GLOBALS[(module, name)]
        except (KeyError, TypeError):
            raise _Refused(
                "forbidden-global",
                f"pickle references {_shown(module, 80)}.{_shown(name, 80)}, which a CIFAR file never does; "
                "refused without running it (only numpy array reconstruction is allowed)",
            ) from None

    def persistent_load(self, pid: Any) -> Any:
        raise _Refused("forbidden-opcode", "persistent ids are not allowed (a CIFAR file has none)")

    def _charge(self, n_bytes: int) -> None:
        self._build_budget_bytes -= n_bytes
        if self._build_budget_bytes < 0:
            raise _Refused(
                "too-large",
                f"the pickle builds more data than {_PICKLE_BUILD_FACTOR}x its size (a genuine file builds each "
                "of its bytes once; this one reuses its strings)",
            )

    def _load_reduce(self) -> None:
        stack = self.stack  # type: ignore[attr-defined]
        args = stack.pop()
        func = stack[-1]
        if id(func) not in _CALLABLE_IDS or type(args) is not tuple:
            raise pickle.UnpicklingError(
                f"REDUCE calls a {type(func).__name__}: only numpy array reconstruction and bytes literals are"
            )
        if func is _latin1_bytes and args and type(args[0]) is str:
            self._charge(len(args[0]))
        stack[-1] = func(*args)

    def _load_build(self) -> None:
        stack = self.stack  # type: ignore[attr-defined]
        state = stack.pop()
        inst = stack[-1]
        if id(inst) in self._settled:
            raise _Refused("forbidden-build", f"BUILD sets the state of one {type(inst).__name__} twice")
        if type(inst) is _CheckedArray:
            raw = state[-1] if type(state) is tuple and state else None
            if isinstance(raw, (bytes, str)):
                self._charge(len(raw))
            inst.__setstate__(state)  # _CheckedArray's checks, then numpy's
            self._settled[id(inst.dtype)] = inst.dtype  # the array's dtype can no longer be changed
        elif isinstance(inst, np.dtype):
            if not _is_plain_dtype_state(state):
                raise pickle.UnpicklingError(
                    f"numpy dtype {inst.str} with state {_shown(state, 80)}: only a plain numeric dtype's "
                    "state (no subarray, fields, size or flags) is allowed"
                )
            inst.__setstate__(state)  # type: ignore[attr-defined]  # numpy's stubs omit it
            if not _is_plain_dtype(inst):
                raise pickle.UnpicklingError(f"numpy dtype {_shown(inst, 60)} is not a plain numeric dtype")
        else:
            raise _Refused(
                "forbidden-build",
                f"BUILD would set the state or attributes of a {type(inst).__name__}; a CIFAR file sets only "
                "its numpy arrays' and their dtypes'",
            )
        self._settled[id(inst)] = inst

    def _check_keys(self, target: object, keys: Iterable[object]) -> None:
        # Ints, floats and tuples of them hash the same in every process (no PYTHONHASHSEED), so a file of
        # n keys that all share one hash (k * (2**61 - 1)) makes filling the dict O(n^2): 20,000 such keys
        # (260 KB) took 2.6 s, a 10 MB file over an hour. str and bytes hashes are salted per process, and a
        # CIFAR dict's keys are always names ('data', 'labels', ...).
        if type(target) is not dict:
            raise _Refused(
                "forbidden-opcode",
                f"SETITEM on a {type(target).__name__}; a CIFAR file sets items only of its dicts",
            )
        for k in keys:
            if type(k) not in (str, bytes):
                raise _Refused(
                    "bad-data", f"a dict key of type {type(k).__name__}; a CIFAR file's keys are str or bytes"
                )

    def _load_setitem(self) -> None:
        stack = self.stack  # type: ignore[attr-defined]
        self._check_keys(stack[-3] if len(stack) >= 3 else None, stack[-2:-1])
        super().load_setitem()  # type: ignore[misc]

    def _load_setitems(self) -> None:
        # after MARK, self.stack holds only the key/value pairs; the dict is on top of the saved stack below
        items = self.stack  # type: ignore[attr-defined]
        below = self.metastack[-1] if self.metastack else []  # type: ignore[attr-defined]
        self._check_keys(below[-1] if below else None, items[0::2])
        super().load_setitems()  # type: ignore[misc]

    def _load_dict(self) -> None:
        self._check_keys({}, self.stack[0::2])  # type: ignore[attr-defined]
        super().load_dict()  # type: ignore[misc]

    dispatch[pickle.REDUCE[0]] = _load_reduce
    dispatch[pickle.BUILD[0]] = _load_build
    dispatch[pickle.SETITEM[0]] = _load_setitem
    dispatch[pickle.SETITEMS[0]] = _load_setitems
    dispatch[pickle.DICT[0]] = _load_dict


def _refuse_opcode(name: str) -> Callable[[Any], None]:
    def load(self: Any) -> None:
        raise _Refused("forbidden-opcode", f"opcode {name}, which a CIFAR file never uses")

    return load


for _name in (
    "INST",
    "OBJ",
    "NEWOBJ",
    "NEWOBJ_EX",
    "EXT1",
    "EXT2",
    "EXT4",
    "PERSID",
    "BINPERSID",
    "NEXT_BUFFER",
    "READONLY_BUFFER",
    # sets: no CIFAR file has one, and a set of colliding ints fills in O(n^2) (see _check_keys)
    "EMPTY_SET",
    "ADDITEMS",
    "FROZENSET",
):
    _RestrictedUnpickler.dispatch[getattr(pickle, _name)[0]] = _refuse_opcode(_name)
del _name


def _prescan_pickle(data: bytes, path: str) -> None:
    """Walk the opcode stream without executing anything (pickletools' table gives each argument's size):
    every counted length and frame must fit in the bytes that follow (the pure-Python unpickler takes a short
    read as the whole argument without a word; the C one may allocate a claimed length before reading it), and
    a memo index must be one the stream could have assigned so far (the C unpickler grows and zero-fills its
    memo table up to the index). Arguments are skipped, not decoded: this costs a fraction of the unpickling
    itself."""
    end = len(data)
    pos = 0
    memo_slots = 0

    def corrupt(message: str) -> DecodeError:
        return _decode_error(path, f"not a valid pickle: {message} at byte {pos}", "corrupt-pickle")

    while True:
        if pos >= end:
            raise corrupt("no STOP opcode")
        entry = _OPCODES[data[pos]]
        if entry is None:
            raise corrupt(f"unknown opcode 0x{data[pos]:02x}")
        name, kind, size = entry
        start = pos = pos + 1
        if kind == 0:
            pos += size
        elif kind == 1:
            for _ in range(size):
                newline = data.find(b"\n", pos)
                if newline < 0:
                    raise corrupt(f"{name} argument without its newline")
                pos = newline + 1
        else:
            width = abs(size)
            count = int.from_bytes(data[pos : pos + width], "little", signed=size < 0)
            if count < 0:
                raise corrupt(f"{name} with a negative length")
            pos += width + count
        if pos > end:
            raise corrupt(f"{name} claims {pos - start} bytes, {end - start} remain")
        if name in _MEMO_OPCODES:
            if name == "PUT":
                text = data[start : pos - 1]
                index = int(text) if text.isdigit() and len(text) <= 12 else -1
            else:
                index = int.from_bytes(data[start:pos], "little")
            if not 0 <= index <= memo_slots:
                raise corrupt(f"memo index {index} out of sequence")
            memo_slots += 1
        elif name == "MEMOIZE":
            memo_slots += 1
        elif name == "FRAME" and int.from_bytes(data[start:pos], "little") > end - pos:
            raise corrupt("frame longer than the file")
        elif name == "STOP":
            return


def _load_pickle_dict(path: str) -> dict[Any, Any]:
    with _open_regular(path) as f:
        try:
            size = os.fstat(f.fileno()).st_size
            if size > _PICKLE_MAX_FILE_BYTES:
                raise _decode_error(
                    path,
                    f"{size} bytes, more than the {_PICKLE_MAX_FILE_BYTES} a CIFAR pickle may have",
                    "too-large",
                )
            data = f.read(size)  # exactly the size: read() would size its buffer by the limit
            grew = f.read(1)
        except OSError as e:
            raise _decode_error(path, f"read failed ({type(e).__name__}: {e})", "read-error") from e
    if grew:
        raise _decode_error(path, "the file grew while it was read", "read-error")
    _prescan_pickle(data, path)
    try:
        value = _RestrictedUnpickler(data, path).load()
    except _Refused as e:
        raise _decode_error(path, str(e), e.kind) from None
    except RecursionError as e:
        raise _decode_error(path, "pickle nested too deeply", "corrupt-pickle") from e
    except Exception as e:  # noqa: BLE001 - any failure of a malformed pickle is a decode error of this file
        raise _decode_error(path, f"not a valid pickle ({type(e).__name__}: {e})", "corrupt-pickle") from e
    if not isinstance(value, dict):
        raise _decode_error(path, f"pickle holds {_describe(value)}, expected a dict", "bad-data")
    return value


class MNIST(Arrays):
    """torchvision's ``MNIST(root, train)`` files, read where torchvision keeps them (``root/MNIST/raw/``,
    ``*-idx?-ubyte`` plain or ``.gz``): the same images, targets, order and ``classes``. 28×28 gray pixels, no
    decode. ``FashionMNIST`` and ``KMNIST`` read their own folders the same way. Normalize with ``MNIST_NORM``
    (``FASHION_MNIST_NORM``)."""

    _variant = "MNIST"

    def __init__(
        self, root: str | os.PathLike[str], train: bool = True, *, storage_options: Any = None
    ) -> None:
        refuse_url(type(self).__name__, "root", root, storage_options)
        data = read_mnist(root, train, self._variant)
        super().__init__(data.images, data.targets, data.classes)
        self.root, self.train, self.files = os.fspath(root), train, data.files


class FashionMNIST(MNIST):
    """Fashion-MNIST in torchvision's layout (``root/FashionMNIST/raw/``); see ``MNIST``."""

    _variant = "FashionMNIST"


class KMNIST(MNIST):
    """Kuzushiji-MNIST in torchvision's layout (``root/KMNIST/raw/``); see ``MNIST``."""

    _variant = "KMNIST"


class CIFAR10(Arrays):
    """torchvision's ``CIFAR10(root, train)`` files (``root/cifar-10-batches-py/``: ``data_batch_1..5``,
    ``test_batch``, ``batches.meta``): the same 32×32 RGB images, targets, order and ``classes``. The pickles are
    read by a restricted unpickler (numpy arrays only: a hostile pickle cannot run code). Normalize with
    ``CIFAR10_NORM``."""

    _variant = 10

    def __init__(
        self, root: str | os.PathLike[str], train: bool = True, *, storage_options: Any = None
    ) -> None:
        refuse_url(type(self).__name__, "root", root, storage_options)
        data = read_cifar(root, train, self._variant)
        super().__init__(data.images, data.targets, data.classes)
        self.root, self.train, self.files = os.fspath(root), train, data.files


class CIFAR100(CIFAR10):
    """CIFAR-100 in torchvision's layout (``root/cifar-100-python/``: ``train``, ``test``, ``meta``; fine
    labels); see ``CIFAR10``. Normalize with ``CIFAR100_NORM``."""

    _variant = 100
