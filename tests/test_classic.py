"""trdata.classic: MNIST-family and CIFAR readers in torchvision's on-disk layouts.

The files are written here in the exact formats of the real downloads: idx with big-endian struct headers (plain
and gzip), CIFAR pickles as dicts of the real files' keys with numpy arrays, protocol 2 like the originals. When
torchvision is importable, its dataset classes read the same files and must give the same images, targets and
classes for every index. Hostile inputs must fail with the typed errors, name the file, and (for absurd sizes)
fail without allocating; a seeded mutation loop checks that no malformed file escapes as another exception.
"""

from __future__ import annotations

import os
import pickle
import random
import struct
import tracemalloc
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import trdata
from _fixtures import CIFAR10_NAMES, dump, idx_bytes, make_cifar, make_mnist, write_file
from trdata.errors import ConfigError, DecodeError, SourceError, TrdataError
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
