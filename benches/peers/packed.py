#!/usr/bin/env python3
"""Packed datasets on the CPU box: what `trdata pack` costs and what it buys, in one run on the same CPUs.

1. pack: `trdata.pack` of the ImageFolder as stored bytes and re-encoded (short side --short-side, quality
   --quality), img/s and the sizes, with --workers threads on the benchmark CPUs.
2. loaders, each in a fresh process bound to the same CPUs, the standard train pipeline (RandomResizedCrop 224 +
   flip + ImageNet normalize → float16 NCHW, batch 64, 1 warm-up + --epochs timed epochs):
     folder           trdata over the ImageFolder (the reference)
     packed-stored    trdata over Packed(full) of the stored bytes (the format's own overhead)
     packed-full      trdata over Packed(full) of the re-encoded file
     packed-partial   trdata over Packed(partial) of the re-encoded file, the file dropped from the page cache
                      (posix_fadvise DONTNEED) before every epoch: read from disk each epoch
     torch-v2         torch DataLoader + torchvision v2 over the ImageFolder (peer)
     torch-v2-reenc   the same over the re-encoded images written out as files (what a user gets by
                      re-encoding without trdata)
     ffcv             FFCV's Loader on its own .beton of the same images (row says why when it cannot run)
3. order: how random partial mode's order is. A packed file of --order-samples tiny records in class-sorted
   order (ImageNet's shape: 1000 classes, --records-per-block records per block) is iterated by real loaders;
   per batch of 256 we count the distinct classes and the class entropy (bits), for: file order, full shuffle,
   partial with windows of 1/4/16 blocks, and FFCV's QuasiRandom order (its algorithm: a buffer of 2×batch
   pages, a random page per sample), on the same blocks.

    .venv/bin/python benches/peers/packed.py [--data DIR] [--cpus 0,1] [--rounds 2] [--json bench-results/packed.json]

Targets: packed-full ≥ 2.5× folder; packed-partial ≥ 0.9× packed-full. Reported, never asserted.
"""

from __future__ import annotations

import math
import os
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import trdata
from trdata import _bench
from trdata._bench import Measurement

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benches/: the shared `common` package
from common import (  # noqa: E402
    RESULTS,
    peers,
    run_cpu_suite,
    run_in_child,
    suite_child,
    suite_doc,
    suite_parser,
    write_json,
)

LOADERS = ("folder", "packed-stored", "packed-full", "packed-partial", "torch-v2", "torch-v2-reenc", "ffcv")
DISPLAY = {
    "folder": "trdata, ImageFolder",
    "packed-stored": "trdata, Packed(full), stored bytes",
    "packed-full": "trdata, Packed(full), re-encoded",
    "packed-partial": "trdata, Packed(partial), re-encoded, cold",
    "torch-v2": "torch DataLoader + v2, ImageFolder",
    "torch-v2-reenc": "torch DataLoader + v2, re-encoded files",
    "ffcv": "FFCV Loader, .beton",
}


# ----------------------------------------------------------------------------------------------- 1. pack


def pack_step(data: str, work: Path, workers: int, short_side: int, quality: int) -> dict[str, Any]:
    src = trdata.ImageFolder(data)
    out: dict[str, Any] = {"images": len(src), "folder_bytes": sum(os.path.getsize(p) for p in src.paths)}
    for key, reencode in [
        ("stored", None),
        ("reenc", trdata.Reencode(short_side=short_side, quality=quality)),
    ]:
        dst = work / f"{key}.trd"
        t0 = time.perf_counter()
        report = trdata.pack(src, dst, reencode=reencode, workers=workers, progress=False)
        dt = time.perf_counter() - t0
        out[key] = {
            "img_per_s": round(len(src) / dt, 1),
            "seconds": round(dt, 2),
            "file_bytes": os.path.getsize(dst),
            "records_bytes": report["bytes_out"],
        }
    # the re-encoded images as plain files, for torch-v2-reenc (same bytes as the packed records)
    info = trdata.sources.packed.inspect(work / "reenc.trd")
    blob = (work / "reenc.trd").read_bytes()
    for i, (off, n, label) in enumerate(zip(info["offsets"], info["lengths"], info["labels"])):
        d = work / "reenc-folder" / f"c{int(label):04d}"
        d.mkdir(parents=True, exist_ok=True)
        (d / f"{i:06d}.jpg").write_bytes(blob[int(off) : int(off) + int(n)])
    (work / "folder").symlink_to(os.path.abspath(data))
    return out


# ----------------------------------------------------------------------------------------------- 2. loaders


def drop_from_page_cache(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def run_contender(
    name: str, root: str, *, batch_size: int = 64, workers: int = 2, **timing: Any
) -> Measurement:
    """One loader, in this process (``child`` mode). ``root`` is the work folder of step 1."""
    work = Path(root)
    timing.setdefault("dtype", "float16")
    if name == "folder":
        m = _bench.trdata_contender(work / "folder", batch_size=batch_size, workers=workers, **timing)
    elif name.startswith("packed-"):
        file = work / ("stored.trd" if name == "packed-stored" else "reenc.trd")
        mode = "partial" if name == "packed-partial" else "full"
        src = trdata.Packed(file, mode)
        cold = (lambda _e: drop_from_page_cache(str(file))) if mode == "partial" else None
        m = _bench.trdata_contender(
            work, batch_size=batch_size, workers=workers, source=src, before_epoch=cold, **timing
        )
    elif name in ("torch-v2", "torch-v2-reenc"):
        folder = work / ("folder" if name == "torch-v2" else "reenc-folder")
        m = peers.run_contender("torch-v2", str(folder), batch_size=batch_size, workers=workers, **timing)
    elif name == "ffcv":
        m = ffcv_contender(work, batch_size=batch_size, workers=workers, **timing)
    else:
        raise ValueError(f"unknown contender {name!r}")
    m.name, m.key = DISPLAY[name], name
    return m


def ffcv_contender(work: Path, *, batch_size: int, workers: int, **timing: Any) -> Measurement:
    """FFCV's Loader over its own .beton of the re-encoded images (written once into the work folder, JPEG q90,
    the same sizes): RandomResizedCropRGBImageDecoder(224) + flip + NormalizeImage(float16) → NCHW tensors,
    random order, ``workers`` threads, the page cache on (os_cache)."""
    import ffcv  # noqa: F401
    from ffcv.fields import IntField, RGBImageField
    from ffcv.fields.decoders import IntDecoder, RandomResizedCropRGBImageDecoder
    from ffcv.loader import Loader, OrderOption
    from ffcv.transforms import NormalizeImage, RandomHorizontalFlip, ToTensor, ToTorchImage
    from ffcv.writer import DatasetWriter
    from PIL import Image

    timing.pop("dtype", None)
    beton = work / "reenc.beton"
    files = sorted((work / "reenc-folder").rglob("*.jpg"))
    if not beton.exists():

        class Images:
            def __len__(self) -> int:
                return len(files)

            def __getitem__(self, i: int) -> tuple[Any, int]:
                with Image.open(files[i]) as im:
                    return im.convert("RGB"), int(files[i].parent.name[1:])

        DatasetWriter(
            str(beton),
            {"image": RGBImageField(write_mode="jpg", jpeg_quality=90), "label": IntField()},
            num_workers=workers,
        ).from_indexed_dataset(Images())
    mean = np.array([0.485, 0.456, 0.406]) * 255
    std = np.array([0.229, 0.224, 0.225]) * 255
    loader = Loader(
        str(beton),
        batch_size=batch_size,
        num_workers=workers,
        order=OrderOption.RANDOM,
        os_cache=True,
        drop_last=False,
        pipelines={
            "image": [
                RandomResizedCropRGBImageDecoder((224, 224)),
                RandomHorizontalFlip(),
                NormalizeImage(mean, std, np.float16),
                ToTensor(),
                ToTorchImage(),
            ],
            "label": [IntDecoder(), ToTensor()],
        },
    )

    def epoch_batches(_e: int) -> Any:
        for images, _labels in loader:
            yield int(images.shape[0])

    m = _bench.time_epochs(DISPLAY["ffcv"], epoch_batches, len(files), **timing)
    m.note = f"ffcv {getattr(ffcv, '__version__', '?')}, {workers} threads, numba-compiled pipeline"
    return m


def run_isolated(name: str, root: str, cpus: list[int], **options: Any) -> Measurement:
    if name == "torch-v2" or name == "torch-v2-reenc":
        missing = peers.missing_modules("torch-v2")
        if missing:
            return Measurement(name=DISPLAY[name], key=name, error=f"not installed ({', '.join(missing)})")
    if name == "ffcv":
        try:
            import ffcv  # noqa: F401
        except ImportError as e:
            return Measurement(name=DISPLAY[name], key=name, error=f"not installed: {e}")
    return run_in_child(__file__, name, root, cpus, label=DISPLAY[name], **options)


# ----------------------------------------------------------------------------------------------- 3. order


def class_stats(order: list[int], labels: np.ndarray, batch: int) -> tuple[float, float]:
    """Mean distinct classes and mean class entropy (bits) per full batch of ``order``."""
    distinct, entropy = [], []
    for s in range(0, len(order) - batch + 1, batch):
        counts = Counter(labels[order[s : s + batch]].tolist())
        distinct.append(len(counts))
        entropy.append(-sum(c / batch * math.log2(c / batch) for c in counts.values()))
    return float(np.mean(distinct)), float(np.mean(entropy))


def ffcv_quasi_random(block_of: np.ndarray, seed: int, buffer_pages: int) -> list[int]:
    """FFCV's QuasiRandom traversal (ffcv/traversal_order/quasi_random.py), written out here: each page's samples
    shuffled, pages entered in a random order into a buffer of ``buffer_pages`` pages, each sample drawn from a
    uniformly chosen page of the buffer."""
    rng = np.random.default_rng(seed)
    pages = [list(np.flatnonzero(block_of == b)) for b in range(int(block_of.max()) + 1)]
    for p in pages:
        rng.shuffle(p)
    page_order = list(rng.permutation(len(pages)))
    current: list[int] = []
    consumed = [0] * len(pages)
    out = []
    nxt = 0
    for _ in range(len(block_of)):
        while nxt < len(pages) and len(current) < buffer_pages:
            if pages[page_order[nxt]]:
                current.append(int(page_order[nxt]))
            nxt += 1
        page = current[int(rng.integers(len(current)))]
        out.append(int(pages[page][consumed[page]]))
        consumed[page] += 1
        if consumed[page] >= len(pages[page]):
            current.remove(page)
    return out


def order_step(work: Path, samples: int, classes: int, per_block: int, batch: int) -> dict[str, Any]:
    labels = np.repeat(np.arange(classes), -(-samples // classes))[:samples]
    pixels = np.zeros((samples, 8, 8), np.uint8)  # 64-byte records: `per_block` of them fill a block
    file = work / "order.trd"
    trdata.pack(
        trdata.Arrays(pixels, labels.tolist()), file, progress=False, block_bytes=max(4096, per_block * 64)
    )
    info = trdata.sources.packed.inspect(file)
    firsts = np.asarray(info["block_starts"], np.int64)
    block_of = np.searchsorted(firsts, np.arange(samples), side="right") - 1

    def loader_order(mode: str, shuffle: bool, **kw: Any) -> list[int]:
        src = trdata.Packed(file, mode, **kw)
        with trdata.Loader(
            src,
            batch_size=batch,
            workers=2,
            shuffle=shuffle,
            seed=3,
            transforms=[trdata.CenterCrop(8)],
            dtype="uint8",
            reproducible=True,
            last_batch="drop",
        ) as ld:
            return [int(i) for b in ld for i in b.indices]

    rows: dict[str, Any] = {}
    cases: list[tuple[str, list[int]]] = [
        ("file order", loader_order("full", False)),
        ("full shuffle", loader_order("full", True)),
    ]
    for w in (1, 4, 16):
        cases.append((f"partial, window {w} blocks", loader_order("partial", True, window_blocks=w)))
    default = loader_order("partial", True)
    cases.append(("partial, default window", default))
    cases.append((f"FFCV QuasiRandom, buffer {2 * batch} pages", ffcv_quasi_random(block_of, 3, 2 * batch)))
    for w in (4, 16):
        cases.append((f"FFCV QuasiRandom, buffer {w} pages", ffcv_quasi_random(block_of, 3, w)))
    for name, order in cases:
        d, h = class_stats(order, labels, batch)
        rows[name] = {"distinct_classes_per_batch": round(d, 1), "class_entropy_bits": round(h, 3)}
    return {
        "samples": samples,
        "classes": classes,
        "records_per_block": per_block,
        "blocks": int(info["blocks"]),
        "batch": batch,
        "ideal_entropy_bits": round(math.log2(min(batch, classes)), 3),
        "rows": rows,
    }


# ----------------------------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    status = suite_child(argv, __file__, run=run_contender, contenders=LOADERS)
    if status is not None:
        return status
    ap = suite_parser(__file__, __doc__)
    ap.add_argument("--short-side", type=int, default=320)
    ap.add_argument("--quality", type=int, default=90)
    ap.add_argument("--only", default=",".join(LOADERS))
    ap.add_argument("--order-samples", type=int, default=128_000)
    ap.add_argument(
        "--records-per-block", type=int, default=75, help="ImageNet's ~110 KB records in 8 MiB blocks"
    )
    ap.add_argument("--json", default=str(RESULTS / "packed.json"))
    a = ap.parse_args(argv)
    cpus, workers = _bench.suite_cpus(a)
    doc: dict[str, Any] = suite_doc(a.data, cpus, workers)
    with tempfile.TemporaryDirectory(prefix="trdata-packed-bench-") as tmp:
        work = Path(tmp)
        print(f"packing {a.data} on CPUs {cpus} ({workers} threads) …", flush=True)
        doc["pack"] = p = pack_step(a.data, work, workers, a.short_side, a.quality)
        mb = 1e6
        print(
            f"  {p['images']:,} images, folder {p['folder_bytes'] / mb:,.1f} MB\n"
            f"  stored:     {p['stored']['img_per_s']:>8,.0f} img/s, {p['stored']['file_bytes'] / mb:,.1f} MB\n"
            f"  re-encoded: {p['reenc']['img_per_s']:>8,.0f} img/s, {p['reenc']['file_bytes'] / mb:,.1f} MB "
            f"(short side {a.short_side}, q{a.quality})",
            flush=True,
        )
        names = [n for n in a.only.split(",") if n]
        results = run_cpu_suite(
            names,
            str(work),
            cpus,
            rounds=a.rounds,
            runner=run_isolated,
            workers=workers,
            dtype="float16",
            epochs=a.epochs,
        )
        by = {m.key: m for m in results}
        ref = by.get("folder")
        print(
            f"\nloaders ({workers} workers on CPUs {cpus}, RRC 224 + flip + normalize → f16 NCHW, batch 64):"
        )
        for m in results:
            if m.error:
                print(f"  {m.name:<44} {m.error}")
                continue
            ratio = f"{m.img_per_s / ref.img_per_s:5.2f}× folder" if ref and not ref.error else ""
            per_cpu = m.img_per_cpu_s
            cpu = ""
            if per_cpu and ref and not ref.error and ref.img_per_cpu_s:
                cpu = f"  {per_cpu:>7,.0f} img/CPU-s  {per_cpu / ref.img_per_cpu_s:5.2f}× folder"
            print(f"  {m.name:<44} {m.img_per_s:>8,.0f} img/s  {ratio}{cpu}")
        doc["loaders"] = [m.to_json() for m in results]
        full, part = by.get("packed-full"), by.get("packed-partial")
        if full and part and not full.error and not part.error and ref and not ref.error:
            doc["targets"] = {
                "packed_full_vs_folder": round(full.img_per_s / ref.img_per_s, 3),
                "partial_vs_full": round(part.img_per_s / full.img_per_s, 3),
            }
            print(
                f"  targets: packed-full ÷ folder {doc['targets']['packed_full_vs_folder']:.2f} (≥ 2.5); "
                f"partial ÷ full {doc['targets']['partial_vs_full']:.2f} (≥ 0.9)"
            )
        print("\norder randomness (per batch of 256, 1000 classes stored class by class):", flush=True)
        doc["order"] = o = order_step(work, a.order_samples, 1000, a.records_per_block, 256)
        print(
            f"  {o['samples']:,} records in {o['blocks']:,} blocks; ideal entropy {o['ideal_entropy_bits']} bits"
        )
        for name, r in o["rows"].items():
            print(
                f"  {name:<36} {r['distinct_classes_per_batch']:>7} classes  {r['class_entropy_bits']:>6} bits"
            )
    write_json(a.json, doc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
