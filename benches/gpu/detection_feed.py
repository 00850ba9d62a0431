#!/usr/bin/env python3
"""torchvision's eager detectors on the GPU fed by trdata vs torch DataLoader + CocoDetection + v2, against the
synthetic-data rate, in one run on the same generated COCO-style set (the ImageNet sample's images, COCO-sized:
longest side at most ``--max-side`` 640, 2-6 boxes with polygons each) — the detection target of the GPU box.

For each model (``--models``: ``retinanet`` = ``retinanet_resnet50_fpn``, ``fasterrcnn`` =
``fasterrcnn_mobilenet_v3_large_fpn``, ``ssdlite`` = ``ssdlite320_mobilenet_v3_large``; from scratch, 91 classes,
train mode, SGD, bf16 autocast; batch ``--batch``, by default 64 for ssdlite and 16 for the others) and recipe
(``--recipes``):

- ``hflip``: the images at their own sizes, horizontal flip;
- ``lsj``: ScaleJitter((1024, 1024)) + RandomCrop(1024, pad_if_needed=True) + flip + SanitizeBoundingBoxes;
- ``ssdlite``: torchvision's references' ``ssdlite`` preset (RandomIoUCrop, RandomHorizontalFlip, then its common
  tail: to float, SanitizeBoundingBoxes), then Resize((320, 320)) on both sides — SSDlite320's input, which its
  model would otherwise resize to — so that trdata's batches are one size (as the CPU bench's ``ssd`` recipe,
  benches/peers/detection.py). The fast detector where the loader matters: at batch 64 it takes far more images a
  second than the eager detectors above.

- ``synthetic``: batches of the same recipe and images made ahead by a trdata loader with another seed
  (``--warmup`` × 4 + ``--steps`` batches, real sizes and targets) kept on the GPU and trained on — the model's rate
  on such inputs with no loader at all. The model's first row warms it up for ``--model-warmup`` steps, which cycle
  these batches: the timed window then replays batches (and so batch shapes) the model has met, as in a long
  training, where every shape of a finite dataset has been met. It runs again after the loaders and the faster of
  its two runs is the ceiling;
- ``synthetic_first_sight``: batches of a third seed, made ahead and kept on the GPU like ``synthetic``'s, each shown
  once: the same work as ``synthetic`` with no loader, but every batch new to the model. The eager detectors pay
  for every batch shape they have not met (cuDNN's per-shape plans, the caching allocator's new block sizes), so this
  row measures that cost apart from any loader;
- ``synthetic_copies``: ``synthetic``'s batches given as new tensors each step (a clone of each), as a loader gives
  them: the cost of fresh input tensors apart from any loader;
- ``trdata``: ``CocoDetection`` on a CUDA loader (hflip with ``pad_to`` the largest image rounded up to 32; the
  images are ``batch.image_list()``, the slots' ``[:h, :w]`` views), targets delivered on the GPU; ``--decode
  gpu`` (the default) decodes the JPEGs with nvJPEG where the recipe allows it (the loader says so with a
  ConfigError otherwise, and the row then decodes on the CPU: ``decode`` in the row says which). Its batches are
  new to the model, as ``synthetic_first_sight``'s are;
- ``trdata_again``: a new loader of the same seed, so the same batches again: the loader's rate on batches the model
  has met, as ``synthetic``'s are (the steady state of a long training);
- ``dataloader``: DataLoader(``--workers``, pin_memory, a seeded sampler) over torchvision's ``CocoDetection`` +
  ``wrap_dataset_for_transforms_v2`` + the same v2 recipe, images and targets moved to the GPU; ``dataloader_again``
  a new one with the same seed, as ``trdata_again``.

``--rows`` picks rows (``synthetic`` first; ``trdata`` and ``dataloader`` always). ``--repeat N`` lists each image
N times in the annotation file (new ids, the same files): at batch 64 the 300-image sample is 4 batches an epoch,
and both loaders pay for an epoch's start (the DataLoader's workers make whole batches), so the ssdlite rows run
with ``--repeat 20``; the eager detectors' rows keep 1. ``--out`` is written after each row (a pair not finished
is a row with ``"partial": true`` and the rows it has), so a run cut short keeps what it measured. Earlier
versions cycled 8 batches (too fast a ceiling) or replayed the trdata row's own batches as the ceiling (the row
that came second met shapes the first had shown the model).

Each row: ``--warmup`` steps, then ``--steps`` timed steps; img/s, its ratio to synthetic, and the cores busy
(all CPUs' busy time from /proc/stat over the window, so a DataLoader's worker processes count). The loader's own CPU: the CPU time of
trdata's threads, or of the DataLoader's worker processes, over the window, per image delivered —
``*_loader_cpu_ms_per_img`` and their ratio (the DataLoader's pin-memory thread is not counted: that favours it).

    python benches/gpu/detection_feed.py [--data DIR] [--limit 300] [--steps 40] [--workers 15] [--out FILE]
        [--models retinanet,fasterrcnn] [--recipes hflip,lsj] [--rows ...] [--batch N] [--repeat N]
    python benches/gpu/detection_feed.py --models ssdlite --recipes ssdlite --repeat 20
        --rows synthetic,trdata,dataloader
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benches/: the shared `common` package
from common import DEFAULT_DATA, folder_files  # noqa: E402
from common.coco import write_coco  # noqa: E402

#: Each model's batch size unless ``--batch`` says otherwise (the eager detectors': 16).
BATCH = {"ssdlite": 64}
#: The models (``--models``): torchvision's constructors, built from scratch with 91 classes.
MODELS = {
    "retinanet": "retinanet_resnet50_fpn",
    "fasterrcnn": "fasterrcnn_mobilenet_v3_large_fpn",
    "ssdlite": "ssdlite320_mobilenet_v3_large",
}
#: The recipes (``--recipes``; module docs).
RECIPES = ("hflip", "lsj", "ssdlite")
#: The ssdlite recipe's output side: SSDlite320's input, which its model would otherwise resize to.
SSDLITE_SIZE = 320
#: The rows, in their default order (module docs).
ROWS = (
    "synthetic", "synthetic_first_sight", "synthetic_copies", "trdata", "trdata_again", "dataloader",
    "dataloader_again",
)  # fmt: skip


def loader_cpu_seconds() -> float:
    """CPU seconds of the loaders' own threads and processes: this process's ``trdata-*`` threads (workers, H2D,
    nvJPEG) and every descendant process (a DataLoader's workers, all their threads). A DataLoader's pin-memory
    thread is not counted (a Python thread without a name of its own), which favours the DataLoader."""
    tick = os.sysconf("SC_CLK_TCK")

    def ticks(stat_path: str) -> int:
        with open(stat_path) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return int(fields[11]) + int(fields[12])  # utime, stime

    me = os.getpid()
    total = 0
    for t in os.listdir(f"/proc/{me}/task"):
        try:
            with open(f"/proc/{me}/task/{t}/comm") as f:
                if f.read().startswith("trdata-"):
                    total += ticks(f"/proc/{me}/task/{t}/stat")
        except OSError:
            continue
    todo = [me]
    while todo:
        pid = todo.pop()
        for t in os.listdir(f"/proc/{pid}/task"):
            try:
                with open(f"/proc/{pid}/task/{t}/children") as f:
                    kids = [int(c) for c in f.read().split()]
            except OSError:
                continue
            for c in kids:
                try:
                    total += ticks(f"/proc/{c}/stat")
                except OSError:
                    continue
                todo.append(c)
    return total / tick


def busy_jiffies() -> tuple[int, int]:
    """(busy, total) jiffies of all CPUs (/proc/stat's first line)."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    idle = v[3] + v[4]
    return sum(v) - idle, sum(v)


def repeat_coco(ann: str, times: int) -> None:
    """Rewrite the COCO file ``ann`` with each image listed ``times`` times (new ids, the same file, its
    annotations copied): an epoch of ``times`` × the images, so that a large batch meets few epoch ends."""
    if times == 1:
        return
    with open(ann) as f:
        coco = json.load(f)
    n = len(coco["images"])
    images, annotations = [], []
    for r in range(times):
        images += [{**im, "id": im["id"] + r * n} for im in coco["images"]]
        for a in coco["annotations"]:
            annotations.append({**a, "id": len(annotations) + 1, "image_id": a["image_id"] + r * n})
    with open(ann, "w") as f:
        json.dump({**coco, "images": images, "annotations": annotations}, f)


def trdata_recipe(recipe: str) -> list[Any]:
    import trdata as t

    if recipe == "hflip":
        return [t.RandomHorizontalFlip()]
    if recipe == "ssdlite":
        return [t.RandomIoUCrop(), t.RandomHorizontalFlip(), t.SanitizeBoundingBoxes(),
                t.Resize((SSDLITE_SIZE, SSDLITE_SIZE))]  # fmt: skip
    return [t.ScaleJitter((1024, 1024)), t.RandomCrop(1024, pad_if_needed=True), t.RandomHorizontalFlip(),
            t.SanitizeBoundingBoxes()]  # fmt: skip


def torchvision_recipe(recipe: str) -> Any:
    import torch
    from torchvision.transforms import v2

    steps = [v2.PILToTensor()]
    if recipe == "hflip":
        steps += [v2.RandomHorizontalFlip()]
    elif recipe == "ssdlite":
        steps += [v2.RandomIoUCrop(), v2.RandomHorizontalFlip(), v2.SanitizeBoundingBoxes(),
                  v2.Resize((SSDLITE_SIZE, SSDLITE_SIZE), antialias=True)]  # fmt: skip
    else:
        steps += [v2.ScaleJitter((1024, 1024), antialias=True), v2.RandomCrop(1024, pad_if_needed=True),
                  v2.RandomHorizontalFlip(), v2.SanitizeBoundingBoxes()]  # fmt: skip
    return v2.Compose([*steps, v2.ToDtype(torch.float32, scale=True)])


class TrdataFeed:
    def __init__(
        self,
        images: str,
        ann: str,
        recipe: str,
        pad_to: tuple[int, int],
        device: str,
        seed: int,
        decode: str,
        batch: int,
    ) -> None:
        import trdata

        src = trdata.CocoDetection(images, ann)
        kw = dict(
            batch_size=batch, transforms=trdata_recipe(recipe), device=device, dtype="float32", normalize=None,
            shuffle=True, pad_to=pad_to if recipe == "hflip" else None, last_batch="drop", seed=seed,
        )  # fmt: skip
        try:
            self.loader, self.decode = trdata.Loader(src, decode=decode, **kw), decode
        except trdata.ConfigError as e:
            print(f"  decode={decode!r} refused for {recipe} ({e}); decoding on the CPU", flush=True)
            self.loader, self.decode = trdata.Loader(src, **kw), "cpu"
        self.it = iter(self.loader)

    def __next__(self) -> tuple[list[Any], list[dict[str, Any]]]:
        import torch

        try:
            b = next(self.it)
        except StopIteration:
            self.it = iter(self.loader)
            b = next(self.it)
        # each image at its own size (views of the batch's slots under pad_to; the rows whole otherwise), as
        # torchvision's detection models take them; targets as tensors (a CUDA loader's are on the GPU already)
        tensor = torch.as_tensor
        return b.image_list(), [
            {"boxes": tensor(t["boxes"]), "labels": tensor(t["labels"])} for t in b.targets
        ]

    def close(self) -> None:
        self.loader.close()


class DataLoaderFeed:
    def __init__(
        self, images: str, ann: str, recipe: str, workers: int, device: str, seed: int, batch: int
    ) -> None:
        import torch
        from torchvision.datasets import CocoDetection, wrap_dataset_for_transforms_v2

        ds = wrap_dataset_for_transforms_v2(
            CocoDetection(images, ann, transforms=torchvision_recipe(recipe)), target_keys={"boxes", "labels"}
        )
        self.loader = torch.utils.data.DataLoader(
            ds, batch_size=batch, shuffle=True, num_workers=workers, pin_memory=device.startswith("cuda"),
            drop_last=True, persistent_workers=workers > 0, collate_fn=lambda b: tuple(zip(*b)),
            generator=torch.Generator().manual_seed(seed),  # the same batches again from a new feed of this seed
        )  # fmt: skip
        self.it = iter(self.loader)
        self.device = device

    def __next__(self) -> tuple[list[Any], list[dict[str, Any]]]:
        try:
            imgs, targets = next(self.it)
        except StopIteration:
            self.it = iter(self.loader)
            imgs, targets = next(self.it)
        to = {"device": self.device, "non_blocking": True}
        imgs = [x.to(**to) for x in imgs]
        return imgs, [{k: v.to(**to) for k, v in t.items()} for t in targets]

    def close(self) -> None:
        it, self.it = self.it, None
        if it is not None and hasattr(it, "_shutdown_workers"):
            it._shutdown_workers()


class SyntheticFeed:
    """The first ``n`` batches of ``feed`` (real sizes and targets: a variable-size recipe's cost depends on them),
    kept on the GPU as compact tensors and given in the same order (then again from the start). ``copies()``: the
    same batches given as new tensors each step (a clone per tensor), as a loader gives them."""

    def __init__(self, feed: Any, n: int) -> None:
        self.batches = []
        for _ in range(n):
            imgs, targets = next(feed)
            self.batches.append(
                ([x.clone() for x in imgs], [{k: v.clone() for k, v in t.items()} for t in targets])
            )
        self.i = -1

    def __next__(self) -> tuple[list[Any], list[dict[str, Any]]]:
        self.i += 1
        return self.batches[self.i % len(self.batches)]

    def copies(self) -> Any:
        outer = self

        class Copies:
            def __next__(self) -> tuple[list[Any], list[dict[str, Any]]]:
                imgs, targets = next(outer)
                return [x.clone() for x in imgs], [{k: v.clone() for k, v in t.items()} for t in targets]

        return Copies()

    def close(self) -> None:
        pass


def make_model(name: str, device: str) -> Any:
    import torch
    import torchvision

    ctor = getattr(torchvision.models.detection, MODELS[name])
    model = ctor(weights=None, weights_backbone=None, num_classes=91).to(device).train()
    opt = torch.optim.SGD(model.parameters(), lr=0.001, momentum=0.9)
    return model, opt


def run(feed: Any, model: Any, opt: Any, steps: int, warmup: int) -> dict[str, Any]:
    import torch

    kind = next(model.parameters()).device.type
    sync = torch.cuda.synchronize if kind == "cuda" else (lambda: None)

    in_next = [0.0]  # seconds the training thread spent getting batches (the feed's own cost on that thread)

    def step() -> int:
        t = time.perf_counter()
        imgs, targets = next(feed)
        in_next[0] += time.perf_counter() - t
        with torch.autocast(kind, dtype=torch.bfloat16):
            loss = sum(model(imgs, targets).values())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return len(imgs)

    for _ in range(warmup):
        step()
    sync()
    b0, t0j = busy_jiffies()
    c0 = loader_cpu_seconds()
    t0 = time.perf_counter()
    in_next[0] = 0.0
    n = sum(step() for _ in range(steps))
    sync()
    wall = time.perf_counter() - t0
    c1 = loader_cpu_seconds()
    b1, t1j = busy_jiffies()
    ncpu = os.cpu_count() or 1
    cores = (b1 - b0) / max(t1j - t0j, 1) * ncpu
    return {
        "img_per_s": round(n / wall, 2),
        "seconds": round(wall, 2),
        "cores_busy": round(cores, 2),
        "cpu_seconds": round(cores * wall, 3),
        "loader_cpu_seconds": round(c1 - c0, 3),
        "next_ms_per_step": round(1000 * in_next[0] / steps, 2),
        "images": n,
    }


def measure_pair(
    args: Any,
    images: str,
    ann: str,
    pad_to: tuple[int, int],
    model_name: str,
    recipe: str,
    rows_wanted: list[str],
    save: Any = lambda partial: None,
) -> dict[str, Any]:
    """Every row of ``rows_wanted`` for one model and recipe, on one model instance (module docs). ``save`` gets
    the rows measured so far after each one, so that a run cut short keeps them."""
    model, opt = make_model(model_name, args.device)
    batch = args.batch or BATCH.get(model_name, 16)
    n_batches = args.warmup + args.steps  # what one row consumes

    def ahead(seed: int, n: int) -> SyntheticFeed:
        feed = TrdataFeed(images, ann, recipe, pad_to, args.device, seed=seed, decode="cpu", batch=batch)
        try:
            return SyntheticFeed(feed, n)
        finally:
            feed.close()

    synthetic = ahead(8, args.warmup * 4 + args.steps)
    res: dict[str, Any] = {}
    decode = [args.decode]

    def measure(name: str, feed: Any, warmup: int = args.warmup) -> None:
        res[name] = run(feed, model, opt, args.steps, warmup)
        save({"model": model_name, "recipe": recipe, "batch": batch, "partial": True, **res})
        print(f"{model_name:<10} {recipe:<7} {name:<22} {res[name]}", flush=True)

    def trdata_feed() -> TrdataFeed:
        feed = TrdataFeed(images, ann, recipe, pad_to, args.device, seed=7, decode=args.decode, batch=batch)
        decode[0] = feed.decode
        return feed

    for name in rows_wanted:
        if name == "synthetic":
            # the model's first row also warms it up: with images at their own sizes (hflip) its
            # step keeps getting faster for ~100 steps (new shapes), so a long one
            measure(name, synthetic, args.model_warmup)
        elif name == "synthetic_copies":
            measure(name, synthetic.copies())
        elif name == "synthetic_first_sight":
            measure(name, ahead(9, n_batches))  # resident batches, each shown once
        elif name in ("trdata", "trdata_again"):
            feed = trdata_feed()
            measure(name, feed)
            feed.close()
        elif name in ("dataloader", "dataloader_again"):
            feed = DataLoaderFeed(images, ann, recipe, args.workers, args.device, seed=11, batch=batch)
            measure(name, feed)
            feed.close()
    # the ceiling measured again after the loaders: the first row pays for the model's warm-up
    # (the caching allocator meeting a stream of new batch shapes), so the faster of the two is taken
    measure("synthetic_after", synthetic)
    if res["synthetic_after"]["img_per_s"] > res["synthetic"]["img_per_s"]:
        res["synthetic_first"], res["synthetic"] = res["synthetic"], res["synthetic_after"]
    del res["synthetic_after"]
    res["trdata"]["decode"] = decode[0]
    syn = res["synthetic"]["img_per_s"]
    row = {"model": model_name, "recipe": recipe, "batch": batch, **{k: v for k, v in res.items()}}
    for name in res:
        if name != "synthetic":
            row[f"{name}_vs_synthetic"] = round(res[name]["img_per_s"] / syn, 3)
    if "synthetic_first_sight" in res:  # the loaders' first pass against batches equally new
        first = res["synthetic_first_sight"]["img_per_s"]
        for name in ("trdata", "dataloader"):
            row[f"{name}_vs_first_sight"] = round(res[name]["img_per_s"] / first, 3)
    # the loader's own CPU per image (its threads and worker processes, loader_cpu_seconds)
    for name in ("trdata", "dataloader"):
        cpu = res[name]["loader_cpu_seconds"]
        row[f"{name}_loader_cpu_ms_per_img"] = round(1000 * cpu / res[name]["images"], 2)
    row["loader_cpu_ratio"] = round(
        row["trdata_loader_cpu_ms_per_img"] / max(row["dataloader_loader_cpu_ms_per_img"], 1e-9),
        3,
    )
    ratios = ", ".join(
        f"{k[: -len('_vs_synthetic')]} {v}×" for k, v in row.items() if k.endswith("_vs_synthetic")
    )
    print(f"  → vs synthetic: {ratios}", flush=True)
    print(
        f"  → trdata {row['trdata_vs_synthetic']}× synthetic ({res['trdata']['cores_busy']} cores), "
        f"DataLoader {row['dataloader_vs_synthetic']}× ({res['dataloader']['cores_busy']} cores); loader CPU "
        f"{row['trdata_loader_cpu_ms_per_img']} vs {row['dataloader_loader_cpu_ms_per_img']} ms/img "
        f"({row['loader_cpu_ratio']}×)",
        flush=True,
    )
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA)
    ap.add_argument("--limit", type=int, default=300)
    ap.add_argument("--models", default="retinanet,fasterrcnn")
    ap.add_argument("--recipes", default="hflip,lsj")
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument(
        "--model-warmup", type=int, default=120, help="steps of the model's first (synthetic) row"
    )
    ap.add_argument("--workers", type=int, default=15)
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--device", default="cuda")
    ap.add_argument(
        "--decode", default="gpu", help="the trdata row's decode= (gpu: nvJPEG where the recipe allows)"
    )
    ap.add_argument("--max-side", type=int, default=640, help="COCO-sized images: longest side at most this")
    ap.add_argument("--rows", default=",".join(ROWS), help="the rows, in this order (module docs)")
    ap.add_argument("--batch", type=int, default=0, help=f"batch size (0: the model's, {BATCH} or else 16)")
    ap.add_argument(
        "--repeat", type=int, default=1, help="each image this many times per epoch (module docs)"
    )
    args = ap.parse_args()
    if unknown := set(args.models.split(",")) - set(MODELS):
        ap.error(f"unknown models {sorted(unknown)}; known: {sorted(MODELS)}")
    if unknown := set(args.recipes.split(",")) - set(RECIPES):
        ap.error(f"unknown recipes {sorted(unknown)}; known: {RECIPES}")
    if args.batch < 0 or args.repeat < 1:
        ap.error("--batch is at least 0 (0: the model's) and --repeat at least 1")
    rows_wanted = args.rows.split(",")
    if rows_wanted[0] != "synthetic" or not {"trdata", "dataloader"} <= set(rows_wanted):
        ap.error("--rows starts with synthetic and holds trdata and dataloader")
    if unknown := set(rows_wanted) - set(ROWS):
        ap.error(f"unknown rows {sorted(unknown)}; known: {ROWS}")
    import torch

    torch.backends.cudnn.benchmark = False
    paths, _ = folder_files(str(args.data))
    paths = paths[: args.limit or None]
    rows: list[dict[str, Any]] = []

    def save(partial: dict[str, Any] | None) -> None:
        """``--out`` after each row (the pair's rows so far as a ``partial`` row): a run cut short keeps them."""
        if args.out:
            out = rows + ([partial] if partial else [])
            args.out.write_text(json.dumps({"rows": out, "torch": torch.__version__}, indent=1))

    with tempfile.TemporaryDirectory() as tmp:
        images, ann = write_coco(paths, tmp, max_side=args.max_side)
        repeat_coco(ann, args.repeat)
        sizes = json.load(open(ann))["images"]
        up = lambda v: (v + 31) // 32 * 32  # noqa: E731
        pad_to = (up(max(i["height"] for i in sizes)), up(max(i["width"] for i in sizes)))
        print(
            f"{len(paths)} images × {args.repeat}, pad_to {pad_to}, batch {args.batch or BATCH} (else 16), "
            f"{args.workers} DataLoader workers",
            flush=True,
        )
        for model_name in args.models.split(","):
            for recipe in args.recipes.split(","):
                rows.append(measure_pair(args, images, ann, pad_to, model_name, recipe, rows_wanted, save))
                save(None)
                if args.device == "cuda":
                    torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
