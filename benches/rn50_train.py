"""End-to-end: ResNet-50 training steps fed by trdata on the GPU vs torch DataLoader + torchvision v2 vs
synthetic data already on the GPU (the ceiling), in the same process, on the same files and cores.

    python benches/rn50_train.py --data ROOT [--steps 300] [--warmup 20] [--batch 256]
        [--configs synthetic,trdata,dataloader] [--workers N] [--dl-workers 16] [--repeat K] [--loader-only]
        [--model resnet50|resnet18] [--packed FILE] [--no-fused] [--deadline S] [--json out.json]

Model: torchvision resnet50 (or --model resnet18)(weights=None), channels_last, bf16 autocast, SGD(lr 0.1, momentum 0.9), cross
entropy over 1000 classes. One model/optimizer is shared by all configs (each config gets --warmup untimed
steps first, so cudnn autotuning and allocator growth fall outside every timed window).

Configs (comma-separated --configs):
  synthetic     4 pre-made bf16 channels_last batches on the GPU, cycled: the GPU-bound ceiling (with --mix,
                torchvision's RandomChoice([MixUp(0.2), CutMix(1.0)]) runs on each, the same GPU work as the loaders')
  trdata        trdata.Loader(device='cuda:0', dtype=bfloat16, layout=NHWC, normalize=IMAGENET), all
                allowed cores as workers (or --workers); NHWC is permuted to NCHW-logical/channels_last, no copy
  packed        trdata as above over trdata.Packed(--packed FILE, "full"); `packed-partial` streams it
                (mode="partial"). Make FILE with `trdata pack` (e.g. of the repeated sample, re-encoded)
  trdata-u8     the same with dtype=uint8; the cast + normalization run on the GPU in the training loop
  dataloader    torch DataLoader(--dl-workers procs, pin_memory, persistent, prefetch 2) + read_file →
                decode_jpeg (CPU) → v2 RandomResizedCrop(224, antialias) → flip → ToDtype(f32, scale) →
                Normalize; .cuda(non_blocking=True) then channels_last on the GPU
  NAME@N        any of the above with N workers (e.g. trdata@15, dataloader@12)

--loader-only runs the trdata*/dataloader feeds with no model (img/s of delivery into the GPU, same timing).

The sample is small (a few hundred files), so each loader iterates a list of the files repeated --repeat times
(one "virtual epoch" ≥ ~100 batches, shuffled), and loops over as many such epochs as the steps need. The
files sit in the page cache either way; repetition only keeps epoch boundaries as rare as on real ImageNet.

Data wait: host wall time spent obtaining the next device batch (next(iterator), plus for the DataLoader the
.cuda() issue), summed over the timed steps, over the timed wall time. No per-step synchronize: the host runs
at most a few launches ahead of the GPU, so when data is late the host blocks in next() and the GPU drains
(that blocked time is the starvation); when data is early next() returns at once. The timed window starts and
ends with torch.cuda.synchronize(). For trdata the loader's own meters are reported too (stats() deltas over
the timed window): consumer_wait_ns, h2d_ns, h2d_bytes, h2d_batches; H2D overlap = 1 - consumer_wait / total.

Reading the numbers: img/s against synthetic is the verdict; the data-wait fraction is a lower bound of what
the input pipeline costs, because loader threads/processes that saturate every core also slow the training
thread's kernel launches (time lost there shows up as a longer step, not as waiting in next()). trdata's
h2d ms/batch inside the training loop is copy issue → completion *including* the device-side wait for the
slot's previous batch to be released by the training stream, so it is far above the pure copy time (see the
loader-only number, or scaling.py's transfer table).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import torch
from _recipe import RECIPE_SIZE, repeats_for, train_loader

try:  # before anything starts CUDA: trdata's import sets CUDA_DEVICE_MAX_CONNECTIONS (docs/gpu_decode.md §18)
    import trdata  # noqa: F401
except ImportError:  # the peers-only and --dry runs work without it
    pass

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
ALL_CONFIGS = ("synthetic", "trdata", "dataloader")


def allowed_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover
        return os.cpu_count() or 1


def folder_files(root: str) -> tuple[list[str], list[int]]:
    """ImageFolder order (classes sorted, files sorted) through trdata's own scanner when importable."""
    try:
        import trdata

        src = trdata.ImageFolder(root)
        return list(src.paths), list(src.labels)
    except ImportError:
        classes = sorted(d for d in os.listdir(root) if os.path.isdir(os.path.join(root, d)))
        paths, labels = [], []
        for i, c in enumerate(classes):
            for f in sorted(os.listdir(os.path.join(root, c))):
                if f.lower().endswith((".jpg", ".jpeg", ".png")):
                    paths.append(os.path.join(root, c, f))
                    labels.append(i)
        return paths, labels


def repeated(paths: list[str], labels: list[int], repeat: int) -> tuple[list[str], list[int]]:
    return paths * repeat, labels * repeat


# ----------------------------------------------------------------------------------------------- model


def make_model(fused: bool, arch: str = "resnet50"):
    import torchvision

    model = (
        getattr(torchvision.models, arch)(weights=None, num_classes=1000)
        .cuda()
        .to(memory_format=torch.channels_last)
    )
    kw = {"lr": 0.1, "momentum": 0.9}
    if fused:
        try:
            opt = torch.optim.SGD(model.parameters(), fused=True, **kw)
        except (TypeError, RuntimeError):
            opt = torch.optim.SGD(model.parameters(), **kw)
    else:
        opt = torch.optim.SGD(model.parameters(), **kw)
    return model, opt


def train_step(model, opt, loss_fn, images, labels):
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = loss_fn(model(images), labels)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    return loss


# ---------------------------------------------------------------------------------------------- feeds
# Each feed is an endless iterator of (images NCHW-logical channels_last on cuda, labels int64 on cuda);
# the bench times each next() on the host. `close()` releases workers; `extra()` adds loader meters.


class SyntheticFeed:
    name = "synthetic"

    def __init__(self, batch: int, size: int = 224, mix: bool = False):
        g = torch.Generator(device="cuda").manual_seed(0)
        # --mix: the same GPU-side batch work as the loaders' runs (torchvision's reference
        # RandomChoice([MixUp(0.2), CutMix(1.0)]) on every batch), so the ceiling differs from them only in
        # where the data comes from.
        self.mix = None
        if mix:
            from torchvision.transforms import v2

            self.mix = v2.RandomChoice(
                [v2.MixUp(alpha=0.2, num_classes=1000), v2.CutMix(alpha=1.0, num_classes=1000)]
            )
        self.batches = []
        for _ in range(4):
            x = torch.randn(batch, 3, size, size, device="cuda", generator=g).to(torch.bfloat16)
            x = x.contiguous(memory_format=torch.channels_last)
            y = torch.randint(0, 1000, (batch,), device="cuda", generator=g)
            self.batches.append((x, y))
        self.i = 0

    def __iter__(self):
        return self

    def __next__(self):
        self.i += 1
        x, y = self.batches[self.i % len(self.batches)]
        return self.mix(x, y) if self.mix is not None else (x, y)

    def snapshot(self):
        return {}

    def extra(self, before, after, wall_ns):
        return {}

    def close(self):
        self.batches = []


def library_versions() -> dict:
    """torchvision's and trdata's versions for a bench header (absent libraries left out)."""
    out = {}
    for name in ("torchvision", "trdata"):
        try:
            out[name] = __import__(name).__version__
        except ImportError:
            pass
    return out


def mix_ops(labels, source):
    """--mix: torchvision's reference ImageNet recipe, RandomChoice([MixUp(alpha=0.2), CutMix(alpha=1.0)]), on
    the GPU batch; labels become soft (N, classes) float32, which CrossEntropyLoss takes as probabilities."""
    import trdata

    classes = 1000  # the model's outputs (the sample's labels are a subset)
    ops = [trdata.MixUp(alpha=0.2, num_classes=classes), trdata.CutMix(alpha=1.0, num_classes=classes)]
    return {"batch_ops": [trdata.RandomChoice(ops)]}


class TrdataFeed:
    def __init__(
        self,
        paths,
        labels,
        batch,
        workers,
        dtype,
        layout="NHWC",
        prefetch=2,
        device_slots=3,
        source=None,
        mix=False,
        recipe="rn50",
        **loader_kw,
    ):
        """``loader_kw``: further trdata.Loader keyword arguments (e.g. ``decode="auto"``, benches/gpu_feed.py)."""
        self.name = "trdata" if dtype == "bfloat16" else f"trdata-{'u8' if dtype == 'uint8' else dtype}"
        self.dtype = dtype
        self.layout = layout
        self.loader = train_loader(
            paths,
            labels,
            batch=batch,
            dtype=dtype,
            layout=layout,
            workers=workers,
            device="cuda:0",
            prefetch=prefetch,
            device_slots=device_slots,
            source=source,
            recipe=recipe,
            **(mix_ops(labels, source) if mix else {}),
            **loader_kw,
        )
        self.workers = workers
        self.it = iter(self.loader)
        if dtype == "uint8":
            self.mean = torch.tensor(IMAGENET_MEAN, device="cuda").mul(255).view(1, 3, 1, 1)
            self.inv_std = torch.tensor(IMAGENET_STD, device="cuda").mul(255).reciprocal().view(1, 3, 1, 1)

    def __iter__(self):
        return self

    def __next__(self):
        try:
            b = next(self.it)
        except StopIteration:  # next (virtual) epoch
            self.it = iter(self.loader)
            b = next(self.it)
        x, y = b.images, b.labels
        if self.layout == "NHWC":
            x = x.permute(0, 3, 1, 2)  # NCHW-logical, channels_last strides: no copy
        return x, y

    def prepare(self, x):
        """GPU-side work the uint8 path leaves to the training loop (done outside the data-wait timer)."""
        if self.dtype == "uint8":
            x = ((x.float() - self.mean) * self.inv_std).to(torch.bfloat16)
        return x

    def snapshot(self):
        return self.loader.stats()

    def extra(self, before, after, wall_ns):
        d = {
            k: after.get(k, 0) - before.get(k, 0)
            for k in (
                "consumer_wait_ns",
                "h2d_ns",
                "h2d_bytes",
                "h2d_batches",
                "h2d_wait_host_ns",
                "h2d_wait_slot_ns",
                "worker_wait_ns",
                "decode_ns",
                "augment_ns",
                "read_ns",
                "samples",
                "device_wait_ns",
            )
        }
        out = {
            "workers": self.loader.workers,
            "dtype": self.dtype,
            "stats_delta": d,
            "consumer_wait_frac": round(d["consumer_wait_ns"] / wall_ns, 4),
            "h2d_overlap": round(1 - d["consumer_wait_ns"] / wall_ns, 4),
        }
        if d["h2d_batches"]:
            out["h2d_ms_per_batch"] = round(d["h2d_ns"] / d["h2d_batches"] / 1e6, 3)
            out["h2d_bytes_per_batch"] = d["h2d_bytes"] // d["h2d_batches"]
            out["h2d_GBps_while_copying"] = round(d["h2d_bytes"] / max(1, d["h2d_ns"]), 2)
        return out

    def close(self):
        self.loader.close()


class _TorchFiles(torch.utils.data.Dataset):
    """(path, label) → read_file → decode_jpeg on the CPU → v2 RRC/flip/ToDtype/Normalize."""

    def __init__(self, paths, labels):
        from torchvision.transforms import v2

        self.paths, self.labels = paths, labels
        self.tf = v2.Compose(
            [
                v2.RandomResizedCrop(224, antialias=True),
                v2.RandomHorizontalFlip(),
                v2.ToDtype(torch.float32, scale=True),
                v2.Normalize(IMAGENET_MEAN, IMAGENET_STD),
            ]
        )

    def __len__(self):
        return len(self.paths)

    def __getitem__(self, i):
        from torchvision.io import ImageReadMode, decode_jpeg, read_file

        img = decode_jpeg(read_file(self.paths[i]), mode=ImageReadMode.RGB)
        return self.tf(img), self.labels[i]


class DataLoaderFeed:
    name = "dataloader"

    def __init__(self, paths, labels, batch, workers):
        self.workers = workers
        self.loader = torch.utils.data.DataLoader(
            _TorchFiles(paths, labels),
            batch_size=batch,
            shuffle=True,
            num_workers=workers,
            pin_memory=True,
            drop_last=True,
            persistent_workers=True,
            prefetch_factor=2,
        )
        self.it = iter(self.loader)

    def __iter__(self):
        return self

    def __next__(self):
        try:
            x, y = next(self.it)
        except StopIteration:
            self.it = iter(self.loader)
            x, y = next(self.it)
        x = x.cuda(non_blocking=True)
        y = y.cuda(non_blocking=True)
        return x, y

    def prepare(self, x):
        return x.contiguous(memory_format=torch.channels_last)  # on the GPU, outside the data-wait timer

    def snapshot(self):
        return {}

    def extra(self, before, after, wall_ns):
        return {"workers": self.workers, "pin_memory": True, "prefetch_factor": 2}

    def close(self):
        it, self.it = self.it, None
        if it is not None and hasattr(it, "_shutdown_workers"):
            it._shutdown_workers()
        self.loader = None


def run_config(feed, model, opt, loss_fn, steps, warmup):
    """Timed loop; model=None is the loader-only mode (each batch is delivered and prepared, no training)."""
    prepare = getattr(feed, "prepare", lambda x: x)
    if model is None:

        def train_step(_m, _o, _l, x, _y):  # loader-only: deliver + prepare, nothing else
            return None
    else:
        train_step = globals()["train_step"]
    # Warm-up (untimed): loader start, cudnn autotuning, allocator growth.
    for _ in range(warmup):
        x, y = next(feed)
        train_step(model, opt, loss_fn, prepare(x), y)
    torch.cuda.synchronize()
    before = feed.snapshot()
    wait_ns = 0
    max_wait_ns = 0
    pc = time.perf_counter_ns
    t0 = pc()
    loss = None
    for _ in range(steps):
        a = pc()
        x, y = next(feed)
        w = pc() - a
        wait_ns += w
        max_wait_ns = max(max_wait_ns, w)
        loss = train_step(model, opt, loss_fn, prepare(x), y)
    torch.cuda.synchronize()
    wall_ns = pc() - t0
    after = feed.snapshot()
    n = steps * x.shape[0]
    out = {
        "config": feed.name,
        "mode": "train" if model is not None else "loader-only",
        "steps": steps,
        "batch": int(x.shape[0]),
        "images": n,
        "seconds": round(wall_ns / 1e9, 3),
        "img_per_s": round(n / (wall_ns / 1e9), 1),
        "step_ms": round(wall_ns / steps / 1e6, 2),
        "data_wait_frac": round(wait_ns / wall_ns, 4),
        "data_wait_ms_per_step": round(wait_ns / steps / 1e6, 3),
        "max_wait_ms": round(max_wait_ns / 1e6, 2),
        "final_loss": float(loss.float().item()) if loss is not None else None,
        "input": f"{tuple(x.shape)} {str(x.dtype).replace('torch.', '')} "
        f"{'channels_last' if x.is_contiguous(memory_format=torch.channels_last) else 'contiguous'}",
    }
    out.update(feed.extra(before, after, wall_ns))
    return out


def fmt_table(results):
    by = {r["config"]: r for r in results}
    syn = by.get("synthetic")
    dl = by.get("dataloader")
    rows = [
        (
            "config",
            "img/s",
            "step ms",
            "data wait",
            "wait ms/step",
            "vs synthetic",
            "vs dataloader",
            "consumer_wait",
            "H2D overlap",
            "h2d ms/batch",
            "MB/batch",
        )
    ]
    for r in results:
        rows.append(
            (
                r["config"],
                f"{r['img_per_s']:.0f}",
                f"{r['step_ms']:.1f}",
                f"{100 * r['data_wait_frac']:.1f}%",
                f"{r['data_wait_ms_per_step']:.2f}",
                f"{r['img_per_s'] / syn['img_per_s']:.3f}" if syn else "-",
                f"{r['img_per_s'] / dl['img_per_s']:.2f}x" if dl else "-",
                f"{100 * r['consumer_wait_frac']:.1f}%" if "consumer_wait_frac" in r else "-",
                f"{100 * r['h2d_overlap']:.1f}%" if "h2d_overlap" in r else "-",
                f"{r['h2d_ms_per_batch']:.2f}" if "h2d_ms_per_batch" in r else "-",
                f"{r['h2d_bytes_per_batch'] / 1e6:.1f}" if "h2d_bytes_per_batch" in r else "-",
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = [
        "  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths)))
        for row in rows
    ]
    lines.insert(1, "-" * len(lines[0]))
    return "\n".join(lines)


def prepare(name, data, batch, repeat, min_batches=100):
    """The GPU benches' common start: CUDA's fast-math flags (cudnn.benchmark, TF32) and the folder's files, repeated
    ``repeat`` times (0: enough for >= ``min_batches`` batches) → (paths, labels, repeated paths, repeated labels,
    repeat); None after printing why when CUDA or the images are missing."""
    if not torch.cuda.is_available():
        print(f"{name}: CUDA is not available", file=sys.stderr)
        return None
    torch.backends.cudnn.benchmark = True
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    paths, labels = folder_files(data)
    if not paths:
        print(f"{name}: no images under {data}", file=sys.stderr)
        return None
    repeat = repeat or repeats_for(len(paths), min_batches * batch)
    return (paths, labels, *repeated(paths, labels, repeat), repeat)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", required=True, help="ImageFolder root")
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--batch", type=int, default=256)
    p.add_argument(
        "--configs",
        default=",".join(ALL_CONFIGS),
        help="comma list of synthetic,trdata,trdata-u8,dataloader (run in that order as given)",
    )
    p.add_argument(
        "--workers", type=int, default=allowed_cores(), help="trdata workers (default: allowed cores)"
    )
    p.add_argument("--dl-workers", type=int, default=16)
    p.add_argument(
        "--repeat",
        type=int,
        default=0,
        help="repeat the file list this many times per virtual epoch (0: enough for ≥100 batches)",
    )
    p.add_argument(
        "--no-fused", action="store_true", help="foreach SGD instead of fused SGD (default: fused)"
    )
    p.add_argument(
        "--loader-only",
        action="store_true",
        help="no model: each feed delivers (and prepares) batches on the GPU as fast as it can",
    )
    p.add_argument(
        "--deadline",
        type=float,
        default=0,
        help="skip configs that would start after this many seconds since launch (0: never)",
    )
    p.add_argument("--model", default="resnet50", choices=("resnet50", "resnet18"))
    p.add_argument(
        "--recipe",
        default="rn50",
        choices=("rn50", "tv"),
        help="rn50: RRC 224 + flip; tv: torchvision's reference recipe (RRC 176 + flip + TrivialAugmentWide + "
        "RandomErasing 0.1), add --mix for its MixUp 0.2 / CutMix 1.0",
    )
    p.add_argument("--packed", default=None, help="packed file for the packed/packed-partial configs")
    p.add_argument(
        "--pack-short-side",
        type=int,
        default=0,
        help="make the packed file here: the repeated file list re-encoded at this short side, q90",
    )
    p.add_argument(
        "--mix",
        action="store_true",
        help="trdata configs: RandomChoice([MixUp(0.2), CutMix(1.0)]) batch ops on the GPU (torchvision's recipe)",
    )
    p.add_argument("--json", default=None)
    a = p.parse_args(argv)
    t_start = time.time()

    files = prepare("rn50_train", a.data, a.batch, a.repeat)
    if files is None:
        return 2
    paths, labels, rpaths, rlabels, repeat = files
    header = {
        "mix": a.mix,
        "recipe": a.recipe,
        "gpu": torch.cuda.get_device_name(0),
        "torch": torch.__version__,
        "cores": allowed_cores(),
        "files": len(paths),
        "repeat": repeat,
        "virtual_epoch": len(rpaths),
        "batch": a.batch,
        "steps": a.steps,
        "warmup": a.warmup,
        "fused_sgd": not a.no_fused,
        "model": a.model,
        "packed": a.packed,
        "python": sys.version.split()[0],
        **library_versions(),
    }
    print("rn50_train", json.dumps(header), flush=True)

    if a.pack_short_side:
        import tempfile

        import trdata

        a.packed = os.path.join(tempfile.mkdtemp(prefix="rn50-packed-"), "sample.trd")
        t0 = time.time()
        rep = trdata.pack(
            trdata.FileList(rpaths, rlabels),
            a.packed,
            reencode=trdata.Reencode(short_side=a.pack_short_side, quality=90),
            progress=False,
        )
        header["pack"] = {
            "short_side": a.pack_short_side,
            "quality": 90,
            "records": rep["records"],
            "bytes_in": rep["bytes_in"],
            "bytes_out": rep["bytes_out"],
            "seconds": round(time.time() - t0, 1),
        }
        print("packed", json.dumps(header["pack"]), flush=True)
    header["mode"] = "loader-only" if a.loader_only else "train"
    if a.loader_only:
        model = opt = loss_fn = None
    else:
        model, opt = make_model(fused=not a.no_fused, arch=a.model)
        model.train()
        loss_fn = torch.nn.CrossEntropyLoss()
    results = []
    for name in [c.strip() for c in a.configs.split(",") if c.strip()]:
        if a.deadline and time.time() - t_start > a.deadline:
            print(f"[skip {name}: past --deadline {a.deadline:g}s]", flush=True)
            continue
        t0 = time.time()
        base, _, nw = name.partition("@")  # "trdata@14": 14 workers instead of the default
        try:
            if base == "synthetic" and a.loader_only:
                print("[skip synthetic: meaningless without a model]", flush=True)
                continue
            if base == "synthetic":
                feed = SyntheticFeed(a.batch, RECIPE_SIZE[a.recipe], mix=a.mix)
            elif base in ("trdata", "trdata-u8", "trdata-f16"):
                dtype = {"trdata": "bfloat16", "trdata-u8": "uint8", "trdata-f16": "float16"}[base]
                feed = TrdataFeed(
                    rpaths, rlabels, a.batch, int(nw or a.workers), dtype, mix=a.mix, recipe=a.recipe
                )
            elif base in ("packed", "packed-partial"):
                import trdata

                mode = "full" if base == "packed" else "partial"
                src = trdata.Packed(a.packed, mode)
                feed = TrdataFeed(
                    None,
                    None,
                    a.batch,
                    int(nw or a.workers),
                    "bfloat16",
                    source=src,
                    mix=a.mix,
                    recipe=a.recipe,
                )
            elif base == "dataloader":
                feed = DataLoaderFeed(rpaths, rlabels, a.batch, int(nw or a.dl_workers))
            else:
                print(f"unknown config {name!r}", file=sys.stderr)
                return 2
            feed.name = name
            try:
                r = run_config(feed, model, opt, loss_fn, a.steps, a.warmup)
            finally:
                feed.close()
        except Exception as e:
            import traceback

            traceback.print_exc()
            print(f"[{name} failed: {type(e).__name__}: {e}]", flush=True)
            continue
        r["config_seconds_total"] = round(time.time() - t0, 1)
        results.append(r)
        print(json.dumps(r), flush=True)
        if a.json:  # written after every config, so a cut-short run still leaves its numbers
            with open(a.json, "w") as f:
                json.dump({"header": header, "results": results}, f, indent=1)

    print()
    if a.loader_only:
        print("loader-only (no model; batches delivered to cuda:0, prepared as the training loop would):")
    print(fmt_table(results))
    by = {r["config"]: r for r in results}
    if "trdata" in by and not a.loader_only:
        t = by["trdata"]["img_per_s"]
        notes = ["targets: trdata ≥ 4,500 img/s"]
        if "synthetic" in by:
            notes.append(f"≥ 96% of synthetic (got {100 * t / by['synthetic']['img_per_s']:.1f}%)")
        if "dataloader" in by:
            notes.append(f"≥ 2x DataLoader (got {t / by['dataloader']['img_per_s']:.2f}x)")
        print("; ".join(notes) + f"; trdata = {t:,.0f} img/s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
