"""DLPack export of batches on real JPEGs: zero-copy, dtypes (bfloat16 as a real bfloat16), capsule
protocol (legacy/versioned names, consumption), and buffer lifetime (a consumer tensor alone keeps its
buffer; unconsumed capsules return theirs)."""

from __future__ import annotations

import gc
import hashlib
import subprocess
import sys
import threading

import numpy as np
import pytest
import trdata

DTYPES = ["uint8", "float16", "bfloat16", "float32"]
PREFETCH = 2


def make(paths, *, dtype="float32", layout="NCHW", batch_size=8, max_held_batches=16, **kw):
    norm = None if dtype == "uint8" else trdata.IMAGENET
    return trdata.Loader(
        trdata.FileList(paths, list(range(len(paths)))),
        transforms=[trdata.RandomResizedCrop(32), trdata.RandomHorizontalFlip()],
        batch_size=batch_size,
        workers=2,
        dtype=dtype,
        layout=layout,
        normalize=norm,
        prefetch=PREFETCH,
        max_held_batches=max_held_batches,
        **kw,
    )


def first_batch(paths, **kw):
    with make(paths, **kw) as loader:
        return next(iter(loader))


def bits(images: np.ndarray) -> np.ndarray:
    """The raw bytes of `images` as an array of same shape (so bfloat16 compares bit-exactly)."""
    return images.view(np.dtype(f"u{images.dtype.itemsize}"))


def capsule_name(capsule) -> str:
    return repr(capsule).split('"')[1]


# --- zero-copy ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ["uint8", "float16", "float32"])
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_numpy_from_dlpack_shares_memory(small_paths, dtype, layout):
    batch = first_batch(small_paths[:16], dtype=dtype, layout=layout)
    x = np.from_dlpack(batch)
    assert x.ctypes.data == batch.images.ctypes.data
    assert np.shares_memory(x, batch.images)
    assert (
        x.dtype == batch.images.dtype and x.shape == batch.images.shape and x.strides == batch.images.strides
    )
    assert np.array_equal(x, batch.images)
    assert batch.__dlpack_device__() == (1, 0)


def test_dlpack_of_a_plain_batch_falls_back_to_numpy():
    images = np.arange(2 * 3 * 4 * 4, dtype=np.float32).reshape(2, 3, 4, 4)
    batch = trdata.Batch(images, np.zeros(2, np.int64), np.arange(2), 2, 0)
    assert batch._lease is None
    assert np.shares_memory(np.from_dlpack(batch), images)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_torch_from_dlpack_dtype_shape_strides_values(small_paths, dtype, layout):
    torch = pytest.importorskip("torch")
    batch = first_batch(small_paths[:16], dtype=dtype, layout=layout)
    images, labels = batch.torch()
    expected = {
        "uint8": torch.uint8,
        "float16": torch.float16,
        "bfloat16": torch.bfloat16,
        "float32": torch.float32,
    }[dtype]
    assert images.dtype == expected
    assert tuple(images.shape) == batch.images.shape
    assert images.stride() == tuple(s // batch.images.itemsize for s in batch.images.strides)
    assert images.data_ptr() == batch.images.ctypes.data, "zero-copy"
    assert images.device.type == "cpu"
    if dtype == "bfloat16":
        assert np.array_equal(images.view(torch.int16).numpy().view(np.uint16), bits(batch.images))
        x = images.float()
        assert torch.isfinite(x).all() and -2.2 < x.min() < 0 < x.max() < 2.7  # ImageNet-normalized
    else:
        assert np.array_equal(images.numpy(), batch.images)
    assert labels.dtype == torch.int64 and labels.tolist() == batch.labels.tolist()
    assert torch.equal(torch.from_dlpack(batch), images)


# --- capsule protocol ----------------------------------------------------------------------------------


def test_capsule_names_legacy_and_versioned(small_paths):
    batch = first_batch(small_paths[:16])
    lease = batch._lease
    assert capsule_name(lease.__dlpack__(max_version=(1, 0))) == "dltensor_versioned"
    assert capsule_name(lease.__dlpack__(max_version=(1, 3))) == "dltensor_versioned"
    assert capsule_name(lease.__dlpack__(max_version=None)) == "dltensor"
    assert capsule_name(lease.__dlpack__()) == "dltensor"
    assert capsule_name(lease.__dlpack__(max_version=(0, 8))) == "dltensor"
    assert capsule_name(batch.__dlpack__(max_version=(1, 0))) == "dltensor_versioned"
    assert lease.__dlpack_device__() == (1, 0)
    assert lease.dtype == "float32" and lease.shape == batch.images.shape


@pytest.mark.parametrize("max_version", [None, (1, 0)])
def test_consumed_capsule_is_renamed_and_not_freed_by_its_destructor(small_paths, max_version):
    torch = pytest.importorskip("torch")
    batch = first_batch(small_paths[:16])
    capsule = batch.__dlpack__(max_version=max_version)
    t = torch.utils.dlpack.from_dlpack(capsule)
    assert capsule_name(capsule).startswith("used_dltensor")
    expected = batch.images.copy()
    del capsule, batch
    gc.collect()
    assert np.array_equal(t.numpy(), expected)


def test_request_arguments(small_paths):
    batch = first_batch(small_paths[:16])
    lease = batch._lease
    assert capsule_name(lease.__dlpack__(dl_device=(1, 0), copy=False, stream=None)) == "dltensor"
    assert capsule_name(lease.__dlpack__(stream=-1)) == "dltensor"
    with pytest.raises(BufferError, match="dl_device"):
        lease.__dlpack__(dl_device=(2, 0))
    with pytest.raises(ValueError, match="stream"):
        lease.__dlpack__(stream=7)
    if np.lib.NumpyVersion(np.__version__) < "2.1.0":
        return  # numpy.from_dlpack takes copy= from 2.1 on (Python 3.9's newest numpy is 2.0)
    copied = np.from_dlpack(batch, copy=True)
    assert not np.shares_memory(copied, batch.images) and np.array_equal(copied, batch.images)
    assert np.shares_memory(np.from_dlpack(batch, copy=False), batch.images)


def test_torch_copy_true_gives_a_private_bfloat16_copy(small_paths):
    torch = pytest.importorskip("torch")
    batch = first_batch(small_paths[:16], dtype="bfloat16")
    t = torch.from_dlpack(batch, copy=True)
    assert t.dtype == torch.bfloat16 and t.data_ptr() != batch.images.ctypes.data
    assert np.array_equal(t.view(torch.int16).numpy().view(np.uint16), bits(batch.images))


# --- buffer lifetime -------------------------------------------------------------------------------------


def _consumer(kind: str, batch):
    if kind == "torch":
        torch = pytest.importorskip("torch")
        t = torch.from_dlpack(batch)
        return t, t.data_ptr(), lambda: hashlib.sha1(t.view(torch.uint8).numpy().tobytes()).hexdigest()
    x = np.from_dlpack(batch)
    return x, x.ctypes.data, lambda: hashlib.sha1(x.tobytes()).hexdigest()


@pytest.mark.parametrize("kind,dtype", [("numpy", "float32"), ("torch", "float32"), ("torch", "bfloat16")])
def test_dlpack_tensor_alone_keeps_its_buffer(small_paths, kind, dtype):
    max_held = 1
    with make(small_paths[:120], dtype=dtype, max_held_batches=max_held) as loader:
        it = iter(loader)
        batch = next(it)
        held, ptr, checksum = _consumer(kind, batch)
        before = checksum()
        del batch  # only the DLPack tensor references batch 0's buffer now
        gc.collect()
        ptrs = [b.images.ctypes.data for b in it]  # the rest of the epoch, through 2 circulating buffers
        ptrs += [b.images.ctypes.data for b in loader]  # and a whole further epoch
        assert len(ptrs) == 2 * len(loader) - 1
        assert ptr not in ptrs, "a buffer still referenced by a DLPack tensor was handed out again"
        assert checksum() == before, "the held tensor's bytes were rewritten"
        assert loader.stats()["buffers_allocated"] <= PREFETCH + max_held

        # The tensor dies on another thread: the buffer returns to the loader and is reused.
        box = [held]
        del held, checksum  # the checksum closure references the tensor too
        dropper = threading.Thread(target=box.clear)
        dropper.start()
        dropper.join()
        gc.collect()
        ptrs = [b.images.ctypes.data for b in loader]
        assert ptr in ptrs, "the buffer did not return after its last DLPack tensor died"
        assert loader.stats()["buffers_allocated"] <= PREFETCH + max_held


def test_unconsumed_capsules_do_not_leak(small_paths):
    # max_held_batches=1: had one capsule kept its buffer, the loader would run out of buffers
    # (ConfigError "all buffers held") within a few batches.
    max_held = 1
    made = 0
    with make(small_paths[:120], max_held_batches=max_held) as loader:
        for _ in range(2):
            for batch in loader:
                for i in range(40):
                    capsule = batch.__dlpack__(max_version=(1, 0) if i % 2 else None)
                    del capsule
                    made += 1
        assert made >= 1000
        assert loader.stats()["buffers_allocated"] <= PREFETCH + max_held
        del batch
        assert sum(1 for _ in loader) == len(loader), "batches keep flowing"


_SHUTDOWN_SCRIPT = """
import sys, numpy as np, trdata
paths = sys.argv[1:]
loader = trdata.Loader(trdata.FileList(paths, list(range(len(paths)))), batch_size=4, workers=2,
                       transforms=[trdata.RandomResizedCrop(32)], dtype="bfloat16", max_held_batches=8)
it = iter(loader)
b0, b1 = next(it), next(it)
KEEP = [b0.__dlpack__(), b0.__dlpack__(max_version=(1, 0)), b1.__dlpack__(max_version=(1, 0))]
try:
    import torch
    KEEP.append(torch.from_dlpack(b1))
except ImportError:
    pass
del b0, b1
print("ok")
# exit with capsules, tensors, a running iterator and an open loader alive: their destructors run
# during interpreter shutdown
"""


def test_capsules_and_tensors_alive_at_interpreter_exit(small_paths):
    r = subprocess.run(
        [sys.executable, "-c", _SHUTDOWN_SCRIPT, *small_paths[:16]],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "ok"
    assert "Exception ignored" not in r.stderr and "panic" not in r.stderr, r.stderr
