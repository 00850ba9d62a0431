"""Batch ops and batch_transform on CUDA loaders: the ops run on the device (torch, current stream) and give the
CPU loader's values (same λ, box and rows: the draws depend on (seed, epoch, batch, op) only); batch_transform
runs on a side stream that the consumer's stream waits for. Skips cleanly without CUDA/torch."""

from __future__ import annotations

import numpy as np
import pytest
import trdata

torch = pytest.importorskip("torch")

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA not available")

RRC = [trdata.RandomResizedCrop(32), trdata.RandomHorizontalFlip()]
OPS = [
    trdata.BatchRandomChoice([trdata.MixUp(alpha=0.2, num_classes=8), trdata.CutMix(num_classes=8)]),
    trdata.BatchRandomErasing(value=-1.0),
]


def make(paths, **kw):
    kw.setdefault("transforms", RRC)
    kw.setdefault("workers", 2)
    kw.setdefault("normalize", trdata.IMAGENET)
    kw.setdefault("batch_size", 8)
    kw.setdefault("shuffle", True)
    kw.setdefault("reproducible", True)
    return trdata.Loader(trdata.FileList(paths, [i % 8 for i in range(len(paths))]), **kw)


@needs_cuda
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_cuda_batch_ops_equal_the_cpu_loaders(small_paths, layout):
    paths = small_paths[:32]
    with (
        make(paths, batch_ops=OPS, layout=layout) as cpu,
        make(paths, batch_ops=OPS, layout=layout, device="cuda:0") as gpu,
    ):
        for a, b in zip(cpu, gpu):
            assert b.images.is_cuda and b.labels.is_cuda and b.labels.shape == (8, 8)
            # float32 on both; torch's CUDA kernels may fuse the multiply-add: allow one ulp-ish
            np.testing.assert_allclose(b.images.cpu().numpy(), a.images, rtol=1e-6, atol=1e-6)
            np.testing.assert_allclose(b.labels.cpu().numpy(), a.labels, rtol=1e-6, atol=1e-7)


@needs_cuda
def test_cuda_batch_transform_runs_on_a_side_stream_and_is_awaited(small_paths):
    paths = small_paths[:32]
    seen = []

    def fn(batch, gen):
        seen.append(torch.cuda.current_stream(batch.images.device))
        assert isinstance(gen, torch.Generator) and gen.device.type == "cuda"
        # long device work on the side stream: the consumer must still see its result
        x = batch.images
        for _ in range(20):
            x = x * 1.0
        batch.images = x + torch.rand(x.shape, generator=gen, device=x.device)
        return batch

    with make(paths, device="cuda:0", batch_transform=fn) as a, make(paths, device="cuda:0") as plain:
        for b, p in zip(a, plain):
            diff = (b.images - p.images).float()
            assert bool(((diff >= 0) & (diff < 1)).all())  # the side stream's result, complete
    assert seen and all(s != torch.cuda.default_stream(s.device) for s in seen)


@needs_cuda
def test_detection_mixup_after_a_mosaic_on_a_cuda_loader_equals_the_cpu_loader(tmp_path):
    """DetectionMixUp on a CUDA detection loader (the batch on the device, targets as device tensors) after a
    Mosaic gives the CPU loader's pixels and concatenated targets: same draws, same rows."""
    from _fixtures import MOSAIC_S as S
    from _fixtures import write_mosaic_boxes

    images, ann = write_mosaic_boxes(tmp_path)
    src = trdata.CocoDetection(images, ann)
    kw = dict(
        batch_size=4, transforms=[trdata.Mosaic(S), trdata.RandomHorizontalFlip(), trdata.Resize((S, S))],
        batch_ops=[trdata.DetectionMixUp()], dtype="float32", normalize=None, seed=3, reproducible=True,
    )  # fmt: skip
    rows = boxes = 0
    with trdata.Loader(src, **kw) as cpu, trdata.Loader(src, device="cuda:0", **kw) as gpu:
        for a, b in zip(cpu, gpu, strict=True):
            assert b.images.is_cuda
            np.testing.assert_allclose(b.images.cpu().numpy(), np.asarray(a.images), rtol=1e-6, atol=1e-4)
            assert len(a.targets) == len(b.targets) == len(b.indices)
            for ta, tb in zip(a.targets, b.targets):
                assert tb["boxes"].is_cuda and tb["labels"].is_cuda
                for key in ("boxes", "labels", "iscrowd"):
                    np.testing.assert_array_equal(tb[key].cpu().numpy(), np.asarray(ta[key]))
                boxes += len(tb["boxes"])
            rows += len(b.indices)
    assert rows == 9 and boxes > 9  # every row once; mixed rows hold their own and their neighbour's boxes
