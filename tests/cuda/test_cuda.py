"""GPU path behaviour (device='cuda:N'): byte-identical to the CPU path, lifetimes across streams, multi-GPU
shares, clean failure without CUDA, no leaks across create/close cycles. Skips cleanly without CUDA/torch."""

from __future__ import annotations

import gc
import os
import random
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import trdata
from trdata.errors import ConfigError

torch = pytest.importorskip("torch")

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA not available")
needs_two = pytest.mark.skipif(
    not torch.cuda.is_available() or torch.cuda.device_count() < 2, reason="needs 2 GPUs"
)

RRC = [trdata.RandomResizedCrop(64), trdata.RandomHorizontalFlip()]


def make(paths, **kw):
    kw.setdefault("transforms", RRC)
    kw.setdefault("workers", 2)
    return trdata.Loader(trdata.FileList(paths, list(range(len(paths)))), **kw)


def test_cuda_unavailable_is_a_clear_error_and_cpu_still_works(small_paths):
    code = textwrap.dedent(f"""
        import trdata
        from trdata.errors import CudaError
        paths = {small_paths[:8]!r}
        src = trdata.FileList(paths, list(range(8)))
        try:
            trdata.Loader(src, batch_size=4, device="cuda:0", transforms=[trdata.Resize((32, 32))])
        except CudaError as e:
            assert e.call, e
            print("CUDAERROR", e)
        else:
            raise SystemExit("no CudaError")
        with trdata.Loader(src, batch_size=4, workers=1, transforms=[trdata.Resize((32, 32))]) as ld:
            assert sum(len(b) for b in ld) == 8
        print("CPUOK")
    """)
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="")
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "CUDAERROR" in r.stdout and "CPUOK" in r.stdout


@pytest.mark.parametrize("device", ["tpu", "cuda:x", ["cuda:0", "cpu"], ["cuda:0", "cuda:0"], []])
def test_bad_device_is_a_config_error(small_paths, device):
    with pytest.raises(ConfigError):
        make(small_paths[:8], device=device)


@needs_cuda
@pytest.mark.parametrize("dtype,layout", [("uint8", "NHWC"), ("float32", "NCHW"), ("bfloat16", "NCHW")])
def test_cuda_batches_are_byte_identical_to_cpu(small_paths, dtype, layout):
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
    with make(small_paths, **kw) as cpu, make(small_paths, device="cuda:0", **kw) as gpu:
        for epoch in range(2):
            cpu_batches = [
                (torch.from_dlpack(b).clone(), b.labels.copy(), b.indices.copy(), b.valid) for b in cpu
            ]
            gpu_batches = list(gpu)
            assert len(cpu_batches) == len(gpu_batches) == len(gpu)
            for (ci, cl, cx, cv), g in zip(cpu_batches, gpu_batches):
                assert g.images.is_cuda and g.images.device.index == 0
                assert g.labels.is_cuda and g.labels.dtype == torch.int64
                assert g.images.dtype == ci.dtype and g.images.shape == ci.shape
                assert torch.equal(g.images.cpu().view(torch.uint8), ci.view(torch.uint8)), f"epoch {epoch}"
                assert g.labels.cpu().numpy().tolist() == cl.tolist()
                assert g.indices.tolist() == cx.tolist() and g.valid == cv
    stats = gpu.stats()
    assert stats["h2d_batches"] == 2 * len(gpu) and stats["h2d_bytes"] > 0 and stats["h2d_ns"] > 0


def _sum(t):
    return t.view(torch.uint8).to(torch.int64).sum().item()


@needs_cuda
def test_fifty_held_batches_stay_intact_and_free_in_random_order(small_paths):
    kw = dict(batch_size=2, shuffle=True, seed=3, dtype="uint8", max_held_batches=64, device_slots=3)
    with make(small_paths, device="cuda:0", **kw) as ld:
        held, sums = [], []
        for b in ld:
            held.append(b)
            sums.append((_sum(b.images), b.labels.sum().item()))
            if len(held) == 50:
                break
        # A second epoch streams through the free slots while 50 batches stay held.
        n = 0
        for _b in ld:
            n += 1
        assert n == len(ld)
        torch.cuda.synchronize()
        assert [(_sum(b.images), b.labels.sum().item()) for b in held] == sums
        # Free in random order while another epoch runs (slots come back out of order).
        rng = random.Random(0)
        order = list(range(50))
        rng.shuffle(order)
        it = iter(ld)
        for i in order:
            held[i] = None
            next(it, None)
        gc.collect()
        for _ in it:
            pass
        assert ld.stats()["device_slots_allocated"] <= 3 + 64


@needs_cuda
def test_consumer_on_a_side_stream_sees_complete_data(small_paths):
    kw = dict(batch_size=8, seed=11, reproducible=True, dtype="float32", normalize=([0.5] * 3, [0.5] * 3))
    with make(small_paths, **kw) as cpu:
        expected = [np.asarray(b.images).copy() for b in cpu]
    side = torch.cuda.Stream()
    sums, copies = [], []
    with make(small_paths, device="cuda:0", **kw) as gpu:
        with torch.cuda.stream(side):
            for b in gpu:
                # Kernels on the side stream read the tensor right after from_dlpack; the batch is dropped
                # at once, so its slot is recycled behind the side stream's release event.
                sums.append(b.images.double().sum())
                copies.append(b.images.to("cpu", non_blocking=True))
                b = None
        side.synchronize()
    assert len(copies) == len(expected)
    for s, c, e in zip(sums, copies, expected):
        assert np.array_equal(c.numpy(), e)
        assert abs(s.item() - float(e.astype(np.float64).sum())) <= 1e-6 * max(1.0, abs(s.item()))


@needs_cuda
def test_create_close_cycles_do_not_leak(small_paths):
    kw = dict(batch_size=8, dtype="float32", max_held_batches=8)

    def cycle():
        ld = make(small_paths, device="cuda:0", **kw)
        held = []
        for i, b in enumerate(ld):
            held.append(b)
            if i == 3:
                break  # close mid-epoch with batches still on the GPU
        ld.close()
        del held, ld

    cycle()  # warm-up: primary context, torch allocator, CUDA module loading
    gc.collect()
    torch.cuda.synchronize()
    free0, _ = torch.cuda.mem_get_info()
    rss0 = _rss_bytes()
    for _ in range(50):
        cycle()
    gc.collect()
    torch.cuda.synchronize()
    free1, _ = torch.cuda.mem_get_info()
    rss1 = _rss_bytes()
    slot = 8 * 3 * 64 * 64 * 4
    assert free0 - free1 < 4 * slot + (8 << 20), f"device memory leaked: {free0 - free1} bytes"
    assert rss1 - rss0 < (64 << 20), f"host memory grew by {rss1 - rss0} bytes"


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@needs_cuda
def test_stats_report_h2d_and_starvation(small_paths):
    with make(small_paths, device="cuda:0", batch_size=16) as ld:
        for _ in ld:
            pass
        s = ld.stats()
    for k in ("h2d_ns", "h2d_copy_ns", "h2d_bytes", "consumer_wait_ns", "h2d_wait_host_ns"):
        assert k in s
    assert s["h2d_bytes"] >= len(small_paths) * 3 * 64 * 64 * 4
    # The copy alone (device timing events, after the slot-release waits) lies inside issue → completion.
    assert 0 < s["h2d_copy_ns"] <= s["h2d_ns"]


@needs_two
def test_two_gpus_each_get_their_share_exactly_once(small_paths):
    kw = dict(batch_size=8, shuffle=True, seed=5, reproducible=True, workers=4, last_batch="pad")
    with make(small_paths, device=["cuda:0", "cuda:1"], **kw) as ld:
        seen = []
        for step in ld:
            assert isinstance(step, list) and len(step) == 2
            for d, b in enumerate(step):
                assert b.images.device.index == d and b.labels.device.index == d
                seen.extend(b.indices[: b.valid].tolist())
    assert sorted(seen) == list(range(len(small_paths)))


def _device_steps(ld, count: int) -> list:
    """(device, epoch, valid, indices, image digest) of every batch of the next `count` global steps (across epoch
    ends: a resumed loader finishes its epoch first)."""
    import hashlib

    out: list = []
    while len(out) < count:
        for step in ld:
            out.append(
                [
                    (b.images.device.index, b.epoch, b.valid, b.indices.tolist(),
                     hashlib.sha1(b.images.cpu().numpy().tobytes()).hexdigest())
                    for b in step
                ]
            )  # fmt: skip
            if len(out) == count:
                break
    return out


@needs_two
@pytest.mark.parametrize("reproducible", [True, False])
def test_the_multi_gpu_mode_resumes_mid_epoch(small_paths, reproducible):
    """One process, every visible GPU (this mode's resume on real GPUs): a loader stopped after
    k global steps and a fresh one loaded with its state_dict continue the uninterrupted run — byte-identical
    steps in reproducible mode, every sample exactly once per epoch (per device row counts kept) in fast mode."""
    devices = [f"cuda:{i}" for i in range(torch.cuda.device_count())]
    kw = dict(batch_size=4, shuffle=True, seed=9, reproducible=reproducible, last_batch="pad", device=devices)
    kw["workers"] = 2 * len(devices)
    with make(small_paths, **kw) as ld:
        n = len(ld)
        reference = _device_steps(ld, 2 * n)  # epochs 0 and 1
    for k in sorted({1, n // 2, n - 1}):
        with make(small_paths, **kw) as ld:
            first = _device_steps(ld, k)
            state = ld.state_dict()
        with make(small_paths, **kw) as ld:
            ld.load_state_dict(state)
            rest = _device_steps(ld, 2 * n - k)
        got = first + rest
        assert [[(d, e) for d, e, *_ in s] for s in got] == [[(d, e) for d, e, *_ in s] for s in reference]
        if reproducible:
            assert got == reference, f"k={k}: the resumed steps are byte-identical"
        else:
            for epoch in (0, 1):
                mine = sorted(i for s in got for d, e, v, idx, _ in s if e == epoch for i in idx[:v])
                want = sorted(i for s in reference for d, e, v, idx, _ in s if e == epoch for i in idx[:v])
                assert mine == want == list(range(len(small_paths))), f"k={k}, epoch {epoch}: exactly once"


@needs_cuda
def test_in_memory_sources_reach_the_gpu_byte_identical_to_cpu():
    """Arrays (raw pixels, gray and RGB) and Bytes (encoded in memory) through device='cuda:0' equal the CPU loader."""
    import io

    from PIL import Image

    rng = np.random.default_rng(5)
    rgb = rng.integers(0, 256, (24, 40, 48, 3), dtype=np.uint8)
    gray = rng.integers(0, 256, (24, 28, 28), dtype=np.uint8)
    blobs = []
    for a in rgb[:12]:
        buf = io.BytesIO()
        Image.fromarray(a).save(buf, format="PNG")
        blobs.append(buf.getvalue())
    kw = dict(
        batch_size=5, transforms=RRC, dtype="bfloat16", shuffle=True, seed=3, reproducible=True, workers=2
    )
    for src in (
        trdata.Arrays(rgb, list(range(24))),
        trdata.Arrays(gray),
        trdata.Bytes(blobs, list(range(12))),
    ):
        with trdata.Loader(src, **kw) as cpu:
            want = [(torch.from_dlpack(b).float(), b.labels.copy()) for b in cpu]
        with trdata.Loader(src, device="cuda:0", **kw) as gpu:
            got = [(b.images.float().cpu(), b.labels.cpu().numpy()) for b in gpu]
        assert len(got) == len(want)
        for (gi, gl), (wi, wl) in zip(got, want):
            assert torch.equal(gi, wi) and np.array_equal(gl, wl)


@needs_cuda
def test_one_channel_batches_reach_the_gpu_with_their_shape(small_paths):
    """channels=1 (a gray source's default, or RGB files converted to luma): device batches are (N, 1, H, W) /
    (N, H, W, 1) and byte-identical to the CPU loader's."""
    gray = np.random.default_rng(6).integers(0, 256, (20, 28, 28), dtype=np.uint8)
    cases = [
        (trdata.Arrays(gray), dict(normalize=trdata.MNIST_NORM), (5, 1, 64, 64)),
        (trdata.Arrays(gray), dict(layout="NHWC", dtype="uint8"), (5, 64, 64, 1)),
        (trdata.FileList(small_paths[:20], list(range(20))), dict(channels=1), (5, 1, 64, 64)),
    ]
    for src, extra, shape in cases:
        kw = dict(
            batch_size=5, transforms=RRC, dtype="bfloat16", shuffle=True, seed=4, reproducible=True, workers=2
        )
        kw.update(extra)
        with trdata.Loader(src, **kw) as cpu:
            want = [torch.from_dlpack(b).float() for b in cpu]
        with trdata.Loader(src, device="cuda:0", **kw) as gpu:
            got = [b.images for b in gpu]
        assert len(got) == len(want) == 4
        for g, w in zip(got, want):
            assert g.is_cuda and tuple(g.shape) == shape and tuple(w.shape) == shape
            assert torch.equal(g.float().cpu(), w)
