#!/usr/bin/env python3
"""Data you already have, on the CPU box: the same images written as other projects' record files, each read by
trdata and by that project's own loader, on the same CPUs and workers, the classification recipe
(RandomResizedCrop 224 + flip + ImageNet normalize → float16 NCHW, batch 64):

  parquet          trdata.Parquet over Hugging Face Parquet shards (written as push_to_hub writes them:
                   ``embed_table_storage`` then ``to_parquet`` in row groups of 100 images, datasets' size for
                   image sets)
  datasets         ``datasets.Dataset.from_parquet`` of the same shards, images as stored (``Image(decode=False)``),
                   ``set_transform`` decoding with torchvision's ``decode_jpeg`` + the v2 recipe, in a torch
                   DataLoader (shuffled)
  datasets-pil     the same as Hugging Face's image guide writes it: the ``Image`` feature decoding (PIL, by
                   ``datasets``), ``set_transform`` applying v2 (RandomResizedCrop … Normalize) to each PIL image
                   after ``ToImage``, in a torch DataLoader (shuffled); trdata's Parquet row is compared to both
  mds              trdata.MDS over MDSWriter shards (``{"image": "jpeg", "label": "int"}``, no compression)
  streaming        ``streaming.StreamingDataset(local=..., shuffle=True)`` (its jpeg column decodes with PIL) + the
                   v2 recipe from PIL, in streaming's StreamingDataLoader
  litdata          trdata.LitData over ``litdata.optimize`` chunks (8 MiB, jpeg + int leaves)
  litdata-loader   ``litdata.StreamingDataset(shuffle=True)`` (its jpeg leaf decodes with torchvision) + the v2
                   recipe, in LitData's StreamingDataLoader
  folder           trdata over the ImageFolder the files were written from (the box's reference)
  torch-v2         torch DataLoader + decode_jpeg + v2 over the same ImageFolder (common/peers.py's torch-v2 peer)

The files are written once into a temporary folder (untimed, sizes reported). Each row runs in a fresh process
bound to the CPUs, 1 warm-up epoch (untimed) + --epochs timed epochs, --rounds interleaved rounds (best kept);
each trdata row's ratio is to its format's peer. A row whose package is missing, or whose trdata source is not in
this build, says so instead of a number.

    PYTHONPATH=python .venv/bin/python benches/peers/formats.py [--data DIR] [--cpus 0,1] [--rounds 2]
        [--only parquet,datasets,...] [--json bench-results/formats.json]

Data: --data (default the ImageNet sample beside the repo: 1,000 JPEGs). Nothing here asserts timings.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import trdata
from trdata import _bench
from trdata._bench import Measurement

# benches/peers/ (this script's folder, first on sys.path) holds streaming.py, which would shadow mosaicml-streaming's
# `streaming` package: out; benches/ in, for the shared `common` package.
sys.path = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from common import (  # noqa: E402
    RESULTS,
    folder_files,
    peers,
    run_cpu_suite,
    run_in_child,
    suite_child,
    suite_doc,
    suite_parser,
    write_json,
)

ROWS = (
    "parquet",
    "datasets",
    "datasets-pil",
    "mds",
    "streaming",
    "litdata",
    "litdata-loader",
    "folder",
    "torch-v2",
)
DISPLAY = {
    "parquet": "trdata, Parquet (HF shards)",
    "datasets": "datasets + torch DataLoader + v2",
    "datasets-pil": "datasets (Image decoding, PIL) + DataLoader + v2",
    "mds": "trdata, MDS",
    "streaming": "mosaicml-streaming StreamingDataset + v2",
    "litdata": "trdata, LitData",
    "litdata-loader": "LitData StreamingDataLoader + v2",
    "folder": "trdata, ImageFolder (reference)",
    "torch-v2": "torch DataLoader + v2, ImageFolder (reference)",
}
PEER_OF = {"parquet": "datasets", "mds": "streaming", "litdata": "litdata-loader"}
SOURCE_OF = {"parquet": "Parquet", "mds": "MDS", "litdata": "LitData"}
REQUIRES = {
    "datasets": ("datasets", "torchvision"),
    "datasets-pil": ("datasets", "torchvision"),
    "streaming": ("streaming", "torchvision"),
    "litdata-loader": ("litdata", "torchvision"),
    "torch-v2": ("torch", "torchvision"),
}
ROW_GROUP = 100  # datasets' PARQUET_ROW_GROUP_SIZE_FOR_IMAGE_DATASETS: push_to_hub's writer batch for images
CHUNK_BYTES = 8 << 20


# ----------------------------------------------------------------------------------------------- the files


def _litdata_item(item: tuple[str, int]) -> dict[str, Any]:
    from PIL import Image

    path, label = item
    return {"image": Image.open(path), "label": label}  # a JPEG file: its bytes are stored as they are


def write_files(data: str, work: Path, which: set[str]) -> dict[str, Any]:
    """The images of ``data`` (ImageFolder order) as HF Parquet shards, MDS shards and LitData chunks, each with
    its project's writer; each format's seconds and bytes."""
    paths, labels = folder_files(data)
    out: dict[str, Any] = {"images": len(paths), "folder_bytes": sum(Path(p).stat().st_size for p in paths)}
    (work / "folder").symlink_to(Path(data).resolve())
    if which & {"parquet", "datasets"}:
        import datasets
        from datasets.table import embed_table_storage

        datasets.disable_progress_bars()
        t0 = time.perf_counter()
        names = sorted({Path(p).parent.name for p in paths})
        ds = datasets.Dataset.from_dict(
            {"image": paths, "label": labels},
            features=datasets.Features(image=datasets.Image(), label=datasets.ClassLabel(names=names)),
        )
        shards = max(1, -(-out["folder_bytes"] // (500 << 20)))  # datasets' MAX_SHARD_SIZE
        (work / "parquet").mkdir()
        for i in range(shards):
            shard = ds.shard(num_shards=shards, index=i, contiguous=True).with_format("arrow")
            shard = shard.map(embed_table_storage, batched=True, keep_in_memory=True).with_format()
            shard.to_parquet(
                str(work / "parquet" / f"train-{i:05d}-of-{shards:05d}.parquet"), batch_size=ROW_GROUP
            )
        out["parquet"] = _sized(work / "parquet", t0)
    if which & {"mds", "streaming"}:
        from PIL import Image
        from streaming import MDSWriter

        t0 = time.perf_counter()
        with MDSWriter(out=str(work / "mds"), columns={"image": "jpeg", "label": "int"}) as w:
            for p, label in zip(paths, labels):
                w.write({"image": Image.open(p), "label": label})
        out["mds"] = _sized(work / "mds", t0)
    if which & {"litdata", "litdata-loader"}:
        import litdata

        t0 = time.perf_counter()
        litdata.optimize(
            fn=_litdata_item,
            inputs=list(zip(paths, labels)),
            output_dir=str(work / "litdata"),
            chunk_bytes=CHUNK_BYTES,
            num_workers=1,
            mode="overwrite",
            start_method="fork",
            verbose=False,
        )
        out["litdata"] = _sized(work / "litdata", t0)
    (work / "files.json").write_text(json.dumps(out))
    return out


def _sized(folder: Path, t0: float) -> dict[str, Any]:
    files = [f for f in folder.iterdir() if f.is_file()]
    return {
        "seconds": round(time.perf_counter() - t0, 1),
        "files": len(files),
        "bytes": sum(f.stat().st_size for f in files),
    }


# ----------------------------------------------------------------------------------------------- the rows


class _DatasetsRows:
    """The ``datasets`` row's map-style view: ``ds[i]`` through its ``set_transform`` → (image, label)."""

    def __init__(self, ds: Any) -> None:
        self.ds = ds

    def __len__(self) -> int:
        return len(self.ds)

    def __getitem__(self, i: int) -> tuple[Any, int]:
        row = self.ds[i]
        return row["image"], row["label"]


class _HfTransform:
    """``set_transform``'s function: a batch of stored images → decode_jpeg + the v2 recipe."""

    def __init__(self) -> None:
        self.transform: Any = None

    def __call__(self, batch: dict[str, list[Any]]) -> dict[str, list[Any]]:
        import torch
        from torchvision.io import ImageReadMode, decode_jpeg

        if self.transform is None:
            self.transform = peers.torch_v2_transform()
        images = [
            self.transform(
                decode_jpeg(
                    torch.frombuffer(bytearray(im["bytes"]), dtype=torch.uint8), mode=ImageReadMode.RGB
                )
            )
            for im in batch["image"]
        ]
        return {"image": images, "label": batch["label"]}


class _HfPilTransform:
    """``set_transform``'s function as Hugging Face's image guide writes it: each decoded PIL image → ToImage + the
    v2 recipe."""

    def __init__(self) -> None:
        self.transform: Any = None

    def __call__(self, batch: dict[str, list[Any]]) -> dict[str, list[Any]]:
        from torchvision.transforms import v2

        if self.transform is None:
            self.transform = v2.Compose([v2.ToImage(), peers.torch_v2_transform()])
        return {
            "image": [self.transform(im.convert("RGB")) for im in batch["image"]],
            "label": batch["label"],
        }


def datasets_pil_row(work: Path, batch_size: int, workers: int, **timing: Any) -> Measurement:
    import datasets

    datasets.disable_progress_bars()
    files = sorted(str(p) for p in (work / "parquet").glob("*.parquet"))
    ds = datasets.Dataset.from_parquet(files, cache_dir=str(work / "hf-cache"))
    ds.set_transform(_HfPilTransform())
    run = peers.torch_epochs(_DatasetsRows(ds), batch_size=batch_size, workers=workers)
    m = _bench.time_epochs(DISPLAY["datasets-pil"], run, len(ds), **timing)
    m.note = (
        f"datasets {datasets.__version__}, Image() decoding + set_transform(v2), {workers} worker processes"
    )
    return m


def datasets_row(work: Path, batch_size: int, workers: int, **timing: Any) -> Measurement:
    import datasets

    datasets.disable_progress_bars()
    files = sorted(str(p) for p in (work / "parquet").glob("*.parquet"))
    ds = datasets.Dataset.from_parquet(files, cache_dir=str(work / "hf-cache"))
    ds = ds.cast_column("image", datasets.Image(decode=False))
    ds.set_transform(_HfTransform())
    run = peers.torch_epochs(_DatasetsRows(ds), batch_size=batch_size, workers=workers)
    m = _bench.time_epochs(DISPLAY["datasets"], run, len(ds), **timing)
    m.note = f"datasets {datasets.__version__}, set_transform(decode_jpeg + v2), {workers} worker processes"
    return m


def streaming_row(work: Path, batch_size: int, workers: int, **timing: Any) -> Measurement:
    import streaming
    from streaming.base.util import clean_stale_shared_memory

    clean_stale_shared_memory()

    class Images(streaming.StreamingDataset):
        def __init__(self, **kw: Any) -> None:
            super().__init__(**kw)
            self.transform: Any = None

        def __getitem__(self, i: int) -> tuple[Any, int]:
            from torchvision.transforms.v2 import functional as F

            if self.transform is None:
                self.transform = peers.torch_v2_transform()
            s = super().__getitem__(i)
            return self.transform(F.pil_to_tensor(s["image"].convert("RGB"))), int(s["label"])

    ds = Images(local=str(work / "mds"), shuffle=True, shuffle_seed=0, batch_size=batch_size)
    loader = streaming.StreamingDataLoader(
        ds, batch_size=batch_size, num_workers=workers, persistent_workers=workers > 0, drop_last=False
    )

    def epochs(_e: int) -> Iterator[int]:
        for _images, labels in loader:
            yield int(labels.shape[0])

    m = _bench.time_epochs(DISPLAY["streaming"], epochs, ds.num_samples, **timing)
    m.note = f"mosaicml-streaming {streaming.__version__}, PIL decode + v2, {workers} worker processes"
    return m


class _LitRecipe:
    """LitData's item (the jpeg leaf decoded by litdata: a CHW uint8 tensor) → the v2 recipe."""

    def __init__(self) -> None:
        self.transform: Any = None

    def __call__(self, item: dict[str, Any]) -> tuple[Any, int]:
        if self.transform is None:
            self.transform = peers.torch_v2_transform()
        return self.transform(item["image"]), item["label"]


def litdata_row(work: Path, batch_size: int, workers: int, **timing: Any) -> Measurement:
    import warnings

    import litdata

    # its PIL fallback (CMYK and grayscale JPEGs) warns about non-writable arrays once per worker
    warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
    ds = litdata.StreamingDataset(
        str(work / "litdata"),
        shuffle=True,
        seed=0,
        cache_dir=str(work / "litdata-cache"),
        transform=_LitRecipe(),
    )
    loader = litdata.StreamingDataLoader(
        ds, batch_size=batch_size, num_workers=workers, persistent_workers=True
    )

    def epochs(_e: int) -> Iterator[int]:
        for _images, labels in loader:
            yield int(labels.shape[0])

    m = _bench.time_epochs(DISPLAY["litdata-loader"], epochs, len(ds), **timing)
    m.note = f"litdata {litdata.__version__}, decode_jpeg (litdata's) + v2, {workers} worker processes"
    return m


def run_contender(
    name: str, root: str, *, batch_size: int = 64, workers: int = 2, **timing: Any
) -> Measurement:
    """One row in this process (``child`` mode); ``root`` is the work folder."""
    work = Path(root)
    timing.setdefault("dtype", "float16")
    if name == "folder":
        m = _bench.trdata_contender(work / "folder", batch_size=batch_size, workers=workers, **timing)
    elif name == "torch-v2":
        m = peers.run_contender(
            "torch-v2", str(work / "folder"), batch_size=batch_size, workers=workers, **timing
        )
    elif name in SOURCE_OF:
        folder = work / name
        source = getattr(trdata, SOURCE_OF[name])(str(folder))
        m = _bench.trdata_contender(work, batch_size=batch_size, workers=workers, source=source, **timing)
    else:
        timing.pop("dtype", None)
        row = {
            "datasets": datasets_row,
            "datasets-pil": datasets_pil_row,
            "streaming": streaming_row,
            "litdata-loader": litdata_row,
        }[name]
        m = row(work, batch_size, workers, **timing)
    m.name, m.key = DISPLAY[name], name
    return m


def missing(name: str, work: Path) -> str | None:
    """Why row ``name`` cannot run here, or None (a trdata row: its source is made here once, to know)."""
    import importlib.util

    if name in SOURCE_OF:
        try:
            getattr(trdata, SOURCE_OF[name])(str(work / name))
        except AttributeError as e:  # the Python class or the core's side of it not in this build
            return f"trdata.{SOURCE_OF[name]} is not in this build ({e})"
    gone = [m for m in REQUIRES.get(name, ()) if importlib.util.find_spec(m) is None]
    return f"not installed ({', '.join(gone)})" if gone else None


def run_isolated(name: str, root: str, cpus: list[int], **options: Any) -> Measurement:
    why = missing(name, Path(root))
    if why:
        return Measurement(name=DISPLAY[name], key=name, error=why)
    return run_in_child(__file__, name, root, cpus, label=DISPLAY[name], **options)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    status = suite_child(argv, __file__, run=run_contender, contenders=ROWS)
    if status is not None:
        return status
    ap = suite_parser(__file__, __doc__)
    ap.add_argument("--only", default=",".join(ROWS))
    ap.add_argument("--json", default=str(RESULTS / "formats.json"))
    a = ap.parse_args(argv)
    cpus, workers = _bench.suite_cpus(a)
    names = [n for n in a.only.split(",") if n]
    doc: dict[str, Any] = suite_doc(a.data, cpus, workers)
    with tempfile.TemporaryDirectory(prefix="trdata-formats-bench-") as tmp:
        work = Path(tmp)
        print(f"writing {a.data} as Parquet (HF), MDS, LitData …", flush=True)
        doc["files"] = f = write_files(a.data, work, set(names))
        mb = 1e6
        print(f"  {f['images']:,} images, folder {f['folder_bytes'] / mb:,.1f} MB")
        for k in ("parquet", "mds", "litdata"):
            if k in f:
                print(
                    f"  {k:<8} {f[k]['files']:>3} files {f[k]['bytes'] / mb:>8,.1f} MB, written in {f[k]['seconds']} s"
                )
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
        print(
            f"\nloaders ({workers} workers on CPUs {cpus}, RRC 224 + flip + normalize → f16 NCHW, batch 64):"
        )
        for m in results:
            if m.error:
                print(f"  {m.name:<44} {m.error}")
                continue
            peer = by.get(PEER_OF.get(m.key, "torch-v2" if m.key == "folder" else ""))
            ratio = f"  {m.img_per_s / peer.img_per_s:5.2f}× {peer.name}" if peer and not peer.error else ""
            also = by.get("datasets-pil") if m.key == "parquet" else None
            if also is not None and not also.error:
                ratio += f", {m.img_per_s / also.img_per_s:.2f}× {also.name}"
            cpu = f"  {m.img_per_cpu_s:>7,.0f} img/CPU-s" if m.img_per_cpu_s else ""
            print(f"  {m.name:<44} {m.img_per_s:>8,.0f} img/s{cpu}{ratio}")
        doc["loaders"] = [m.to_json() for m in results]
        doc["ratios"] = {
            k: round(by[k].img_per_s / by[p].img_per_s, 3)
            for k, p in PEER_OF.items()
            if k in by and p in by and not by[k].error and not by[p].error
        }
        if (
            "parquet" in by
            and "datasets-pil" in by
            and not by["parquet"].error
            and not by["datasets-pil"].error
        ):
            doc["ratios"]["parquet_vs_datasets_pil"] = round(
                by["parquet"].img_per_s / by["datasets-pil"].img_per_s, 3
            )
    write_json(a.json, doc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
