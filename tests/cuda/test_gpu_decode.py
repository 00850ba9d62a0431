"""The GPU decode path of the loader (``decode="gpu" | <share> | "auto"``, src/gpu_decode/) on a real
GPU with real JPEGs: it agrees with the CPU path (the same rows, labels and indices; pixels within IDCT rounding),
it is reproducible (same bytes for two runs and for any worker count), every file nvJPEG cannot take goes to the
CPU path (never to an error), a failure follows the error policy as on the CPU path, epochs restart and close
cleanly, and its memory stays within its arenas. Skips without CUDA, torch or libnvjpeg/libnvrtc."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import trdata
from _fixtures import photo
from PIL import Image
from trdata._cuda_libs import nvjpeg as _nvjpeg

torch = pytest.importorskip("torch")

_probe = _nvjpeg.probe()
pytestmark = pytest.mark.skipif(
    not (torch.cuda.is_available() and _probe["found"] and _probe.get("hardware")),
    reason=f"needs CUDA and libnvjpeg with hardware engines (nvjpeg={_probe['found']}, hw={_probe.get('hardware')})",
)

#: GPU rows vs CPU rows where the CPU path decodes at full scale (the crop is not larger than the output, so no DCT
#: scaling): they differ only by the decoders' IDCT/upsampling rounding, amplified by nothing (same taps, exact
#: kernel). The issue's target is 45 dB.
MIN_ROW_PSNR_DB = 45.0


def psnr(a: np.ndarray, b: np.ndarray) -> float:
    mse = float(np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2))
    return 99.0 if mse == 0 else 10 * np.log10(255.0**2 / mse)


def write_folder(root: Path, n: int, size=lambda i: (200 + 7 * (i % 6), 170 + 5 * (i % 4)), subsampling=None):
    """An ImageFolder of ``n`` photo-like JPEGs in 3 classes (4:2:0, 4:2:2, 4:4:4 and gray mixed unless given)."""
    for i in range(n):
        d = root / f"c{i % 3}"
        d.mkdir(parents=True, exist_ok=True)
        w, h = size(i)
        img = Image.fromarray(photo(i, w, h))
        if i % 7 == 6:
            img = img.convert("L")
        ss = subsampling if subsampling is not None else (2, 1, 0)[i % 3]
        img.save(d / f"{i:03d}.jpg", "JPEG", quality=90, subsampling=ss)
    return root


def epoch(root, *, decode, seed=3, workers=3, batch=16, transforms=None, **kw):
    """One epoch as (images uint8 NHWC on the host, labels, indices), plus the loader's stats."""
    kw.setdefault("reproducible", True)
    ld = trdata.Loader(
        trdata.ImageFolder(str(root)),
        batch_size=batch,
        transforms=transforms or [trdata.RandomResizedCrop(224), trdata.RandomHorizontalFlip()],
        dtype="uint8",
        layout="NHWC",
        device="cuda:0",
        workers=workers,
        seed=seed,
        shuffle=True,
        decode=decode,
        **kw,
    )
    imgs, labels, idx = [], [], []
    for b in ld:
        imgs.append(torch.from_dlpack(b.images).cpu().numpy())
        labels.append(b.labels.cpu().numpy())
        idx.append(np.asarray(b.indices))
    stats = ld.stats()
    ld.close()
    return np.concatenate(imgs), np.concatenate(labels), np.concatenate(idx), stats


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return write_folder(tmp_path_factory.mktemp("gpu-decode"), 96)


def eligible(root) -> int:
    """Files of ``root`` the GPU path takes (Pillow writes some gray files with 2×2 luma sampling, which it leaves
    to the CPU: ``decode::gpu_eligible``'s rule 5)."""
    return sum(
        isinstance(trdata._core.gpu_eligible(p.read_bytes()), tuple) for p in Path(root).rglob("*.jpg")
    )


def test_gpu_rows_agree_with_cpu_rows_and_every_sample_is_delivered_once(folder):
    g_img, g_lab, g_idx, g_stats = epoch(folder, decode="gpu")
    c_img, c_lab, c_idx, c_stats = epoch(folder, decode="cpu")
    assert np.array_equal(g_idx, c_idx) and np.array_equal(g_lab, c_lab)
    assert sorted(g_idx.tolist()) == list(range(96))
    assert g_stats["decode_gpu"] == eligible(folder) >= 80 and g_stats["decode_gpu_fallback"] == 0, g_stats
    assert g_stats["decode_gpu_ineligible"] == 96 - g_stats["decode_gpu"]
    assert g_stats["samples"] == c_stats["samples"] == 96
    values = [psnr(a, b) for a, b in zip(g_img, c_img)]
    print(f"GPU vs CPU rows: min {min(values):.2f} dB, median {np.median(values):.2f} dB")
    assert min(values) >= MIN_ROW_PSNR_DB
    # A wrong row, flip or crop would be far below that, so this also checks the geometry.


@pytest.mark.parametrize(
    "transforms",
    [
        [trdata.Resize(256), trdata.CenterCrop(224)],
        [trdata.RandomResizedCrop(160, interpolation="bicubic"), trdata.RandomHorizontalFlip()],
        [trdata.Resize((96, 128)), trdata.RandomVerticalFlip()],
    ],
    ids=["resize-centercrop", "rrc-bicubic", "resize-vflip"],
)
def test_other_geometries_agree_with_the_cpu_path(folder, transforms):
    g = epoch(folder, decode="gpu", transforms=transforms, batch=32)
    c = epoch(folder, decode="cpu", transforms=transforms, batch=32)
    assert np.array_equal(g[2], c[2])
    assert g[3]["decode_gpu"] == eligible(folder)
    values = [psnr(a, b) for a, b in zip(g[0], c[0])]
    print(f"{transforms}: min {min(values):.2f} dB")
    # Resize(256) upsamples these ~200 px images, so the CPU path decodes at full scale too.
    assert min(values) >= MIN_ROW_PSNR_DB


def test_pad_to_detection_batches_agree_with_the_cpu_path(tmp_path):
    """torchvision's detection ``hflip`` recipe on ``pad_to`` slots: the GPU writes each image at its own size at
    its slot's top left and exact zeros elsewhere; rows, sizes and targets are the CPU path's, pixels within IDCT
    rounding."""
    root = write_folder(tmp_path / "images", 40, size=lambda i: (150 + 13 * (i % 7), 120 + 11 * (i % 5)))
    files = sorted(root.rglob("*.jpg"))
    images, anns = [], []
    for k, p in enumerate(files):
        w, h = Image.open(p).size
        images.append({"id": k + 1, "file_name": str(p.relative_to(root)), "width": w, "height": h})
        box = [5.0, 7.5, round(w / 3, 2), round(h / 4, 2)]
        anns.append(
            {"id": k + 1, "image_id": k + 1, "category_id": 1 + k % 3, "iscrowd": 0, "bbox": box, "area": 1.0}
        )
    ann = tmp_path / "instances.json"
    ann.write_text(
        json.dumps({"images": images, "annotations": anns, "categories": [{"id": c} for c in (1, 2, 3)]})
    )

    def run(decode):
        ld = trdata.Loader(
            trdata.CocoDetection(str(root), str(ann)),
            batch_size=8,
            transforms=[trdata.RandomHorizontalFlip()],
            pad_to=(192, 256),
            dtype="uint8",
            layout="NHWC",
            device="cuda:0",
            workers=3,
            seed=5,
            shuffle=True,
            reproducible=True,
            decode=decode,
        )
        rows = []
        for b in ld:
            sizes = (
                b.image_sizes.cpu().numpy() if hasattr(b.image_sizes, "cpu") else np.asarray(b.image_sizes)
            )
            targets = [{k: v.cpu() for k, v in t.items() if k in ("boxes", "labels")} for t in b.targets]
            rows.append((torch.from_dlpack(b.images).cpu().numpy(), sizes, targets, np.asarray(b.indices)))
        stats = ld.stats()
        ld.close()
        return rows, stats

    g, g_stats = run("gpu")
    c, c_stats = run("cpu")
    assert g_stats["decode_gpu"] == eligible(root) >= 30 and g_stats["decode_gpu_fallback"] == 0, g_stats
    values = []
    for (gi, gs, gt, gx), (ci, cs, ct, cx) in zip(g, c, strict=True):
        assert np.array_equal(gx, cx) and np.array_equal(gs, cs)
        for a, b in zip(gt, ct, strict=True):
            assert all(torch.equal(a[k], b[k]) for k in ("boxes", "labels"))
        for img_g, img_c, (h, w) in zip(gi, ci, gs):
            assert not img_g[h:].any() and not img_g[:, w:].any(), "outside the image: zeros"
            assert not img_c[h:].any() and not img_c[:, w:].any()
            values.append(psnr(img_g[:h, :w], img_c[:h, :w]))
    print(f"pad_to GPU vs CPU rows: min {min(values):.2f} dB over {len(values)}")
    assert len(values) == 40 and min(values) >= MIN_ROW_PSNR_DB


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_normalized_outputs_agree_in_every_dtype_and_layout(folder, dtype, layout):
    out = {}
    for decode in ("gpu", "cpu"):
        ld = trdata.Loader(
            trdata.ImageFolder(str(folder)),
            batch_size=32,
            transforms=[trdata.RandomResizedCrop(128), trdata.RandomHorizontalFlip()],
            normalize=trdata.IMAGENET,
            dtype=dtype,
            layout=layout,
            device="cuda:0",
            workers=2,
            reproducible=True,
            decode=decode,
        )
        out[decode] = torch.cat([b.images.float().cpu() for b in ld]).numpy()
        ld.close()
    # 1 level of an 8-bit value is 1/255/std ≈ 0.0175 after ImageNet normalization.
    diff = np.abs(out["gpu"] - out["cpu"])
    assert out["gpu"].shape == out["cpu"].shape
    assert np.mean(diff < 0.02) > 0.99 and diff.max() < 0.5, (np.mean(diff < 0.02), diff.max())


def test_reproducible_bytes_for_two_runs_and_any_worker_count(folder):
    a = epoch(folder, decode=0.5, workers=2)
    b = epoch(folder, decode=0.5, workers=7)
    c = epoch(folder, decode=0.5, workers=2)
    assert np.array_equal(a[0], b[0]) and np.array_equal(a[0], c[0])
    assert np.array_equal(a[2], b[2])
    # The share routes about half of the samples (each by its own draw), and the same ones every time.
    assert 30 <= a[3]["decode_gpu"] <= 66 and a[3]["decode_gpu"] == b[3]["decode_gpu"], a[3]
    # b and c ran on exactly the decoders a left behind (closed loaders keep them; the next takes the last returned),
    # each carrying the bytes measured when it was made, so all three report the same bytes.
    for s in (b[3], c[3]):
        assert (
            s["decode_gpu_decoders_reused"] == s["decode_gpu_decoders"] == a[3]["decode_gpu_decoders"] > 0
        ), s
        assert s["decode_gpu_nvjpeg_bytes"] == a[3]["decode_gpu_nvjpeg_bytes"], (a[3], s)
    cpu = epoch(folder, decode="cpu", workers=2)
    same = [np.array_equal(x, y) for x, y in zip(a[0], cpu[0])]
    # Rows routed to the CPU are the CPU path's bytes; GPU rows of 4:4:4/gray files may be too (identical decode).
    assert sum(same) >= 96 - a[3]["decode_gpu"]


def test_files_the_gpu_cannot_take_go_to_the_cpu_path(tmp_path, edge_dir):
    root = write_folder(tmp_path / "mix", 24)
    # Progressive, CMYK, PNG, 12-bit, arithmetic, tiny and broken files from the edge-case set, as extra samples.
    for i, f in enumerate(sorted(Path(edge_dir).iterdir())):
        if f.is_file():
            shutil.copy(f, root / f"c{i % 3}" / f"edge_{f.name}")
    kw = dict(on_error="skip", batch=8, transforms=[trdata.RandomResizedCrop(64)])
    g_img, g_lab, g_idx, g_stats = epoch(root, decode="gpu", **kw)
    c_img, c_lab, c_idx, c_stats = epoch(root, decode="cpu", **kw)
    assert np.array_equal(g_idx, c_idx) and np.array_equal(g_lab, c_lab)
    assert g_stats["errors_skipped"] == c_stats["errors_skipped"]
    assert g_stats["decode_gpu_ineligible"] > 0 and g_stats["decode_gpu"] >= 24, g_stats
    n = len(g_idx)
    assert (
        g_stats["decode_gpu"] + g_stats["decode_gpu_fallback"] + g_stats["decode_gpu_ineligible"] <= n + 2 * 8
    )
    # Every row the GPU did not make is the CPU path's, byte for byte.
    gpu_rows = [psnr(a, b) for a, b in zip(g_img, c_img)]
    assert sum(v == 99.0 for v in gpu_rows) >= n - g_stats["decode_gpu"]
    assert min(gpu_rows) >= MIN_ROW_PSNR_DB - 10  # DCT-scaled CPU rows of the large edge files differ more


def test_a_file_broken_after_its_header_follows_the_error_policy(tmp_path):
    root = write_folder(tmp_path / "broken", 16, subsampling=2)
    victim = root / "c1" / "004.jpg"
    data = victim.read_bytes()
    sos = data.rindex(b"\xff\xda")
    victim.write_bytes(data[: sos + 40])  # a valid header, then the scan stops: truncated entropy data
    outcomes = {}
    for decode in ("gpu", "cpu"):
        try:
            r = epoch(root, decode=decode, batch=4)
            outcomes[decode] = ("ok", r[2].tolist(), r[3]["decode_warnings"])
        except trdata.DecodeError as e:
            outcomes[decode] = ("error", str(e))
    print(outcomes)
    assert outcomes["gpu"][0] == outcomes["cpu"][0]
    if outcomes["cpu"][0] == "ok":
        assert outcomes["gpu"][1] == outcomes["cpu"][1]
    skip_g = epoch(root, decode="gpu", batch=4, on_error="skip")
    skip_c = epoch(root, decode="cpu", batch=4, on_error="skip")
    assert np.array_equal(skip_g[2], skip_c[2])


def test_auto_moves_the_share_and_delivers_every_sample(folder):
    ld = trdata.Loader(
        trdata.ImageFolder(str(folder)),
        batch_size=8,
        transforms=[trdata.RandomResizedCrop(96)],
        dtype="uint8",
        device="cuda:0",
        workers=2,
        shuffle=True,
        reproducible=False,
        decode="auto",
    )
    shares = set()
    for _ in range(3):
        seen = []
        for b in ld:
            seen += np.asarray(b.indices)[: b.valid].tolist()
            shares.add(ld.stats()["decode_gpu_share_ppm"])
        assert sorted(seen) == list(range(96))
    st = ld.stats()
    ld.close()
    print(st)
    assert len(shares) > 1  # the controller moved it
    assert st["decode_gpu"] > 0 and st["decode_gpu"] + st["decode_gpu_fallback"] <= 3 * 96


def gpu_loader(folder, size, **kw):
    """A decode='gpu' CUDA loader over ``folder`` with RandomResizedCrop(size)."""
    return trdata.Loader(
        trdata.ImageFolder(str(folder)),
        transforms=[trdata.RandomResizedCrop(size)],
        device="cuda:0",
        decode="gpu",
        **kw,
    )


def test_epoch_restart_and_close_mid_epoch(folder):
    ld = gpu_loader(folder, 64, batch_size=8, workers=3, reproducible=True)
    for _ in range(3):
        for i, _b in enumerate(ld):
            if i == 2:
                break  # abandon the epoch with tasks queued
    full = [np.asarray(b.indices).tolist() for b in ld]
    assert sorted(sum(full, [])) == list(range(96))
    it = iter(ld)
    next(it)
    ld.close()  # with the GPU decode thread busy
    with pytest.raises(trdata.LoaderClosedError):
        next(it)


def test_memory_stays_within_the_arenas(folder):
    ld = gpu_loader(folder, 224, batch_size=16, prefetch=2)
    for _ in ld:
        pass
    st = ld.stats()
    ld.close()
    arena = trdata._core.gpu_decode_arena_bytes(16)
    print(
        f"arenas allocated: {st['decode_gpu_arena_bytes']} bytes (arena {arena}, at most {3 * arena}); nvJPEG's "
        f"decoders took {st['decode_gpu_nvjpeg_bytes']} bytes"
    )
    assert 0 < st["decode_gpu_arena_bytes"] <= 3 * arena
    # nvJPEG's decoders pre-allocate at creation (64 windows up to 1024²), measured as the drop in free memory.
    assert 0 <= st["decode_gpu_nvjpeg_bytes"] < 4 << 30


def test_gray_output_and_pixel_ops_are_refused_for_gpu_but_auto_runs_on_the_cpu(folder):
    bad = [
        dict(channels=1),
        dict(transforms=[trdata.RandomResizedCrop(64), trdata.ColorJitter(0.4, 0.4, 0.4)]),
    ]
    for kw in bad:
        kw = {"transforms": [trdata.RandomResizedCrop(64)], **kw}
        with pytest.raises(trdata.ConfigError) as e:
            trdata.Loader(trdata.ImageFolder(str(folder)), batch_size=8, device="cuda:0", decode="gpu", **kw)
        assert e.value.parameter == "decode"
        ld = trdata.Loader(
            trdata.ImageFolder(str(folder)), batch_size=8, device="cuda:0", decode="auto", **kw
        )
        assert sum(len(b) for b in ld) == 96
        assert ld.stats()["decode_gpu"] == 0
        ld.close()
