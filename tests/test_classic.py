"""trdata.classic: MNIST-family and CIFAR readers in torchvision's on-disk layouts.

The files are written here in the exact formats of the real downloads: idx with big-endian struct headers (plain
and gzip), CIFAR pickles as dicts of the real files' keys with numpy arrays, protocol 2 like the originals. When
torchvision is importable, its dataset classes read the same files and must give the same images, targets and
classes for every index. Hostile inputs must fail with the typed errors, name the file, and (for absurd sizes)
fail without allocating; a seeded mutation loop checks that no malformed file escapes as another exception.
"""

from __future__ import annotations

import io
import os
import pickle
import random
import re
import struct
import subprocess
import sys
import textwrap
import tracemalloc
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import trdata
from _fixtures import CIFAR10_NAMES, Py2Pickler, dump, idx_bytes, make_cifar, make_mnist, write_file
from trdata.errors import ConfigError, DecodeError, SourceError, TrdataError
from trdata.sources import classic
from trdata.sources.classic import (
    CIFAR10_NORM,
    CIFAR100_NORM,
    FASHION_MNIST_NORM,
    MNIST_CLASSES,
    MNIST_NORM,
    ClassicData,
    read_cifar,
    read_mnist,
)

TYPED = (ConfigError, DecodeError, SourceError)
MNIST_VARIANTS = ("MNIST", "FashionMNIST", "KMNIST")
# Peak Python-visible allocation allowed while refusing a forged size (numpy and bytearray report to tracemalloc).
SMALL_PEAK_BYTES = 4 << 20  # gzip inflates in 1 MiB chunks


# ---------------------------------------------------------------------------------------------------- round trip


@pytest.mark.parametrize("storage", ["plain", "gz", "both"])
@pytest.mark.parametrize("train", [True, False])
@pytest.mark.parametrize("variant", MNIST_VARIANTS)
def test_mnist_round_trip(tmp_path: Path, variant: str, train: bool, storage: str) -> None:
    images, labels = make_mnist(tmp_path, variant, train, storage=storage)
    got = read_mnist(tmp_path, train=train, variant=variant)
    assert isinstance(got, ClassicData)
    assert got.images.dtype == np.uint8 and got.images.shape == (30, 28, 28)
    assert got.targets.dtype == np.int64 and got.targets.shape == (30,)
    np.testing.assert_array_equal(got.images, images)
    np.testing.assert_array_equal(got.targets, labels)
    assert got.classes == list(MNIST_CLASSES[variant])
    assert got.class_to_idx == {c: i for i, c in enumerate(got.classes)}
    split = "train" if train else "t10k"
    suffix = ".gz" if storage == "gz" else ""  # plain wins when both are there, as in torchvision
    raw = tmp_path / variant / "raw"
    assert got.files == [
        str(raw / f"{split}-images-idx3-ubyte{suffix}"),
        str(raw / f"{split}-labels-idx1-ubyte{suffix}"),
    ]
    assert len(got) == 30


def test_mnist_torchvision_class_names() -> None:
    assert MNIST_CLASSES["MNIST"][0] == "0 - zero" and MNIST_CLASSES["MNIST"][9] == "9 - nine"
    assert (
        MNIST_CLASSES["FashionMNIST"][0] == "T-shirt/top" and MNIST_CLASSES["FashionMNIST"][9] == "Ankle boot"
    )
    assert MNIST_CLASSES["KMNIST"] == ("o", "ki", "su", "tsu", "na", "ha", "ma", "ya", "re", "wo")


def test_mnist_str_root_and_empty_split(tmp_path: Path) -> None:
    make_mnist(tmp_path, n=1)
    got = read_mnist(str(tmp_path))
    assert got.images.shape == (1, 28, 28) and got.targets.shape == (1,)
    # An empty split is refused naming the file (it was a ConfigError on `images`, a parameter nobody set).
    make_mnist(tmp_path, n=0)
    e = read_err(tmp_path)
    assert e.kind == "empty" and e.path == str(images_path(tmp_path)) and e.path in str(e)


@pytest.mark.parametrize("style", ["py2", "py3"])
@pytest.mark.parametrize("train", [True, False])
@pytest.mark.parametrize("variant", [10, 100])
def test_cifar_round_trip(tmp_path: Path, variant: int, train: bool, style: str) -> None:
    exp = make_cifar(tmp_path, variant, style=style)
    data, labels = exp["train" if train else "test"]
    got = read_cifar(tmp_path, train=train, variant=variant)
    n = data.shape[0]
    assert got.images.dtype == np.uint8 and got.images.shape == (n, 32, 32, 3)
    # torchvision's layout transform, written out: row = R plane, G plane, B plane, each 32x32 row-major.
    np.testing.assert_array_equal(got.images, data.reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1))
    assert got.images[1, 2, 3, 0] == data[1, 0 * 1024 + 2 * 32 + 3]
    assert got.images[1, 2, 3, 2] == data[1, 2 * 1024 + 2 * 32 + 3]
    assert got.images.flags.c_contiguous
    np.testing.assert_array_equal(got.targets, labels)
    assert got.targets.dtype == np.int64
    assert got.classes == exp["classes"]
    assert got.class_to_idx == {c: i for i, c in enumerate(exp["classes"])}
    base = exp["base"]
    if variant == 10:
        names = [f"data_batch_{i}" for i in range(1, 6)] if train else ["test_batch"]
        assert got.files == [str(base / x) for x in [*names, "batches.meta"]]
    else:
        assert got.files == [str(base / ("train" if train else "test")), str(base / "meta")]


def test_cifar_numpy1_global_spelling_and_bytes_keys(tmp_path: Path) -> None:
    """The genuine files name numpy.core.multiarray._reconstruct (numpy 1); a Python 3 re-save with
    encoding-less bytes keys and names must read too."""
    make_cifar(tmp_path, 10)
    base = tmp_path / "cifar-10-batches-py"
    batch = base / "test_batch"
    raw = batch.read_bytes()
    for new in (b"numpy.core.multiarray\n_reconstruct", b"numpy._core.multiarray\n_reconstruct"):
        for old in (b"numpy.core.multiarray\n_reconstruct", b"numpy._core.multiarray\n_reconstruct"):
            batch.write_bytes(raw.replace(old, new))
        assert new in batch.read_bytes()
        assert read_cifar(tmp_path, train=False).images.shape == (20, 32, 32, 3)
    entry = pickle.loads(raw)
    dump(batch, {k.encode(): v for k, v in entry.items()})
    dump(base / "batches.meta", {b"label_names": [c.encode() for c in CIFAR10_NAMES]})
    got = read_cifar(tmp_path, train=False)
    np.testing.assert_array_equal(got.targets, entry["labels"])
    assert got.classes == CIFAR10_NAMES


def test_norm_presets() -> None:
    assert MNIST_NORM == ((0.1307,), (0.3081,))
    assert FASHION_MNIST_NORM == ((0.2860,), (0.3530,))
    assert CIFAR10_NORM == ((0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616))
    assert CIFAR100_NORM == ((0.5071, 0.4865, 0.4409), (0.2673, 0.2564, 0.2762))


# ---------------------------------------------------------------------------------------------------- torchvision


def assert_same_as_torchvision(ours: ClassicData, theirs: Any) -> None:
    """Every index: the same pixels (np.asarray of torchvision's PIL image) and target; the same class names."""
    assert list(theirs.classes) == ours.classes
    assert dict(theirs.class_to_idx) == ours.class_to_idx
    for i in range(len(theirs)):
        img, target = theirs[i]
        np.testing.assert_array_equal(np.asarray(img), ours.images[i])
        assert target == int(ours.targets[i])


@pytest.mark.parametrize("train", [True, False])
@pytest.mark.parametrize("variant", MNIST_VARIANTS)
def test_mnist_matches_torchvision(tmp_path: Path, variant: str, train: bool) -> None:
    datasets = pytest.importorskip("torchvision.datasets")
    # torchvision's _check_exists wants all four plain files (both splits) whichever split is read.
    make_mnist(tmp_path, variant, True, n=40, storage="both", seed=7)
    make_mnist(tmp_path, variant, False, n=40, storage="both", seed=8)
    ours = read_mnist(tmp_path, train=train, variant=variant)
    theirs = getattr(datasets, variant)(str(tmp_path), train=train, download=False)
    assert len(theirs) == len(ours) == 40
    assert_same_as_torchvision(ours, theirs)


@pytest.mark.parametrize("style", ["py2", "py3"])
@pytest.mark.parametrize("train", [True, False])
@pytest.mark.parametrize("variant", [10, 100])
def test_cifar_matches_torchvision(tmp_path: Path, variant: int, train: bool, style: str) -> None:
    datasets = pytest.importorskip("torchvision.datasets")
    base_cls = datasets.CIFAR10 if variant == 10 else datasets.CIFAR100

    # torchvision checks the real files' md5 sums; these files are ours, so the subclass drops the sums
    # (check_integrity with md5=None is a file-exists check) and changes nothing else.
    class Unchecked(base_cls):  # type: ignore[misc, valid-type]
        train_list = [[name, None] for name, _ in base_cls.train_list]
        test_list = [[name, None] for name, _ in base_cls.test_list]
        meta = {**base_cls.meta, "md5": None}

    make_cifar(tmp_path, variant, seed=3, style=style)
    ours = read_cifar(tmp_path, train=train, variant=variant)
    theirs = Unchecked(str(tmp_path), train=train, download=False)
    assert len(theirs) == len(ours)
    assert_same_as_torchvision(ours, theirs)


# ---------------------------------------------------------------------------------------------------- hostile: idx


def read_err(root: Path, **kw: Any) -> DecodeError:
    with pytest.raises(DecodeError) as info:
        read_mnist(root, **kw)
    return info.value


def images_path(root: Path, variant: str = "MNIST") -> Path:
    return root / variant / "raw" / "train-images-idx3-ubyte"


def labels_path(root: Path, variant: str = "MNIST") -> Path:
    return root / variant / "raw" / "train-labels-idx1-ubyte"


def test_truncated_images(tmp_path: Path) -> None:
    make_mnist(tmp_path)
    p = images_path(tmp_path)
    p.write_bytes(p.read_bytes()[:-1])
    e = read_err(tmp_path)
    assert e.kind == "truncated" and e.path == str(p) and str(p) in str(e)
    p.write_bytes(p.read_bytes()[:10])  # header cut inside the dims
    assert read_err(tmp_path).kind == "truncated"
    p.write_bytes(b"")
    assert read_err(tmp_path).kind == "truncated"


def test_trailing_bytes(tmp_path: Path) -> None:
    make_mnist(tmp_path)
    p = images_path(tmp_path)
    p.write_bytes(p.read_bytes() + b"\0")
    assert read_err(tmp_path).kind == "trailing-data"


@pytest.mark.parametrize("gz", [False, True])
def test_wrong_magic(tmp_path: Path, gz: bool) -> None:
    make_mnist(tmp_path, storage="gz" if gz else "plain")
    for magic in (0x801, 0x0803_0000, 0x903, 0x1_0803, 0x2051_4B50):  # labels', swapped, int8, ..., a zip
        write_file(images_path(tmp_path), idx_bytes(magic, (1, 28, 28), bytes(784)), gz=gz)
        e = read_err(tmp_path)
        assert e.kind == "bad-magic" and "0x00000803" in str(e), magic


@pytest.mark.parametrize("gz", [False, True])
def test_absurd_dims_fail_without_allocating(tmp_path: Path, gz: bool) -> None:
    make_mnist(tmp_path, storage="gz" if gz else "plain")
    cases = [(2**31, 28, 28), (2**32 - 1, 2**32 - 1, 2**32 - 1), (1, 2**20, 2**20)]
    tracemalloc.start()
    try:
        for dims in cases:
            write_file(images_path(tmp_path), idx_bytes(0x803, dims, bytes(88)), gz=gz)
            tracemalloc.reset_peak()
            e = read_err(tmp_path)
            assert e.kind == "truncated" and str(list(dims)) in str(e)
            assert tracemalloc.get_traced_memory()[1] < SMALL_PEAK_BYTES, dims
        # A label file claiming 2**32-1 labels.
        make_mnist(tmp_path, storage="gz" if gz else "plain")
        write_file(labels_path(tmp_path), idx_bytes(0x801, (2**32 - 1,), bytes(50)), gz=gz)
        tracemalloc.reset_peak()
        assert read_err(tmp_path).kind == "truncated"
        assert tracemalloc.get_traced_memory()[1] < SMALL_PEAK_BYTES
    finally:
        tracemalloc.stop()


def test_zero_sized_images_refused(tmp_path: Path) -> None:
    make_mnist(tmp_path)
    write_file(images_path(tmp_path), idx_bytes(0x803, (5, 0, 28), b""))
    assert read_err(tmp_path).kind == "bad-dims"


def test_count_mismatch(tmp_path: Path) -> None:
    make_mnist(tmp_path, n=30)
    write_file(labels_path(tmp_path), idx_bytes(0x801, (29,), bytes(29)))
    e = read_err(tmp_path)
    assert e.kind == "count-mismatch" and str(labels_path(tmp_path)) in str(e) and "29 labels" in str(e)


def test_label_out_of_range(tmp_path: Path) -> None:
    make_mnist(tmp_path, n=30)
    write_file(labels_path(tmp_path), idx_bytes(0x801, (30,), bytes(17) + b"\x0a" + bytes(12)))
    e = read_err(tmp_path)
    assert e.kind == "bad-label" and e.index == 17 and "label 10 of sample 17" in str(e)


def test_corrupt_gzip(tmp_path: Path) -> None:
    make_mnist(tmp_path, storage="gz")
    p = images_path(tmp_path).with_name("train-images-idx3-ubyte.gz")
    good = p.read_bytes()
    for bad in (
        good[: len(good) // 2],  # stream cut short
        good[:10] + bytes(b ^ 0x5A for b in good[10:40]) + good[40:],  # deflate data garbled
        good[:-8] + b"\0" * 8,  # CRC and size trailer wrong
        b"\x1f\x8b" + b"garbage" * 5,  # gzip magic, then nonsense
        b"not gzip at all",
    ):
        p.write_bytes(bad)
        e = read_err(tmp_path)
        assert e.kind in ("corrupt-gzip", "truncated", "bad-magic"), (e.kind, e)
        assert str(p) in str(e)
    p.write_bytes(good[:-8] + b"\0" * 8)
    assert read_err(tmp_path).kind == "corrupt-gzip"


def test_missing_files_named(tmp_path: Path) -> None:
    with pytest.raises(SourceError, match="is not a directory"):
        read_mnist(tmp_path / "nowhere")
    make_mnist(tmp_path, train=True)
    with pytest.raises(SourceError) as info:
        read_mnist(tmp_path, train=False)  # t10k files absent
    e = info.value
    assert isinstance(e, FileNotFoundError)
    expected = tmp_path / "MNIST" / "raw" / "t10k-images-idx3-ubyte"
    assert e.path == str(expected) and str(expected) in str(e) and "t10k-images-idx3-ubyte.gz" in str(e)
    labels_path(tmp_path).unlink()
    with pytest.raises(SourceError, match="train-labels-idx1-ubyte"):
        read_mnist(tmp_path)
    with pytest.raises(SourceError, match="FashionMNIST"):
        read_mnist(tmp_path, variant="FashionMNIST")


def test_bad_arguments(tmp_path: Path) -> None:
    make_mnist(tmp_path)
    with pytest.raises(ConfigError) as info:
        read_mnist(tmp_path, variant="EMNIST")
    assert info.value.parameter == "variant"
    with pytest.raises(ConfigError, match="train"):
        read_mnist(tmp_path, train="yes")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="root"):
        read_mnist(42)  # type: ignore[arg-type]
    for variant in (11, True, "10", 10.0):
        with pytest.raises(ConfigError, match="variant"):
            read_cifar(tmp_path, variant=variant)  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------------------- hostile: CIFAR


class _Reduce:
    """A pickle payload that calls ``func(*args)`` on load."""

    def __init__(self, func: Any, *args: Any) -> None:
        self.func, self.args = func, args

    def __reduce__(self) -> tuple[Any, ...]:
        return self.func, self.args


def cifar_err(root: Path, **kw: Any) -> DecodeError:
    with pytest.raises(DecodeError) as info:
        read_cifar(root, **kw)
    return info.value


@pytest.mark.parametrize("where", ["batch", "meta", "nested"])
def test_malicious_pickle_refused_without_running(tmp_path: Path, where: str) -> None:
    make_cifar(tmp_path, 10)
    base = tmp_path / "cifar-10-batches-py"
    marker = tmp_path / "pwned"
    payloads = [
        _Reduce(os.system, f"touch {marker}"),
        _Reduce(eval, f"open({str(marker)!r}, 'w').close()"),
        _Reduce(exec, f"open({str(marker)!r}, 'w').close()"),
        _Reduce(__import__, "os"),
        _Reduce(np.ndarray, (2**40,), "u1"),  # an allowed class, called to allocate a terabyte
    ]
    for payload in payloads:
        if where == "batch":
            dump(base / "test_batch", payload)
        elif where == "meta":
            dump(base / "batches.meta", {"label_names": [payload]})
        else:
            entry = pickle.loads((base / "data_batch_1").read_bytes())
            entry["labels"][3] = payload
            dump(base / "test_batch", entry)
        e = cifar_err(tmp_path, train=False)
        # The ndarray class resolves to a token that cannot be called; every other global is refused by name.
        assert e.kind == ("corrupt-pickle" if payload.func is np.ndarray else "forbidden-global"), e
        assert not marker.exists()
        make_cifar(tmp_path, 10)
    assert not marker.exists()


def test_forged_pickle_length_does_not_allocate(tmp_path: Path) -> None:
    make_cifar(tmp_path, 100)
    p = tmp_path / "cifar-100-python" / "test"
    # BINBYTES8 / BINUNICODE8 claiming 2**40 bytes, a memo index of 2**32-1, in files of a few bytes.
    forged = [
        b"\x80\x04\x8e" + struct.pack("<Q", 2**40) + b"abc",
        b"\x80\x04\x8d" + struct.pack("<Q", 2**40) + b"abc",
        b"\x80\x02}r" + struct.pack("<I", 2**32 - 1) + b".",
        b"\x80\x02]q\x00(K\x01r" + struct.pack("<I", 2**31) + b"e.",
    ]
    tracemalloc.start()
    try:
        for data in forged:
            p.write_bytes(data)
            tracemalloc.reset_peak()
            assert cifar_err(tmp_path, train=False, variant=100).kind == "corrupt-pickle"
            assert tracemalloc.get_traced_memory()[1] < SMALL_PEAK_BYTES
    finally:
        tracemalloc.stop()


class _Array:
    """Pickles as ndarray.__reduce__ does, with a chosen reconstruct call and state."""

    def __init__(self, args: tuple[Any, ...], state: Any) -> None:
        self.args, self.state = args, state

    def __reduce__(self) -> tuple[Any, ...]:
        return np.zeros(0).__reduce__()[0], self.args, self.state


def test_pickled_arrays_are_checked(tmp_path: Path) -> None:
    """An object array would be allocated (and filled) at its claimed shape before its items are read;
    _reconstruct called with a shape of its own would allocate too. Both are refused, small."""
    make_cifar(tmp_path, 10)
    base = tmp_path / "cifar-10-batches-py"
    good = pickle.loads((base / "test_batch").read_bytes())
    cases = [
        np.array([1, "x"], dtype=object),
        _Array((np.ndarray, (0,), b"b"), (1, (2**32,), np.dtype("O"), False, [])),
        _Array((np.ndarray, (2**40,), b"b"), None),
        _Array((np.ndarray, (0,), b"u8"), None),
        _Array((np.ndarray, (0,), b"b"), (1, (2**40,), np.dtype("u1"), False, b"abc")),
        _Array((np.ndarray, (0,), b"b"), (1, (-1,), np.dtype("u1"), False, b"x")),
        _Array((np.ndarray, (0,), b"b"), "not a state"),
    ]
    tracemalloc.start()
    try:
        for data in cases:
            dump(base / "test_batch", {**good, "data": data})
            tracemalloc.reset_peak()
            e = cifar_err(tmp_path, train=False)
            assert e.kind == "corrupt-pickle", e
            assert tracemalloc.get_traced_memory()[1] < SMALL_PEAK_BYTES
    finally:
        tracemalloc.stop()
    # Arrays come back as plain ndarrays, whatever class the reader builds them as.
    dump(base / "test_batch", good)
    assert type(read_cifar(tmp_path, train=False).images) is np.ndarray
    # An empty batch pickles its buffer as bytes() (Python 3, protocol 2): that call is allowed (a refusal would be
    # corrupt-pickle), and the empty batch is then refused naming the file.
    dump(base / "test_batch", {**good, "data": np.zeros((0, 3072), np.uint8), "labels": []})
    assert cifar_err(tmp_path, train=False).kind == "empty"
    dump(base / "test_batch", {**good, "data": _Reduce(bytes, 2**40)})
    assert cifar_err(tmp_path, train=False).kind == "corrupt-pickle"


def test_cifar_bad_contents(tmp_path: Path) -> None:
    exp = make_cifar(tmp_path, 10)
    base = exp["base"]
    good = pickle.loads((base / "test_batch").read_bytes())

    def with_entry(**changes: Any) -> DecodeError:
        dump(base / "test_batch", {**good, **changes})
        e = cifar_err(tmp_path, train=False)
        assert str(base / "test_batch") in str(e)
        return e

    assert with_entry(labels=good["labels"][:-1]).kind == "count-mismatch"
    assert with_entry(labels=[*good["labels"][:-1], 10]).kind == "bad-label"
    assert with_entry(labels=[*good["labels"][:-1], -1]).kind == "bad-label"
    assert with_entry(labels=[*good["labels"][:-1], True]).kind == "bad-label"
    assert with_entry(labels=[*good["labels"][:-1], 2**70]).kind == "bad-label"
    assert with_entry(labels="0123").kind == "bad-label"
    assert with_entry(data=good["data"].astype(np.int16)).kind == "bad-data"
    assert with_entry(data=good["data"][:, :3000]).kind == "bad-data"
    assert with_entry(data=good["data"].tolist()).kind == "bad-data"
    dump(base / "test_batch", [1, 2, 3])
    assert cifar_err(tmp_path, train=False).kind == "bad-data"
    dump(base / "test_batch", {k: v for k, v in good.items() if k != "data"})
    assert "no 'data' entry" in str(cifar_err(tmp_path, train=False))
    dump(base / "test_batch", good)
    (base / "test_batch").write_bytes((base / "test_batch").read_bytes()[:-100])
    assert cifar_err(tmp_path, train=False).kind == "corrupt-pickle"
    (base / "test_batch").write_bytes(b"")
    assert cifar_err(tmp_path, train=False).kind == "corrupt-pickle"
    dump(base / "test_batch", good)
    metas: list[dict[str, Any]] = [
        {"label_names": []},
        {"label_names": "abc"},
        {"label_names": [1, 2]},
        {"names": CIFAR10_NAMES},
    ]
    for meta in metas:
        dump(base / "batches.meta", meta)
        e = cifar_err(tmp_path, train=False)
        assert e.kind in ("bad-meta", "bad-data") and "batches.meta" in str(e)


def test_cifar_missing_files_named(tmp_path: Path) -> None:
    with pytest.raises(SourceError):
        read_cifar(tmp_path / "nowhere")
    make_cifar(tmp_path, 10)
    base = tmp_path / "cifar-10-batches-py"
    (base / "data_batch_4").unlink()
    with pytest.raises(SourceError) as info:
        read_cifar(tmp_path)
    assert info.value.path == str(base / "data_batch_4") and "data_batch_4" in str(info.value)
    assert read_cifar(tmp_path, train=False).images.shape[0] == 20
    (base / "batches.meta").unlink()
    with pytest.raises(SourceError, match="batches.meta"):
        read_cifar(tmp_path, train=False)
    with pytest.raises(SourceError, match="cifar-100-python"):
        read_cifar(tmp_path, variant=100)


# ---------------------------------------------------------------------------------------------------- fuzz


def mutate(rng: random.Random, data: bytes, hot: tuple[int, int]) -> bytes:
    """One random structural mutation; positions are drawn from ``hot`` (the headers / pickle framing) half
    the time, so the loop does not spend itself on pixel bytes that any reader accepts."""
    b = bytearray(data)

    def pos() -> int:
        if rng.random() < 0.5:
            return rng.randrange(hot[0], min(hot[1], len(b))) if len(b) > hot[0] else 0
        return rng.randrange(len(b)) if b else 0

    op = rng.randrange(6)
    if op == 0:
        for _ in range(rng.randint(1, 4)):
            if b:
                b[pos()] = rng.randrange(256)
    elif op == 1:
        del b[pos() :]
    elif op == 2:
        i = pos()
        b[i:i] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 8)))
    elif op == 3:
        i = pos()
        del b[i : i + rng.randint(1, 16)]
    elif op == 4:
        i = pos()
        b[i:i] = b[i : i + rng.randint(1, 64)]
    else:
        i = pos()
        if i + 4 <= len(b):  # a 32-bit field set to an extreme
            b[i : i + 4] = struct.pack("<I", rng.choice([0, 1, 2**31, 2**32 - 1, 3072, 784]))
    return bytes(b)


FUZZ_CASES = 300


def test_fuzz_idx(tmp_path: Path) -> None:
    make_mnist(tmp_path, n=8)
    targets = [(images_path(tmp_path), 16), (labels_path(tmp_path), 8)]
    originals = {p: p.read_bytes() for p, _ in targets}
    rng = random.Random(20261201)
    outcomes = {"ok": 0, "error": 0}
    for case in range(FUZZ_CASES):
        path, header = targets[case % 2]
        for p, data in originals.items():
            p.write_bytes(data)
        mutated = mutate(rng, originals[path], (0, header + 8))
        if case % 3 == 0:  # a third go through gzip (then the mutation may also hit the compressed stream)
            path.unlink()
            gz = write_file(path, mutated, gz=True)
            if case % 2:
                gz.write_bytes(mutate(rng, gz.read_bytes(), (0, 32)))
        else:
            path.write_bytes(mutated)
        try:
            got = read_mnist(tmp_path)
        except TYPED as e:
            assert isinstance(e, TrdataError) and str(tmp_path) in str(e)
            outcomes["error"] += 1
        else:
            assert got.images.dtype == np.uint8 and got.images.ndim == 3
            assert got.targets.shape == (got.images.shape[0],)
            assert ((got.targets >= 0) & (got.targets < 10)).all()
            outcomes["ok"] += 1
        for gz_path in tmp_path.glob("MNIST/raw/*.gz"):
            gz_path.unlink()
    assert outcomes["error"] > FUZZ_CASES // 3, outcomes


def test_fuzz_cifar_pickle(tmp_path: Path) -> None:
    make_cifar(tmp_path, 100, n=2)
    base = tmp_path / "cifar-100-python"
    # Zero pixels keep the payload one run, so the "hot" range below is the pickle framing around it.
    entry = pickle.loads((base / "test").read_bytes())
    entry["data"] = np.zeros_like(entry["data"])
    dump(base / "test", entry)
    originals = {p: p.read_bytes() for p in (base / "test", base / "meta")}
    rng = random.Random(7)
    outcomes = {"ok": 0, "error": 0}
    for case in range(FUZZ_CASES):
        for p, data in originals.items():
            p.write_bytes(data)
        path = base / ("test" if case % 4 else "meta")
        data = originals[path]
        if path.name == "test" and case % 2:
            payload_start = data.find(b"\0" * 64)
            hot = (payload_start + 3072 * 2, len(data))  # after the pixels: labels, filenames, framing
        else:
            hot = (0, min(len(data), 400))
        path.write_bytes(mutate(rng, data, hot))
        try:
            got = read_cifar(tmp_path, train=False, variant=100)
        except TYPED as e:
            assert str(path) in str(e)
            outcomes["error"] += 1
        else:
            assert got.images.shape == (got.targets.shape[0], 32, 32, 3)
            assert ((got.targets >= 0) & (got.targets < len(got.classes))).all()
            outcomes["ok"] += 1
    assert outcomes["error"] > FUZZ_CASES // 3, outcomes


@pytest.mark.parametrize("cls", ["MNIST", "FashionMNIST", "KMNIST", "CIFAR10", "CIFAR100"])
def test_dataset_sources_feed_a_loader_the_exact_pixels(tmp_path: Path, cls: str) -> None:
    """trdata.MNIST/…/CIFAR100 are Arrays sources over these readers: through a Loader at full size (no geometry)
    every image, target and index arrives exactly once and unchanged (gray with its one channel)."""
    if cls.endswith("MNIST"):
        make_mnist(tmp_path, cls, True, n=30, storage="gz", seed=3)
        data = read_mnist(tmp_path, train=True, variant=cls)
    else:
        make_cifar(tmp_path, int(cls[5:]), n=20, seed=3)
        data = read_cifar(tmp_path, train=True, variant=int(cls[5:]))
    src = getattr(trdata, cls)(tmp_path, train=True)
    assert (
        src.classes == data.classes
        and src.class_to_idx == data.class_to_idx
        and len(src) == len(data.targets)
    )
    h, w = data.images.shape[1:3]
    kw: dict[str, Any] = dict(
        batch_size=7, transforms=[trdata.CenterCrop((h, w))], dtype="uint8", layout="NHWC"
    )
    with trdata.Loader(src, workers=2, shuffle=True, seed=1, **kw) as ld:
        batches = list(ld)
    idx = np.concatenate([b.indices for b in batches])
    out = np.concatenate([b.images for b in batches])
    assert sorted(idx.tolist()) == list(range(len(src)))
    want = data.images if data.images.ndim == 4 else data.images[..., None]
    np.testing.assert_array_equal(out, want[idx])
    np.testing.assert_array_equal(np.concatenate([b.labels for b in batches]), data.targets[idx])
    norm = trdata.MNIST_NORM if cls.endswith("MNIST") else trdata.CIFAR10_NORM
    with trdata.Loader(src, workers=1, normalize=norm, **{**kw, "dtype": "float32"}) as ld:
        assert np.isfinite(next(iter(ld)).images).all()


# -------------------- hostile inputs and their regressions -------------------------------------------------


MIB = 1 << 20


GIB = 1 << 30


def write_gz_stream(path: Path, head: bytes, zeros: int, tail: bytes = b"") -> Path:
    """A single-member gzip file (what ``gzip.open(path, 'wb')`` writes) of ``head``, then ``zeros`` zero bytes,
    then ``tail``, compressed streaming so that a gigabyte of zeros never exists in memory (~1 MB on disk)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    packer = zlib.compressobj(9, zlib.DEFLATED, 31)  # wbits 31: gzip header and trailer
    block = bytes(MIB)
    with open(path, "wb") as f:
        f.write(packer.compress(head))
        left = zeros
        while left:
            n = min(left, MIB)
            f.write(packer.compress(block[:n]))
            left -= n
        f.write(packer.compress(tail))
        f.write(packer.flush())
    return path


def peak_of(fn: Any) -> tuple[BaseException | None, int]:
    """Run ``fn``; return what it raised and the peak traced allocation while it ran."""
    tracemalloc.start()
    tracemalloc.reset_peak()
    try:
        fn()
    except BaseException as e:  # noqa: BLE001 - returned to the caller, which checks the type
        return e, tracemalloc.get_traced_memory()[1]
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    return None, peak


def gz_images(root: Path) -> Path:
    return images_path(root).with_name("train-images-idx3-ubyte.gz")


def test_gz_bomb_after_a_small_header_is_refused_in_bounded_memory(tmp_path: Path) -> None:
    """A valid header and payload of 10 images, then 1 GiB of zeros in the same stream (a 1 MB file): trailing
    data, found after inflating at most the claimed 7,840 bytes + 1, never the gigabyte."""
    make_mnist(tmp_path, n=10, storage="gz")
    p = gz_images(tmp_path)
    images = np.random.default_rng(1).integers(0, 256, (10, 28, 28), dtype=np.uint8).tobytes()
    write_gz_stream(p, idx_bytes(0x803, (10, 28, 28), images), GIB)
    assert p.stat().st_size < 2 * MIB
    e, peak = peak_of(lambda: read_mnist(tmp_path))
    assert isinstance(e, DecodeError) and e.kind == "trailing-data", e
    assert e.path == str(p) and str(p) in str(e)
    assert peak < SMALL_PEAK_BYTES, peak


def test_gz_claim_beyond_what_the_stream_can_inflate_is_refused_before_inflating(tmp_path: Path) -> None:
    """A header claiming 3,000 images of 1000x1000 (3 GB) in a 1 MB stream of 1 GiB of zeros: deflate inflates at
    most 1032 bytes per compressed byte, so the file cannot hold the claim. Refused from the header and the
    file's size, without inflating the gigabyte (which the reader used to collect before finding it short)."""
    make_mnist(tmp_path, n=10, storage="gz")
    p = gz_images(tmp_path)
    write_gz_stream(p, idx_bytes(0x803, (3000, 1000, 1000), b""), GIB)
    e, peak = peak_of(lambda: read_mnist(tmp_path))
    assert isinstance(e, DecodeError) and e.kind == "truncated", e
    assert e.path == str(p) and "[3000, 1000, 1000]" in str(e) and "1032" in str(e)
    assert peak < SMALL_PEAK_BYTES, peak


def test_gz_claim_above_the_payload_limit_is_refused_before_inflating(tmp_path: Path) -> None:
    """A header claiming 2,800 images of 1000x1000 (2.8 GB, above the 2 GiB an idx payload may have) over 3 MiB
    of incompressible data (so the stream could in principle inflate that far): refused as too large before
    anything is inflated."""
    make_mnist(tmp_path, n=10, storage="gz")
    p = gz_images(tmp_path)
    noise = np.random.default_rng(2).integers(0, 256, 3 * MIB, dtype=np.uint8).tobytes()
    write_gz_stream(p, idx_bytes(0x803, (2800, 1000, 1000), b""), 0, noise)
    assert p.stat().st_size * 1032 > 2800 * 1000 * 1000  # the deflate bound alone would not refuse it
    e, peak = peak_of(lambda: read_mnist(tmp_path))
    assert isinstance(e, DecodeError) and e.kind == "too-large", e
    assert e.path == str(p) and "[2800, 1000, 1000]" in str(e)
    assert peak < SMALL_PEAK_BYTES, peak
    assert classic._IDX_MAX_PAYLOAD_BYTES == 2**31


def test_plain_file_above_the_payload_limit_is_refused_before_allocating(tmp_path: Path) -> None:
    """A sparse plain idx file whose size matches a header of 2,739,147 images of 28x28 (2**31 + 7,840 bytes):
    the reader used to allocate and read 2 GiB. Refused from the header and the file's size."""
    make_mnist(tmp_path, n=10)
    p = images_path(tmp_path)
    n = 2**31 // 784 + 1
    p.write_bytes(idx_bytes(0x803, (n, 28, 28), b""))
    os.truncate(p, 16 + n * 784)  # sparse: no disk used
    e, peak = peak_of(lambda: read_mnist(tmp_path))
    assert isinstance(e, DecodeError) and e.kind == "too-large", e
    assert e.path == str(p) and str(n) in str(e)
    assert peak < SMALL_PEAK_BYTES, peak


def test_label_count_is_checked_before_the_images_inflate(tmp_path: Path) -> None:
    """Images: a genuine-looking stream of 1,000,000 blank 28x28 images (784 MB inflated, <1 MB on disk); labels:
    30. Both headers are read and compared before any payload is inflated."""
    make_mnist(tmp_path, n=30, storage="gz")
    p = gz_images(tmp_path)
    write_gz_stream(p, idx_bytes(0x803, (10**6, 28, 28), b""), 784 * 10**6)
    e, peak = peak_of(lambda: read_mnist(tmp_path))
    assert isinstance(e, DecodeError) and e.kind == "count-mismatch", e
    assert peak < SMALL_PEAK_BYTES, peak


def test_gz_within_the_limits_still_reads(tmp_path: Path) -> None:
    """The streaming writer gives what torchvision's download leaves: read back exactly."""
    images, labels = make_mnist(tmp_path, n=50, storage="gz")
    write_gz_stream(gz_images(tmp_path), idx_bytes(0x803, (50, 28, 28), images.tobytes()), 0)
    got = read_mnist(tmp_path)
    np.testing.assert_array_equal(got.images, images)
    np.testing.assert_array_equal(got.targets, labels)


class _Dtype:
    """Pickles as ``dtype.__reduce__`` does, ``dtype(spec, False, True)`` then BUILD with a chosen state."""

    def __init__(self, spec: str, state: tuple[Any, ...]) -> None:
        self.spec, self.state = spec, state

    def __reduce__(self) -> tuple[Any, ...]:
        return np.dtype, (self.spec, False, True), self.state


class _ArrayOf:
    """Pickles as ``ndarray.__reduce__`` does, with a chosen shape, dtype and raw buffer."""

    def __init__(self, shape: tuple[int, ...], dtype: Any, raw: bytes) -> None:
        self.shape, self.dtype, self.raw = shape, dtype, raw

    def __reduce__(self) -> tuple[Any, ...]:
        return (
            np.zeros(0).__reduce__()[0],
            (np.ndarray, (0,), b"b"),
            (1, self.shape, self.dtype, False, self.raw),
        )


def _good_test_batch(root: Path) -> tuple[Path, dict[str, Any]]:
    make_cifar(root, 10)
    path = root / "cifar-10-batches-py" / "test_batch"
    return path, pickle.loads(path.read_bytes())


def _assert_refused_dtype(root: Path, path: Path, entry: dict[str, Any]) -> None:
    dump(path, entry)
    e, peak = peak_of(lambda: read_cifar(root, train=False))
    assert isinstance(e, DecodeError), repr(e)
    assert e.kind == "corrupt-pickle" and e.path == str(path) and str(path) in str(e), e
    assert "dtype" in str(e), e
    assert peak < SMALL_PEAK_BYTES, peak


def test_pickled_dtype_with_a_subarray_is_refused(tmp_path: Path) -> None:
    """A dtype BUILD with a subarray: on a 'u1' it keeps itemsize 1 with a subarray of 3072 (the reshape then
    raised a bare ValueError), on the labels a subarray of 2**20 was accepted and read far past the buffer."""
    path, good = _good_test_batch(tmp_path)
    n = len(good["labels"])
    pixels = good["data"].tobytes()
    u1, i8 = np.dtype("u1"), np.dtype("<i8")

    def sub(spec: str, order: str, base: np.dtype[Any], shape: tuple[int, ...], size: int) -> _Dtype:
        return _Dtype(spec, (3, order, (base, shape), None, None, size, base.alignment, 0))

    cases = [
        {**good, "data": _ArrayOf((n, 3072), sub("u1", "|", u1, (3072,), 3072), pixels)},
        {**good, "labels": _ArrayOf((n,), sub("u1", "|", u1, (2**20,), 1), bytes(n))},
        {**good, "labels": _ArrayOf((n,), sub("i8", "<", i8, (2,), 16), bytes(8 * n))},
        {**good, "data": _ArrayOf((n,), sub("V3072", "|", u1, (3072,), 3072), pixels)},
        {**good, "data": _ArrayOf((n,), np.dtype(("u1", (3072,))), pixels)},
    ]
    for entry in cases:
        _assert_refused_dtype(tmp_path, path, entry)


def test_pickled_dtype_with_out_of_bounds_fields_is_refused(tmp_path: Path) -> None:
    """A dtype BUILD giving a 1-byte 'u1' (or an 8-byte 'i8') a field at offset 1 MiB: the reader accepted both,
    and converting them read memory outside the array."""
    path, good = _good_test_batch(tmp_path)
    n = len(good["labels"])
    pixels, labels = good["data"].tobytes(), np.array(good["labels"], "<i8").tobytes()
    u1, i8 = np.dtype("u1"), np.dtype("<i8")

    def far_field(spec: str, order: str, base: np.dtype[Any], size: int) -> _Dtype:
        return _Dtype(spec, (3, order, None, ("a",), {"a": (base, 1 << 20)}, size, base.alignment, 0))

    cases = [
        {**good, "data": _ArrayOf((n, 3072), far_field("u1", "|", u1, 1), pixels)},
        {**good, "labels": _ArrayOf((n,), far_field("i8", "<", i8, 8), labels)},
        {**good, "labels": _ArrayOf((n,), far_field("V8", "|", i8, 8), bytes(8 * n))},
        # Flags 1 (the item holds references): the bytes would be read as object pointers.
        {**good, "labels": _ArrayOf((n,), _Dtype("u8", (3, "<", None, None, None, -1, -1, 1)), bytes(8 * n))},
        {**good, "labels": _ArrayOf((n,), np.dtype([("a", "<i8")]), bytes(8 * n))},
        {**good, "labels": _ArrayOf((n,), np.dtype("c16"), bytes(16 * n))},
    ]
    for entry in cases:
        _assert_refused_dtype(tmp_path, path, entry)


# (module, name) of every global the reader allows, spelled as the pickles spell them.
ALLOWED_GLOBALS = [
    ("numpy.core.multiarray", "_reconstruct"),
    ("numpy._core.multiarray", "_reconstruct"),
    ("numpy", "ndarray"),
    ("numpy", "dtype"),
    ("_codecs", "encode"),
    ("__builtin__", "bytes"),
    ("builtins", "bytes"),
]


def _build_on_global(module: str, name: str, state: bytes) -> bytes:
    """Protocol 2: ``{'data': <module.name> BUILD state}`` - GLOBAL, the pickled state, BUILD, in a batch dict."""
    return b"\x80\x02}q\x00U\x04dataq\x01c" + f"{module}\n{name}\n".encode() + state + b"bs."


def test_build_on_an_allowed_global_changes_nothing(tmp_path: Path) -> None:
    """BUILD with the global itself as its target set attributes of the object it resolves to (a function of
    the reader, or numpy's): ``__dict__`` entries, then ``__doc__``/``__defaults__`` through the slot state, for the
    rest of the process. Refused before anything is set, naming the file."""
    make_cifar(tmp_path, 10)
    path = tmp_path / "cifar-10-batches-py" / "test_batch"
    dict_state = b"}(U\x05pwnedK\x01u"  # {'pwned': 1}
    slot_state = b"N}(U\x07__doc__U\x05pwnedU\x0c__defaults__K\x07\x85u\x86"  # (None, {...})
    for module, name in ALLOWED_GLOBALS:
        target = classic._PICKLE_GLOBALS[(module, name)]
        before = (getattr(target, "__doc__", None), getattr(target, "__defaults__", None))
        for state in (dict_state, slot_state):
            path.write_bytes(_build_on_global(module, name, state))
            with pytest.raises(DecodeError) as info:
                read_cifar(tmp_path, train=False)
            e = info.value
            assert e.path == str(path) and str(path) in str(e), e
            assert not hasattr(target, "pwned"), (module, name)
            after = (getattr(target, "__doc__", None), getattr(target, "__defaults__", None))
            assert after == before, (module, name)
    # numpy's own objects were never reachable, and are untouched.
    assert not hasattr(np.dtype, "pwned") and not hasattr(np.ndarray, "pwned")
    # The reader still reads a genuine file afterwards.
    make_cifar(tmp_path, 10)
    assert read_cifar(tmp_path, train=False).images.shape == (20, 32, 32, 3)


def test_build_on_anything_but_an_array_or_its_dtype_is_refused(tmp_path: Path) -> None:
    """BUILD targets other than the pickled arrays and dtypes: a bytes value, the dtype numpy shares process-wide
    (``dtype('u1', False, False)`` with copy off), a dtype BUILT twice."""
    path, good = _good_test_batch(tmp_path)
    glob_dtype = b"cnumpy\ndtype\nq\x02"
    plain = b"(K\x03U\x01|NNNJ\xff\xff\xff\xffJ\xff\xff\xff\xffK\x00tq\x03"
    cases = [
        b"\x80\x02}q\x00U\x04dataq\x01c_codecs\nencode\nX\x03\x00\x00\x00abcU\x06latin1\x86R}(U\x01aK\x01ubs.",
        b"\x80\x02}q\x00U\x04dataq\x01" + glob_dtype + b"U\x02u1\x89\x89\x87R" + plain + b"bs.",
        b"\x80\x02}q\x00U\x04dataq\x01" + glob_dtype + b"U\x02u1\x89\x88\x87R" + plain + b"bh\x03bs.",
    ]
    for data in cases:
        path.write_bytes(data)
        e = cifar_err(tmp_path, train=False)
        assert e.path == str(path) and e.kind in ("forbidden-build", "corrupt-pickle"), e
    assert np.dtype("u1").byteorder == "|" and np.dtype("u1").fields is None


def test_one_string_copied_many_times_is_refused(tmp_path: Path) -> None:
    """A 1 MiB string in the memo, then 600 eight-byte ``_codecs.encode(memo[2], 'latin1')`` calls (and the same
    with 600 arrays BUILT from it): a 1 MB file that made 600 MB. The data a pickle builds is bounded by its
    size."""
    path, _ = _good_test_batch(tmp_path)
    text = "x" * MIB
    head = (
        b"\x80\x02]q\x00(c_codecs\nencode\nq\x01X"
        + struct.pack("<I", len(text))
        + text.encode()
        + b"q\x02U\x06latin1q\x03\x86R"
    )
    encodes = head + b"h\x01h\x02h\x03\x86R" * 600 + b"e."
    dtype_u1 = b"cnumpy\ndtype\nU\x02u1\x89\x88\x87R(K\x03U\x01|NNNJ\xff\xff\xff\xffJ\xff\xff\xff\xffK\x00tb"
    one_array = b"h\x01h\x02K\x00\x85U\x01b\x87R(K\x01J" + struct.pack("<i", MIB) + b"\x85h\x03\x89h\x04tb"
    arrays = (
        b"\x80\x02]q\x00(cnumpy.core.multiarray\n_reconstruct\nq\x01cnumpy\nndarray\nq\x02"
        + dtype_u1
        + b"q\x030X"  # the dtype to memo 3, popped
        + struct.pack("<I", len(text))
        + text.encode()
        + b"q\x040"  # the text to memo 4, popped
        + one_array * 600
        + b"e."
    )
    for data in (encodes, arrays):
        path.write_bytes(data)
        e, peak = peak_of(lambda: read_cifar(tmp_path, train=False))
        assert isinstance(e, DecodeError) and e.path == str(path), repr(e)
        assert peak < 8 * len(data) + SMALL_PEAK_BYTES, (peak, len(data))


class _Py2Numpy1Pickler(Py2Pickler):
    """What the genuine CIFAR files are byte for byte: Python 2's cPickle (see Py2Pickler) of numpy 1.x objects,
    whose ``dtype.__reduce__`` wrote ``dtype('u1', 0, 1)`` with ints (numpy's descriptor.c, ``"(Nii)"``) where
    today's numpy writes bools."""

    def reducer_override(self, obj: Any) -> Any:
        if isinstance(obj, np.dtype):
            cls, (spec, _align, _copy), state = obj.__reduce__()
            return cls, (spec, 0, 1), state
        return NotImplemented


def test_genuine_numpy1_dtype_spelling_reads(tmp_path: Path) -> None:
    """The genuine 2009 CIFAR pickles spell the array's dtype ``dtype('u1', 0, 1)``; the reader refused them."""
    exp = make_cifar(tmp_path, 10)
    base = exp["base"]
    for name in ("test_batch", "batches.meta"):
        obj = pickle.loads((base / name).read_bytes())
        buf = io.BytesIO()
        _Py2Numpy1Pickler(buf, protocol=2).dump(obj)
        data = buf.getvalue().replace(b"cnumpy._core.multiarray\n", b"cnumpy.core.multiarray\n")
        (base / name).write_bytes(data)
    assert b"cnumpy\ndtype\n" in (base / "test_batch").read_bytes()
    assert re.search(rb"U\x02u1q.K\x00K\x01\x87", (base / "test_batch").read_bytes(), re.DOTALL)
    got = read_cifar(tmp_path, train=False)
    want, labels = exp["test"]
    np.testing.assert_array_equal(got.images, want.reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1))
    np.testing.assert_array_equal(got.targets, labels)
    datasets = pytest.importorskip("torchvision.datasets")

    class Unchecked(datasets.CIFAR10):  # type: ignore[misc, valid-type]
        # torchvision checks the real files' md5 sums; with None it checks that they exist (as test_classic does).
        train_list = [[name, None] for name, _ in datasets.CIFAR10.train_list]
        test_list = [[name, None] for name, _ in datasets.CIFAR10.test_list]
        meta = {**datasets.CIFAR10.meta, "md5": None}

    theirs = Unchecked(str(tmp_path), train=False, download=False)
    np.testing.assert_array_equal(theirs.data, got.images)
    assert list(theirs.targets) == got.targets.tolist()


def test_refused_opcodes(tmp_path: Path) -> None:
    """INST/OBJ/NEWOBJ/EXT/persistent ids never occur in a CIFAR file: refused by name, typed, naming the file."""
    path, _ = _good_test_batch(tmp_path)
    for data in (
        b"\x80\x02(U\x03abcU\x06latin1i_codecs\nencode\n.",  # INST
        b"\x80\x02(c_codecs\nencode\nU\x03abcU\x06latin1o.",  # OBJ
        b"\x80\x02cnumpy\ndtype\n)\x81.",  # NEWOBJ
        b"\x80\x02\x82\x01.",  # EXT1
        b"\x80\x02U\x01xQ.",  # BINPERSID
    ):
        path.write_bytes(data)
        e = cifar_err(tmp_path, train=False)
        assert e.path == str(path) and e.kind in ("forbidden-opcode", "corrupt-pickle"), e


def test_empty_mnist_split_names_the_file(tmp_path: Path) -> None:
    """An idx pair of 0 images: the error names the images file, not a parameter the user never passed."""
    make_mnist(tmp_path, n=0)
    e = read_err(tmp_path)
    assert e.kind == "empty" and e.path == str(images_path(tmp_path)) and str(images_path(tmp_path)) in str(e)
    with pytest.raises(DecodeError) as info:
        trdata.MNIST(tmp_path)
    assert info.value.path == str(images_path(tmp_path))
    make_mnist(tmp_path, n=0, storage="gz")
    for p in (images_path(tmp_path), labels_path(tmp_path)):
        p.unlink()
    assert read_err(tmp_path).path == str(gz_images(tmp_path))


def test_empty_cifar_batch_names_the_file(tmp_path: Path) -> None:
    path, good = _good_test_batch(tmp_path)
    dump(path, {**good, "data": np.zeros((0, 3072), np.uint8), "labels": [], "filenames": []})
    e = cifar_err(tmp_path, train=False)
    assert e.kind == "empty" and e.path == str(path) and str(path) in str(e)
    with pytest.raises(DecodeError) as info:
        trdata.CIFAR10(tmp_path, train=False)
    assert info.value.path == str(path)


def test_sizes_a_source_refuses_are_refused_naming_the_file(tmp_path: Path) -> None:
    """What the in-memory source behind trdata.MNIST/CIFAR10 refuses (an image side above 65535, two classes of
    one name) is refused by the reader, naming the file, not the source's parameter."""
    make_mnist(tmp_path, n=1)
    p = images_path(tmp_path)
    p.write_bytes(idx_bytes(0x803, (1, 70_000, 1), bytes(70_000)))
    e = read_err(tmp_path)
    assert e.kind == "bad-dims" and e.path == str(p) and "70000x1" in str(e)
    with pytest.raises(DecodeError) as info:
        trdata.MNIST(tmp_path)
    assert info.value.path == str(p)

    exp = make_cifar(tmp_path, 10)
    meta = exp["base"] / "batches.meta"
    names = [*exp["classes"][:-1], exp["classes"][0]]
    dump(meta, {"num_cases_per_batch": 20, "label_names": names, "num_vis": 3072})
    e = cifar_err(tmp_path, train=False)
    assert e.kind == "bad-meta" and e.path == str(meta) and e.index == 9, e
    with pytest.raises(DecodeError) as info:
        trdata.CIFAR10(tmp_path, train=False)
    assert info.value.path == str(meta)


def test_fifo_and_device_at_the_file_path_are_refused(tmp_path: Path) -> None:
    """A FIFO or a link to a character device where torchvision's file should be: SourceError naming the path and
    saying what is there (it used to report the file as missing); a link to a regular file still reads."""
    make_mnist(tmp_path, n=5)
    p = images_path(tmp_path)
    real = p.with_name("real-images")
    p.rename(real)
    os.mkfifo(p)
    with pytest.raises(SourceError, match="not a regular file") as info:
        read_mnist(tmp_path)
    assert info.value.path == str(p)
    p.unlink()
    p.symlink_to("/dev/zero")
    with pytest.raises(SourceError, match="not a regular file"):
        read_mnist(tmp_path)
    p.unlink()
    p.symlink_to(real)
    assert len(read_mnist(tmp_path)) == 5

    path, _ = _good_test_batch(tmp_path)
    path.unlink()
    os.mkfifo(path)
    with pytest.raises(SourceError, match="not a regular file") as info:
        read_cifar(tmp_path, train=False)
    assert info.value.path == str(path)


FIFO_RACE = textwrap.dedent(
    """
    import os, sys
    sys.path.insert(0, sys.argv[2])
    from _fixtures import make_cifar, make_mnist
    from pathlib import Path
    import trdata.sources.classic as classic
    root = Path(sys.argv[1])
    make_mnist(root, n=5)
    make_cifar(root, 10)
    mnist = root / "MNIST" / "raw" / "train-images-idx3-ubyte"
    cifar = root / "cifar-10-batches-py" / "test_batch"
    for p in (mnist, cifar):
        p.unlink()
        os.mkfifo(p)
    # The file is swapped for a FIFO between any check of the path and the open: every check says "a file".
    os.path.isfile = lambda path: True
    for read in (lambda: classic.read_mnist(root), lambda: classic.read_cifar(root, train=False)):
        try:
            read()
        except classic.SourceError as e:
            print("refused:", e.path)
    """
)


def test_fifo_swapped_in_after_the_check_does_not_hang(tmp_path: Path) -> None:
    """Opening a FIFO for reading blocks until a writer comes: the reader opens non-blocking and checks the
    opened file, so a FIFO put in place after any path check cannot hang it."""
    tests = str(Path(__file__).parent)
    proc = subprocess.run(
        [sys.executable, "-c", FIFO_RACE, str(tmp_path), tests],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.count("refused:") == 2, proc.stdout


def _colliding_int_keys_pickle(n: int) -> bytes:
    """A protocol-2 pickle of one dict with n int keys k * (2**61 - 1): ints hash modulo 2**61 - 1 in every
    process, so all n share the hash 0 and each insertion probes past all earlier ones."""
    modulus = (1 << 61) - 1
    parts = [b"\x80\x02}("]  # PROTO 2, EMPTY_DICT, MARK
    for i in range(1, n + 1):
        k = i * modulus
        raw = k.to_bytes((k.bit_length() + 8) // 8, "little", signed=True)
        parts.append(b"\x8a" + bytes([len(raw)]) + raw + b"N")  # LONG1 key, NONE value
    parts.append(b"u.")  # SETITEMS, STOP
    return b"".join(parts)


def _cifar10_of(root: Path, data: bytes) -> None:
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    for name in ("data_batch_1", "data_batch_2", "data_batch_3", "data_batch_4", "data_batch_5"):
        (folder / name).write_bytes(data)
    (folder / "test_batch").write_bytes(data)
    (folder / "batches.meta").write_bytes(data)


@pytest.mark.parametrize(
    ("body", "why"),
    [
        pytest.param(lambda: _colliding_int_keys_pickle(20_000), "key of type int", id="colliding-int-keys"),
        pytest.param(
            lambda: b"\x80\x02}G\x3f\xf0\x00\x00\x00\x00\x00\x00Ns.", "key of type float", id="float-key"
        ),
        pytest.param(lambda: b"\x80\x02}K\x01K\x02\x86Ns.", "key of type tuple", id="tuple-key"),
        pytest.param(lambda: b"\x80\x02\x8f(K\x01\x90.", "EMPTY_SET", id="set"),
        pytest.param(lambda: b"\x80\x02]K\x00Ns.", "SETITEM on a list", id="setitem-on-a-list"),
    ],
)
def test_cifar_dict_keys_are_names_and_sets_are_refused(tmp_path: Path, body: object, why: str) -> None:
    """A CIFAR dict's keys are str (Python 2 files) or bytes (Python 3 re-saves). 20,000 int keys sharing one
    hash (260 KB) took 2.6 s to load, quadratic in their number (a 10 MB file: over an hour); now any key that
    is not str/bytes, any set and any SETITEM on something else than a dict is refused naming the file."""
    data = body()  # type: ignore[operator]
    _cifar10_of(tmp_path, data)
    with pytest.raises(trdata.DecodeError) as e:
        classic.read_cifar(tmp_path, train=False)
    assert e.value.path.endswith("batches.meta")
    assert e.value.kind in ("bad-data", "forbidden-opcode")
    assert why in str(e.value)


def test_cifar_dicts_with_str_and_bytes_keys_still_load(tmp_path: Path) -> None:
    import pickle

    import numpy as np

    folder = tmp_path / "cifar-10-batches-py"
    folder.mkdir()
    rng = np.random.default_rng(0)
    batch = {b"data": rng.integers(0, 256, (4, 3072), dtype=np.uint8), b"labels": [0, 1, 2, 1]}
    for name in (
        "data_batch_1",
        "data_batch_2",
        "data_batch_3",
        "data_batch_4",
        "data_batch_5",
        "test_batch",
    ):
        (folder / name).write_bytes(pickle.dumps(batch, protocol=2))
    (folder / "batches.meta").write_bytes(pickle.dumps({"label_names": ["a", "b", "c"]}, protocol=2))
    got = classic.read_cifar(tmp_path, train=True)
    assert got.images.shape == (20, 32, 32, 3)
    assert list(got.targets[:4]) == [0, 1, 2, 1]
