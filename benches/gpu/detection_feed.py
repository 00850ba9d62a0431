#!/usr/bin/env python3
"""torchvision's eager detectors on the GPU fed by trdata vs torch DataLoader + CocoDetection + v2, against the
synthetic-data rate, in one run on the same generated COCO-style set (the ImageNet sample's images, COCO-sized:
longest side at most ``--max-side`` 640, 2-6 boxes with polygons each) — the detection target of the GPU box.

For each model (``retinanet_resnet50_fpn``, ``fasterrcnn_mobilenet_v3_large_fpn``; from scratch, 91 classes,
train mode, SGD, bf16 autocast, batch 16) and recipe (``hflip``: the images at their own sizes, horizontal flip;
``lsj``: ScaleJitter((1024, 1024)) + RandomCrop(1024, pad_if_needed=True) + flip + SanitizeBoundingBoxes):

- ``synthetic``: batches of the same recipe and images made ahead by a trdata loader with another seed
  (``--warmup`` + ``--steps`` batches, real sizes and targets) kept on the GPU and trained on — the model's rate on
  such inputs with no loader at all. Another seed, not the ``trdata`` row's own batches: the eager detectors pay
  for every batch shape they have not seen yet (cuDNN's per-shape plans, the allocator), so a row that replays
  shapes an earlier row already showed the model is faster than the same work seen first; with another seed every
  row meets new shapes at the same rate, as in training. (Earlier runs cycled 8 batches, or replayed the trdata
  row's batches: the first made the ceiling too fast, the second made the synthetic row, which ran first, pay for
  every shape the trdata row then reused);
- ``trdata``: ``CocoDetection`` on a CUDA loader (hflip with ``pad_to`` the largest image rounded up to 32; the
  images are the slots' ``[:h, :w]`` views), targets delivered on the GPU; ``--decode gpu`` (the default) decodes
  the JPEGs with nvJPEG where the recipe allows it (the loader says so with a ConfigError otherwise, and the row
  then decodes on the CPU: ``decode`` in the row says which);
- ``dataloader``: DataLoader(``--workers``, pin_memory) over torchvision's ``CocoDetection`` +
  ``wrap_dataset_for_transforms_v2`` + the same v2 recipe, images and targets moved to the GPU.

Each row: ``--warmup`` steps, then ``--steps`` timed steps; img/s, its ratio to synthetic, and the cores busy
(all CPUs' busy time from /proc/stat over the window, so a DataLoader's worker processes count). The synthetic row
runs again after both loaders and the faster of its two runs is the ceiling (the first row also pays for the
model's warm-up). The model's first row warms it up for ``--model-warmup`` steps. The loader's own CPU: the CPU time of
trdata's threads, or of the DataLoader's worker processes, over the window, per image delivered —
``*_loader_cpu_ms_per_img`` and their ratio (the DataLoader's pin-memory thread is not counted: that favours it).

    python benches/gpu/detection_feed.py [--data DIR] [--limit 300] [--steps 25] [--workers 15] [--out FILE]
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

BATCH = 16


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


def trdata_recipe(recipe: str) -> list[Any]:
    import trdata as t

    if recipe == "hflip":
        return [t.RandomHorizontalFlip()]
    return [t.ScaleJitter((1024, 1024)), t.RandomCrop(1024, pad_if_needed=True), t.RandomHorizontalFlip(),
            t.SanitizeBoundingBoxes()]  # fmt: skip


def torchvision_recipe(recipe: str) -> Any:
    import torch
    from torchvision.transforms import v2

    steps = [v2.PILToTensor()]
    if recipe == "hflip":
        steps += [v2.RandomHorizontalFlip()]
    else:
        steps += [v2.ScaleJitter((1024, 1024), antialias=True), v2.RandomCrop(1024, pad_if_needed=True),
                  v2.RandomHorizontalFlip(), v2.SanitizeBoundingBoxes()]  # fmt: skip
    return v2.Compose([*steps, v2.ToDtype(torch.float32, scale=True)])


class TrdataFeed:
    def __init__(
        self, images: str, ann: str, recipe: str, pad_to: tuple[int, int], device: str, seed: int, decode: str
    ) -> None:
        import trdata

        src = trdata.CocoDetection(images, ann)
        kw = dict(
            batch_size=BATCH, transforms=trdata_recipe(recipe), device=device, dtype="float32", normalize=None,
            shuffle=True, pad_to=pad_to if recipe == "hflip" else None, last_batch="drop", seed=seed,
        )  # fmt: skip
        try:
            self.loader, self.decode = trdata.Loader(src, decode=decode, **kw), decode
        except trdata.ConfigError as e:
            print(f"  decode={decode!r} refused for {recipe} ({e}); decoding on the CPU", flush=True)
            self.loader, self.decode = trdata.Loader(src, **kw), "cpu"
        self.it = iter(self.loader)

    def __next__(self) -> tuple[list[Any], list[dict[str, Any]]]:
        try:
            b = next(self.it)
        except StopIteration:
            self.it = iter(self.loader)
            b = next(self.it)
        import torch

        x = (
            b.images if isinstance(b.images, torch.Tensor) else torch.from_numpy(b.images)
        )  # CUDA: torch already
        imgs = [x[i, :, :h, :w] for i, (h, w) in enumerate(b.image_sizes.tolist())]
        return imgs, [{"boxes": t["boxes"], "labels": t["labels"]} for t in b.targets]

    def close(self) -> None:
        self.loader.close()


class DataLoaderFeed:
    def __init__(self, images: str, ann: str, recipe: str, workers: int, device: str) -> None:
        import torch
        from torchvision.datasets import CocoDetection, wrap_dataset_for_transforms_v2

        ds = wrap_dataset_for_transforms_v2(
            CocoDetection(images, ann, transforms=torchvision_recipe(recipe)), target_keys={"boxes", "labels"}
        )
        self.loader = torch.utils.data.DataLoader(
            ds, batch_size=BATCH, shuffle=True, num_workers=workers, pin_memory=True, drop_last=True,
            persistent_workers=True, collate_fn=lambda b: tuple(zip(*b)),
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
    kept on the GPU as compact tensors and given in the same order (then again from the start)."""

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

    def close(self) -> None:
        pass


def make_model(name: str, device: str) -> Any:
    import torch
    import torchvision

    ctor = {
        "retinanet": torchvision.models.detection.retinanet_resnet50_fpn,
        "fasterrcnn": torchvision.models.detection.fasterrcnn_mobilenet_v3_large_fpn,
    }[name]
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
    args = ap.parse_args()
    import torch

    torch.backends.cudnn.benchmark = False
    paths, _ = folder_files(str(args.data))
    paths = paths[: args.limit or None]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        images, ann = write_coco(paths, tmp, max_side=args.max_side)
        sizes = json.load(open(ann))["images"]
        up = lambda v: (v + 31) // 32 * 32  # noqa: E731
        pad_to = (up(max(i["height"] for i in sizes)), up(max(i["width"] for i in sizes)))
        print(
            f"{len(paths)} images, pad_to {pad_to}, batch {BATCH}, {args.workers} DataLoader workers",
            flush=True,
        )
        for model_name in args.models.split(","):
            for recipe in args.recipes.split(","):
                model, opt = make_model(model_name, args.device)
                ahead = TrdataFeed(images, ann, recipe, pad_to, args.device, seed=8, decode="cpu")
                synthetic = SyntheticFeed(ahead, args.warmup * 4 + args.steps)
                ahead.close()
                tr = TrdataFeed(images, ann, recipe, pad_to, args.device, seed=7, decode=args.decode)
                feeds = [("synthetic", synthetic), ("trdata", tr)]
                res: dict[str, Any] = {}
                for name, feed in feeds:
                    # the model's first row also warms it up: with images at their own sizes (hflip) its step keeps
                    # getting faster for ~100 steps (the caching allocator meeting new shapes), so a long one
                    warmup = args.model_warmup if name == "synthetic" else args.warmup
                    res[name] = run(feed, model, opt, args.steps, warmup)
                    print(f"{model_name:<10} {recipe:<5} {name:<10} {res[name]}", flush=True)
                res["trdata"]["decode"] = tr.decode
                tr.close()
                dl = DataLoaderFeed(images, ann, recipe, args.workers, args.device)
                res["dataloader"] = run(dl, model, opt, args.steps, args.warmup)
                print(f"{model_name:<10} {recipe:<5} {'dataloader':<10} {res['dataloader']}", flush=True)
                dl.close()
                # the ceiling measured again after both loaders: the first row pays for the model's warm-up
                # (the caching allocator meeting a stream of new batch shapes), so the faster of the two is taken
                res["synthetic_after"] = run(synthetic, model, opt, args.steps, args.warmup)
                print(
                    f"{model_name:<10} {recipe:<5} {'synth again':<10} {res['synthetic_after']}", flush=True
                )
                if res["synthetic_after"]["img_per_s"] > res["synthetic"]["img_per_s"]:
                    res["synthetic_first"], res["synthetic"] = res["synthetic"], res["synthetic_after"]
                del res["synthetic_after"]
                syn = res["synthetic"]["img_per_s"]
                row = {"model": model_name, "recipe": recipe, **{k: v for k, v in res.items()}}
                row["trdata_vs_synthetic"] = round(res["trdata"]["img_per_s"] / syn, 3)
                row["dataloader_vs_synthetic"] = round(res["dataloader"]["img_per_s"] / syn, 3)
                # the loader's own CPU per image (its threads and worker processes, loader_cpu_seconds)
                for name in ("trdata", "dataloader"):
                    cpu = res[name]["loader_cpu_seconds"]
                    row[f"{name}_loader_cpu_ms_per_img"] = round(1000 * cpu / res[name]["images"], 2)
                row["loader_cpu_ratio"] = round(
                    row["trdata_loader_cpu_ms_per_img"] / max(row["dataloader_loader_cpu_ms_per_img"], 1e-9),
                    3,
                )
                print(
                    f"  → trdata {row['trdata_vs_synthetic']}× synthetic ({res['trdata']['cores_busy']} cores), "
                    f"DataLoader {row['dataloader_vs_synthetic']}× ({res['dataloader']['cores_busy']} cores); loader CPU "
                    f"{row['trdata_loader_cpu_ms_per_img']} vs {row['dataloader_loader_cpu_ms_per_img']} ms/img "
                    f"({row['loader_cpu_ratio']}×)",
                    flush=True,
                )
                rows.append(row)
                del model, opt
                if args.device == "cuda":
                    torch.cuda.empty_cache()
    if args.out:
        args.out.write_text(json.dumps({"rows": rows, "torch": torch.__version__}, indent=1))


if __name__ == "__main__":
    main()
