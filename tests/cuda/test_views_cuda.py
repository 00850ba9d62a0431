"""Multi-view loading on the GPU path (``Loader(views=[...], device='cuda:N')``): every view's block of the device
slot arrives as its own CUDA tensor, byte-identical to the CPU loader's view, all from one H2D copy per batch, and
a held view keeps the slot alive. Skips cleanly without CUDA/torch."""

from __future__ import annotations

import gc

import numpy as np
import pytest
import trdata

torch = pytest.importorskip("torch")

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA not available")

GLOBAL = [trdata.RandomResizedCrop(64, scale=(0.4, 1.0)), trdata.RandomHorizontalFlip()]
LOCAL = [
    trdata.RandomResizedCrop(24, scale=(0.05, 0.4)),
    trdata.RandomHorizontalFlip(),
    trdata.RandomGrayscale(0.5),
]
VIEWS = [GLOBAL, GLOBAL, LOCAL, LOCAL, LOCAL]
SHAPES = [(3, 64, 64)] * 2 + [(3, 24, 24)] * 3


def make(paths, **kw):
    kw.setdefault("views", VIEWS)
    kw.setdefault("workers", 2)
    return trdata.Loader(trdata.FileList(paths, list(range(len(paths)))), **kw)


@needs_cuda
@pytest.mark.parametrize("dtype,layout", [("uint8", "NHWC"), ("float32", "NCHW"), ("bfloat16", "NCHW")])
def test_cuda_views_are_byte_identical_to_cpu(small_paths, dtype, layout):
    kw = dict(
        batch_size=16,
        shuffle=True,
        seed=7,
        reproducible=True,
        dtype=dtype,
        layout=layout,
        last_batch="partial",
        normalize=None if dtype == "uint8" else ([0.5] * 3, [0.25] * 3),
    )
    shapes = SHAPES if layout == "NCHW" else [(h, w, c) for c, h, w in SHAPES]
    with make(small_paths, **kw) as cpu, make(small_paths, device="cuda:0", **kw) as gpu:
        assert gpu.view_shapes == shapes
        for epoch in range(2):
            cpu_batches = [
                # Batch.torch(): each view through its lease, so bfloat16 arrives as torch.bfloat16 (a numpy
                # ml_dtypes.bfloat16 array has no DLPack dtype)
                (tuple(v.clone() for v in b.torch()[0]), b.labels.copy(), b.indices.copy())
                for b in cpu
            ]
            gpu_batches = list(gpu)
            assert len(cpu_batches) == len(gpu_batches) == len(gpu)
            for (cv, cl, cx), g in zip(cpu_batches, gpu_batches):
                assert isinstance(g.images, tuple) and len(g.images) == len(VIEWS)
                for k, (c, t) in enumerate(zip(cv, g.images)):
                    assert t.is_cuda and t.device.index == 0 and t.dtype == c.dtype
                    assert tuple(t.shape) == (len(cl),) + shapes[k]
                    assert torch.equal(t.cpu().view(torch.uint8), c.view(torch.uint8)), (
                        f"epoch {epoch} view {k}"
                    )
                assert g.labels.is_cuda and g.labels.cpu().numpy().tolist() == cl.tolist()
                assert g.indices.tolist() == cx.tolist()
    stats = gpu.stats()
    # One H2D copy per batch carries every view.
    assert stats["h2d_batches"] == 2 * len(gpu)


@needs_cuda
def test_a_held_view_keeps_its_slot(small_paths):
    """Only a local view of the first batch is kept; two more epochs stream through the other slots and its
    pixels stay as they were."""
    kw = dict(batch_size=4, seed=3, dtype="uint8", device_slots=2, max_held_batches=2)
    with make(small_paths[:32], device="cuda:0", **kw) as ld:
        it = iter(ld)
        b = next(it)
        kept = b.images[4]
        want = kept.clone()
        del b
        gc.collect()
        for _ in it:
            pass
        for _ in ld:
            pass
        torch.cuda.synchronize()
        assert torch.equal(kept, want)
        # A multi-view batch is exported view by view.
        b = next(iter(ld))
        with pytest.raises(BufferError, match="multi-view"):
            torch.from_dlpack(b)
        images, labels = b.torch()
        assert [tuple(t.shape[1:]) for t in images] == SHAPES
        assert np.array_equal(labels.cpu().numpy(), b.labels.cpu().numpy())
