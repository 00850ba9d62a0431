#!/usr/bin/env python3
"""Modern augmentation recipes on the CPU box: trdata against torch DataLoader + torchvision v2 with the same
recipe object, on the same files and CPUs, each contender in a fresh process.

Recipes (the per-sample part; batch ops such as MixUp/CutMix run on the GPU batch and are not timed here):

  tv     torchvision's ResNet-50 reference recipe: RandomResizedCrop(176) + RandomHorizontalFlip +
         TrivialAugmentWide(bilinear, as the reference passes its interpolation) + ToDtype(float32) +
         Normalize + RandomErasing(0.1)
  deit   DeiT's: RandomResizedCrop(224, bicubic) + RandomHorizontalFlip + RandAugment(2 ops, m9) +
         ColorJitter(0.3, 0.3, 0.3) + ToDtype(float32) + Normalize + RandomErasing(0.25)

Contenders per recipe (the v2 Compose is built once, in ``recipe()``, and given to every contender):

  trdata-R       trdata.Loader(transforms=<the torchvision v2 Compose>) — converted by from_torchvision
  torch-v2-R     torch DataLoader (worker processes) + torchvision.io.decode_jpeg + the Compose on uint8 tensors
  torch-pil-R    torch DataLoader + Pillow decode + the Compose on PIL images (the reference scripts' default)
  dali-R         NVIDIA DALI CPU-only pipeline with its auto_aug policy (a row says why when it cannot run)

Output: float32 NCHW batches of 64, shuffled, 1 warm-up + --epochs timed epochs, best of --rounds interleaved.

    PYTHONPATH=python python benches/peers/recipes.py [--data DIR] [--cpus 0,1] [--rounds 2] [--only tv]

Target: trdata ≥ 2.5× torch DataLoader + v2 for both recipes. Reported, never asserted.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from trdata import _bench
from trdata._bench import Measurement

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benches/: the shared `common` package
from common import (  # noqa: E402
    IMAGENET_MEAN,
    IMAGENET_STD,
    RESULTS,
    peers,
    run_cpu_suite,
    run_in_child,
    suite_child,
    suite_doc,
    suite_parser,
    write_json,
)

RECIPES = ("tv", "deit")
KINDS = ("trdata", "torch-v2", "torch-pil", "dali")
CONTENDERS = tuple(f"{k}-{r}" for r in RECIPES for k in KINDS)
DISPLAY = {
    "trdata": "trdata Loader (the v2 Compose, converted)",
    "torch-v2": "torch DataLoader + decode_jpeg + v2",
    "torch-pil": "torch DataLoader + PIL + v2",
    "dali": "DALI CPU pipeline + auto_aug",
}
SIZE = {"tv": 176, "deit": 224}


def recipe(name: str) -> Any:
    """The recipe as a torchvision v2 Compose (what a user already has)."""
    import torch
    from torchvision.transforms import v2

    m, s = IMAGENET_MEAN, IMAGENET_STD
    bilinear, bicubic = v2.InterpolationMode.BILINEAR, v2.InterpolationMode.BICUBIC
    if name == "tv":
        aug = [
            v2.RandomResizedCrop(176, interpolation=bilinear, antialias=True),
            v2.RandomHorizontalFlip(),
            v2.TrivialAugmentWide(interpolation=bilinear),
        ]
        erase = 0.1
    elif name == "deit":
        aug = [
            v2.RandomResizedCrop(224, interpolation=bicubic, antialias=True),
            v2.RandomHorizontalFlip(),
            v2.RandAugment(num_ops=2, magnitude=9),
            v2.ColorJitter(0.3, 0.3, 0.3),
        ]
        erase = 0.25
    else:
        raise ValueError(f"unknown recipe {name!r}")
    return v2.Compose(
        [
            *aug,
            v2.ToImage(),
            v2.ToDtype(torch.float32, scale=True),
            v2.Normalize(m, s),
            v2.RandomErasing(erase),
            v2.ToPureTensor(),
        ]
    )


class _Files:
    """(path, label) → decoded image (tensor via decode_jpeg, or PIL) → the recipe."""

    def __init__(self, paths: Sequence[str], labels: Sequence[int], name: str, pil: bool) -> None:
        self.paths, self.labels, self.pil = list(paths), list(labels), pil
        self.transform = recipe(name)

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, i: int) -> tuple[Any, int]:
        if self.pil:
            from PIL import Image

            with Image.open(self.paths[i]) as f:
                image = f.convert("RGB")
        else:
            from torchvision.io import ImageReadMode, decode_jpeg, read_file

            image = decode_jpeg(read_file(self.paths[i]), mode=ImageReadMode.RGB)
        return self.transform(image), self.labels[i]


def trdata_contender(root: str, name: str, *, batch_size: int, workers: int, **timing: Any) -> Measurement:
    import trdata

    loader = trdata.Loader(
        trdata.ImageFolder(root),
        batch_size=batch_size,
        transforms=recipe(name),
        layout="NCHW",
        workers=workers,
        shuffle=True,
        seed=0,
        device="cpu",
    )

    def epoch_batches(e: int) -> Iterator[int]:
        loader.set_epoch(e)
        for batch in loader:
            yield int(batch.valid)

    with loader:
        m = _bench.time_epochs(DISPLAY["trdata"], epoch_batches, len(loader.source), **timing)
    m.note = f"trdata {trdata.__version__}; {workers} pinned Rust threads"
    return m


def dali_contender(
    paths: Sequence[str], labels: Sequence[int], name: str, *, batch_size: int, workers: int, **timing: Any
) -> Measurement:
    from nvidia import dali
    from nvidia.dali import fn, pipeline_def, types
    from nvidia.dali.auto_aug import rand_augment, trivial_augment

    @pipeline_def(enable_conditionals=True)
    def pipe() -> Any:
        jpegs, labs = fn.readers.file(files=list(paths), labels=list(labels), random_shuffle=True)
        images = fn.decoders.image_random_crop(jpegs, device="cpu", output_type=types.RGB)
        images = fn.resize(images, resize_x=SIZE[name], resize_y=SIZE[name], antialias=True)
        if name == "tv":
            images = trivial_augment.trivial_augment_wide(images)
        else:
            images = rand_augment.rand_augment(images, n=2, m=9)
            images = fn.color_twist(
                images,
                brightness=fn.random.uniform(range=(0.7, 1.3)),
                contrast=fn.random.uniform(range=(0.7, 1.3)),
                saturation=fn.random.uniform(range=(0.7, 1.3)),
            )
        return peers.dali_normalize(images, types.FLOAT), labs

    out = peers.time_dali(DISPLAY["dali"], pipe, len(paths), batch_size=batch_size, workers=workers, **timing)
    out.note = f"DALI {dali.__version__}; CPU-only; no erasing"
    return out


def run_contender(
    name: str, root: str, *, batch_size: int = 64, workers: int = 2, **timing: Any
) -> Measurement:
    """One contender in this process (``child`` mode)."""
    timing.pop("dtype", None)
    kind, _, rec = name.rpartition("-")
    if kind == "trdata":
        m = trdata_contender(root, rec, batch_size=batch_size, workers=workers, **timing)
    else:
        paths, labels = _bench.image_folder_files(root)
        if kind == "dali":
            m = dali_contender(paths, labels, rec, batch_size=batch_size, workers=workers, **timing)
        else:
            import torchvision

            dataset = _Files(paths, labels, rec, pil=kind == "torch-pil")
            run = peers.torch_epochs(dataset, batch_size=batch_size, workers=workers)
            m = _bench.time_epochs(DISPLAY[kind], run, len(paths), **timing)
            m.note = f"torchvision {torchvision.__version__}; {workers} worker processes"
    m.key = name
    return m


def run_isolated(name: str, root: str, cpus: Sequence[int], **options: Any) -> Measurement:
    kind = name.rpartition("-")[0]
    missing = peers.missing_modules({"torch-pil": "torch-pil", "dali": "dali"}.get(kind, "torch-v2"))
    if missing:
        return Measurement(name=DISPLAY[kind], key=name, error=f"not installed ({', '.join(missing)})")
    return run_in_child(__file__, name, root, cpus, label=DISPLAY[kind], **options)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    status = suite_child(argv, __file__, run=run_contender, contenders=CONTENDERS)
    if status is not None:
        return status
    ap = suite_parser(__file__, __doc__)
    ap.add_argument("--only", default=",".join(RECIPES), help="recipes (tv, deit)")
    ap.add_argument("--kinds", default=",".join(KINDS))
    ap.add_argument("--json", default=str(RESULTS / "recipes.json"))
    a = ap.parse_args(argv)
    cpus, workers = _bench.suite_cpus(a)
    names = [f"{k}-{r}" for r in a.only.split(",") if r for k in a.kinds.split(",") if k]
    results = run_cpu_suite(
        names,
        a.data,
        cpus,
        rounds=a.rounds,
        runner=run_isolated,
        workers=workers,
        dtype="float32",
        epochs=a.epochs,
    )
    by = {m.key: m for m in results}
    doc: dict[str, Any] = suite_doc(a.data, cpus, workers)
    for rec in a.only.split(","):
        ours, ref = by.get(f"trdata-{rec}"), by.get(f"torch-v2-{rec}")
        print(f"\n{rec} ({workers} workers on CPUs {cpus}, float32 NCHW, batch 64):")
        for m in (by[f"{k}-{rec}"] for k in a.kinds.split(",") if f"{k}-{rec}" in by):
            if m.error:
                print(f"  {m.name:<44} {m.error}")
                continue
            ratio = f"trdata ÷ it {ours.img_per_s / m.img_per_s:5.2f}" if ours and not ours.error else ""
            print(f"  {m.name:<44} {m.img_per_s:>8,.0f} img/s  {ratio}")
        if ours and ref and not ours.error and not ref.error:
            doc[f"target_{rec}"] = round(ours.img_per_s / ref.img_per_s, 3)
            print(f"  target: trdata ÷ torch-v2 {doc[f'target_{rec}']:.2f} (≥ 2.5)")
    doc["contenders"] = [m.to_json() for m in results]
    write_json(a.json, doc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
