"""The peers trdata is compared with, run in this process or in a fresh one (benches/peers/peers.py, throughput.py,
packed.py, recipes.py).

Every peer runs the standard pipeline (``_bench.PIPELINE``: RandomResizedCrop(224) + RandomHorizontalFlip +
ImageNet normalize → float16 NCHW) on the same files and CPUs as trdata:

  torch-v2          torch DataLoader (worker processes) + torchvision.io.decode_jpeg + transforms.v2
  torch-pil         torch DataLoader + torchvision.datasets.ImageFolder + classic PIL transforms
  pillow-threads    a Pillow thread pool (full decode, no draft mode) + numpy normalize
  dali              NVIDIA DALI CPU-only pipeline

A peer whose modules are missing becomes a "not installed" row (``make bench-peers`` installs torch,
torchvision and DALI). trdata and the decode ceiling are the package's own contenders (``trdata._bench``).
``run_isolated`` runs a peer in ``CHILD`` (``benches/peers/peers.py child KEY …``, which calls ``child_main``).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from trdata import _bench
from trdata._bench import CROP, Measurement, time_epochs

from common import IMAGENET_MEAN, IMAGENET_STD

#: The peer contenders' keys, in report order.
PEERS = ("torch-v2", "torch-pil", "pillow-threads", "dali")
#: Every key ``run_contender`` accepts (``decode-N``: any N ≥ 1).
CONTENDERS = (*PEERS, *_bench.CONTENDERS)
_DISPLAY = {
    "torch-v2": "torch DataLoader + v2",
    "torch-pil": "torch DataLoader + PIL (classic)",
    "pillow-threads": "Pillow thread pool",
    "dali": "DALI CPU pipeline",
}
#: Python modules a peer needs; a missing one turns the row into "not installed".
REQUIRES = {
    "torch-v2": ("torch", "torchvision"),
    "torch-pil": ("torch", "torchvision", "PIL"),
    "pillow-threads": ("PIL",),
    "dali": ("nvidia.dali",),
}


def display_name(key: str) -> str:
    """Table name of contender ``key`` (peers here, the rest from ``_bench``)."""
    return _DISPLAY.get(key) or _bench.display_name(key)


# ----------------------------------------------------------------------------------------------------------
# The peers (imported lazily: torch/torchvision/DALI are optional)
# ----------------------------------------------------------------------------------------------------------


def _torch_worker_init(_worker_id: int) -> None:
    # torch's DataLoader already does this in each worker; explicit so the rule is visible and kept.
    import torch

    torch.set_num_threads(1)


def torch_epochs(dataset: Any, *, batch_size: int, workers: int) -> Callable[[int], Iterator[int]]:
    """Epoch runner of a torch DataLoader (persistent workers, shuffled, default prefetch, no pinning)."""
    import torch
    from torch.utils.data import DataLoader

    generator = torch.Generator()
    loader = DataLoader(
        dataset,
        batch_size=batch_size,
        shuffle=True,
        num_workers=workers,
        persistent_workers=workers > 0,
        worker_init_fn=_torch_worker_init if workers > 0 else None,
        pin_memory=False,
        drop_last=False,
        generator=generator,
    )

    def epoch_batches(e: int) -> Iterator[int]:
        generator.manual_seed(e)
        for _images, labels in loader:
            yield int(labels.shape[0])

    return epoch_batches


def torch_v2_transform() -> Any:
    """The standard pipeline as transforms.v2 over a decoded uint8 CHW tensor: RandomResizedCrop(224, antialias) +
    flip + ImageNet normalize → float16 (the torch-v2 peer's; LitData's in peers/streaming.py)."""
    import torch
    from torchvision.transforms import v2

    return v2.Compose(
        [
            v2.RandomResizedCrop(CROP, antialias=True),
            v2.RandomHorizontalFlip(),
            v2.ToDtype(torch.float32, scale=True),
            v2.Normalize(IMAGENET_MEAN, IMAGENET_STD),
            v2.ToDtype(torch.float16),
        ]
    )


class _TorchV2Dataset:
    """(path, label) → torchvision.io.decode_jpeg + v2 transforms (the modern torchvision recipe)."""

    def __init__(self, paths: Sequence[str], labels: Sequence[int]) -> None:
        self.paths, self.labels = list(paths), list(labels)
        self.transform = torch_v2_transform()

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, i: int) -> tuple[Any, int]:
        from torchvision.io import ImageReadMode, decode_jpeg, read_file

        image = decode_jpeg(read_file(self.paths[i]), mode=ImageReadMode.RGB)
        return self.transform(image), self.labels[i]


def torch_v2_contender(
    paths: Sequence[str], labels: Sequence[int], *, batch_size: int, workers: int, **timing: Any
) -> Measurement:
    """torch DataLoader + torchvision.io.decode_jpeg + transforms.v2, float16 NCHW."""
    import torchvision

    run = torch_epochs(_TorchV2Dataset(paths, labels), batch_size=batch_size, workers=workers)
    m = time_epochs(display_name("torch-v2"), run, len(paths), **timing)
    m.note = f"torchvision {torchvision.__version__}; decode_jpeg + transforms.v2; {workers} worker processes"
    return m


def torch_pil_contender(
    root: str, n_files: int, *, batch_size: int, workers: int, **timing: Any
) -> Measurement:
    """The classic recipe: torchvision.datasets.ImageFolder (PIL) + transforms RandomResizedCrop/ToTensor/
    Normalize (+ a cast to float16 so the output matches)."""
    import torch
    import torchvision
    from torchvision import datasets, transforms

    dataset = datasets.ImageFolder(
        root,
        transform=transforms.Compose(
            [
                transforms.RandomResizedCrop(CROP),
                transforms.RandomHorizontalFlip(),
                transforms.ToTensor(),
                transforms.Normalize(IMAGENET_MEAN, IMAGENET_STD),
                transforms.ConvertImageDtype(torch.float16),
            ]
        ),
    )
    run = torch_epochs(dataset, batch_size=batch_size, workers=workers)
    m = time_epochs(display_name("torch-pil"), run, len(dataset), **timing)
    m.note = (
        f"torchvision {torchvision.__version__}; ImageFolder + PIL transforms; {workers} worker processes"
    )
    if len(dataset) != n_files:
        m.note += f" (ImageFolder found {len(dataset)} files, trdata {n_files})"
    return m


def _rrc_params(rng: Any, width: int, height: int) -> tuple[int, int, int, int]:
    """torchvision's RandomResizedCrop.get_params (scale (0.08, 1), ratio (3/4, 4/3), 10 tries, then centre)."""
    import math

    area = width * height
    log_lo, log_hi = math.log(3 / 4), math.log(4 / 3)
    for _ in range(10):
        target = area * rng.uniform(0.08, 1.0)
        aspect = math.exp(rng.uniform(log_lo, log_hi))
        w = round(math.sqrt(target * aspect))
        h = round(math.sqrt(target / aspect))
        if 0 < w <= width and 0 < h <= height:
            return rng.randint(0, width - w), rng.randint(0, height - h), w, h
    ratio = width / height
    if ratio < 3 / 4:
        w, h = width, round(width / (3 / 4))
    elif ratio > 4 / 3:
        w, h = round(height * (4 / 3)), height
    else:
        w, h = width, height
    return (width - w) // 2, (height - h) // 2, w, h


def pillow_threads_contender(
    paths: Sequence[str], labels: Sequence[int], *, batch_size: int, workers: int, **timing: Any
) -> Measurement:
    """A Pillow thread pool: open → convert('RGB') (full decode, no draft) → RRC as one resize(box=…) →
    flip → numpy normalize → float16 NCHW written into a batch buffer; two batches in flight."""
    import random
    from concurrent.futures import ThreadPoolExecutor

    import numpy as np
    import PIL
    from PIL import Image

    n = len(paths)
    scale = (1.0 / (255.0 * np.asarray(IMAGENET_STD, dtype=np.float32))).reshape(1, 1, 3)
    shift = (
        np.asarray(IMAGENET_MEAN, dtype=np.float32) / np.asarray(IMAGENET_STD, dtype=np.float32)
    ).reshape(1, 1, 3)
    ring = [np.empty((batch_size, 3, CROP, CROP), dtype=np.float16) for _ in range(3)]

    def load(epoch: int, index: int, out: np.ndarray) -> None:
        rng = random.Random((epoch << 32) ^ index)
        with Image.open(paths[index]) as im:
            im = im.convert("RGB")
            x, y, w, h = _rrc_params(rng, im.width, im.height)
            im = im.resize((CROP, CROP), Image.Resampling.BILINEAR, box=(x, y, x + w, y + h))
        if rng.random() < 0.5:
            im = im.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
        a = np.asarray(im, dtype=np.float32)
        np.multiply(a, scale, out=a)
        np.subtract(a, shift, out=a)
        out[...] = a.transpose(2, 0, 1)

    pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="pil")

    def epoch_batches(e: int) -> Iterator[int]:
        order = np.random.default_rng(e).permutation(n)
        batches = [order[i : i + batch_size] for i in range(0, n, batch_size)]
        pending: list[list[Any]] = []

        def submit(b: int) -> None:
            buf = ring[b % len(ring)]
            pending.append([pool.submit(load, e, int(idx), buf[k]) for k, idx in enumerate(batches[b])])

        for b in range(min(2, len(batches))):
            submit(b)
        for b in range(len(batches)):
            for f in pending.pop(0):
                f.result()
            if b + 2 < len(batches):
                submit(b + 2)
            yield len(batches[b])

    try:
        m = time_epochs(display_name("pillow-threads"), epoch_batches, n, **timing)
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    m.note = f"Pillow {PIL.__version__}; {workers} threads; numpy normalize"
    return m


def dali_normalize(images: Any, dtype: Any) -> Any:
    """Inside a DALI pipeline: a random horizontal flip (p 0.5) + ImageNet normalize → ``dtype`` CHW."""
    from nvidia.dali import fn

    return fn.crop_mirror_normalize(
        images,
        dtype=dtype,
        output_layout="CHW",
        mean=[v * 255 for v in IMAGENET_MEAN],
        std=[v * 255 for v in IMAGENET_STD],
        mirror=fn.random.coin_flip(probability=0.5),
    )


def time_dali(
    label: str, pipe: Any, files: int, *, batch_size: int, workers: int, **timing: Any
) -> Measurement:
    """Build the CPU-only DALI pipeline ``pipe`` (a ``@pipeline_def``: device_id=None, seed 0, prefetch 2, ``workers``
    threads) and time epochs of ceil(files / batch_size) ``run()`` calls: the reader wraps around epochs inside
    batches, every run() is batch_size decoded images."""
    p = pipe(batch_size=batch_size, num_threads=workers, device_id=None, seed=0, prefetch_queue_depth=2)
    p.build()
    iterations = -(-files // batch_size)

    def epoch_batches(_e: int) -> Iterator[int]:
        for _ in range(iterations):
            p.run()
            yield batch_size

    return time_epochs(label, epoch_batches, iterations * batch_size, **timing)


def dali_contender(
    paths: Sequence[str], labels: Sequence[int], *, batch_size: int, workers: int, **timing: Any
) -> Measurement:
    """NVIDIA DALI, CPU-only pipeline (device_id=None): file reader → decoders.image_random_crop (ROI decode)
    → resize(antialias) → crop_mirror_normalize(float16, CHW)."""
    from nvidia import dali
    from nvidia.dali import fn, pipeline_def, types

    @pipeline_def
    def pipe() -> Any:
        jpegs, labs = fn.readers.file(
            files=list(paths), labels=list(labels), random_shuffle=True, name="reader"
        )
        images = fn.decoders.image_random_crop(
            jpegs,
            device="cpu",
            output_type=types.RGB,
            random_area=[0.08, 1.0],
            random_aspect_ratio=[3 / 4, 4 / 3],
            num_attempts=10,
        )
        images = fn.resize(images, resize_x=CROP, resize_y=CROP, antialias=True)
        return dali_normalize(images, types.FLOAT16), labs

    m = time_dali(display_name("dali"), pipe, len(paths), batch_size=batch_size, workers=workers, **timing)
    m.note = f"DALI {dali.__version__}; CPU-only (device_id=None); {workers} threads"
    return m


# ----------------------------------------------------------------------------------------------------------
# Running them: in this process, in a fresh one, as a suite
# ----------------------------------------------------------------------------------------------------------


def run_contender(
    name: str, root: str, *, batch_size: int = 64, workers: int = 2, **timing: Any
) -> Measurement:
    """Run one contender in this process: a peer here, anything else through ``_bench.run_contender`` (whose
    options ``timing`` holds: epochs, warmup, seconds, progress, and dtype, which the peers ignore)."""
    if name not in PEERS:
        return _bench.run_contender(name, root, batch_size=batch_size, workers=workers, **timing)
    timing.pop("dtype", None)
    paths, labels = _bench.image_folder_files(root)
    if name == "torch-v2":
        return torch_v2_contender(paths, labels, batch_size=batch_size, workers=workers, **timing)
    if name == "torch-pil":
        return torch_pil_contender(root, len(paths), batch_size=batch_size, workers=workers, **timing)
    if name == "pillow-threads":
        return pillow_threads_contender(paths, labels, batch_size=batch_size, workers=workers, **timing)
    return dali_contender(paths, labels, batch_size=batch_size, workers=workers, **timing)


def missing_modules(name: str) -> list[str]:
    """The modules of ``REQUIRES[name]`` that cannot be imported here."""
    import importlib.util

    missing = []
    for mod in REQUIRES.get(name, ()):
        try:
            if importlib.util.find_spec(mod) is None:
                missing.append(mod)
        except (ImportError, ValueError):
            missing.append(mod)
    return missing


#: The command that runs one peer in a fresh process: the peers script's ``child`` mode (``child_main`` below).
CHILD = (sys.executable, str(Path(__file__).resolve().parents[1] / "peers" / "peers.py"), "child")


def run_isolated(name: str, root: str, cpus: Sequence[int], **options: Any) -> Measurement:
    """``_bench.run_isolated`` for every contender (``_bench.run_suite(runner=run_isolated)``): a peer runs in
    ``CHILD``, or becomes a "not installed" row; trdata and decode-N run in the package's child."""
    if name not in PEERS:
        return _bench.run_isolated(name, root, cpus, **options)
    missing = missing_modules(name)
    if missing:
        return Measurement(name=display_name(name), key=name, error=f"not installed ({', '.join(missing)})")
    return _bench.run_isolated(name, root, cpus, child=CHILD, label=display_name(name), **options)


def child_main(argv: Sequence[str]) -> int:
    """``child CONTENDER ...``: one contender (a peer, trdata or decode-N) in this fresh process."""
    return _bench.child_main(
        list(argv), run=run_contender, prog="benches/peers/peers.py child", contenders=CONTENDERS
    )
