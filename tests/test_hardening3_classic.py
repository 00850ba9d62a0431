"""Hostile files for trdata.classic (the MNIST-family idx reader and the CIFAR pickle reader), third round.

Every file is written by the test in the exact on-disk layout of torchvision's downloads (idx with big-endian
struct headers, plain or gzip; CIFAR dicts pickled with protocol 2, as Python 2's cPickle and numpy 1.x wrote the
genuine ones, or as Python 3 re-saves them), then damaged the way a hostile copy would be:

* gzip bombs: a small ``.gz`` whose stream inflates far beyond what its idx header claims, or a header that
  claims more than the stream can hold or more than any idx file may: refused with memory bounded by the claim
  (and by a few MiB where the claim itself is refused), checked with tracemalloc;
* pickles that build numpy dtypes numpy never writes (subarrays, fields at offsets outside the item), that set
  attributes of the objects the reader's allowed globals resolve to (BUILD on a function), or that make one
  string of the file into many copies: a typed error naming the file, and the process unchanged;
* a split of zero images, a FIFO or a device where a file should be: typed errors naming the file, no hang.
"""

from __future__ import annotations

import io
import os
import pickle
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
from test_classic import (
    Py2Pickler,
    cifar_err,
    dump,
    idx_bytes,
    images_path,
    labels_path,
    make_cifar,
    make_mnist,
    read_err,
)
from trdata.errors import DecodeError, SourceError
from trdata.sources import classic
from trdata.sources.classic import read_cifar, read_mnist

MIB = 1 << 20
GIB = 1 << 30
# Peak Python-visible allocation allowed while refusing (numpy, bytearray and bytes report to tracemalloc).
SMALL_PEAK_BYTES = 4 * MIB


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


# ---------------------------------------------------------------------------------------------------- 9: gzip


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


# ---------------------------------------------------------------------------------------------------- 15: pickles


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


# ---------------------------------------------------------------------------------------------------- 16: empty


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


# ---------------------------------------------------------------------------------------------------- files


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
    from test_classic import make_cifar, make_mnist
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
