"""The GPU benches' training loop, in one place (benches/gpu/rn50_train.py, gpu_feed.py, tools/auto_trace.py): the
model and its step, the feeds (synthetic / trdata / torch DataLoader, each an endless iterator of device batches),
the timed window, and the files (ImageFolder order, repeated into virtual epochs).

Data wait: host wall time spent obtaining the next device batch (next(iterator), plus for the DataLoader the
.cuda() issue), summed over the timed steps, over the timed wall time. No per-step synchronize: the host runs
at most a few launches ahead of the GPU, so when data is late the host blocks in next() and the GPU drains
(that blocked time is the starvation); when data is early next() returns at once. The timed window starts and
ends with torch.cuda.synchronize().
"""

from __future__ import annotations

import sys
import time

import torch

from common import IMAGENET_MEAN, IMAGENET_STD, decode_arg, folder_files
from common.recipe import repeats_for, train_loader

try:  # before anything starts CUDA: trdata's import sets CUDA_DEVICE_MAX_CONNECTIONS (docs/design/gpu-decode-log.md §18)
    import trdata  # noqa: F401
except ImportError:  # the peers-only and --dry runs work without it
    pass


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
    return {"batch_ops": [trdata.BatchRandomChoice(ops)]}


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
        """``loader_kw``: further trdata.Loader keyword arguments (e.g. ``decode="auto"``, benches/gpu/gpu_feed.py)."""
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


# ---------------------------------------------------------------------------------------- GPU decode
# benches/gpu/gpu_feed.py's decode modes; tools/auto_trace.py traces the "auto" one.

#: The loader's GPU-decode counters whose differences a timed window reports.
DECODE_COUNTERS = ("cpu", "gpu", "fallback", "ineligible", "gpu_busy_s", "gpu_wait_s")


def _num(v):
    return v if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def decode_stats(stats) -> dict:
    """The loader's flat GPU-decode counters (``stats()``: decode_gpu, decode_gpu_fallback, decode_gpu_ineligible,
    decode_gpu_ns, decode_gpu_share_ppm; samples) as one dict; {} when the loader has no GPU decode path."""
    if not isinstance(stats, dict) or "decode_gpu" not in stats:
        return {}
    g = lambda k: _num(stats.get(k))  # noqa: E731
    gpu, samples = g("decode_gpu"), g("samples")
    ppm, ns = g("decode_gpu_share_ppm"), g("decode_gpu_ns")
    return {
        "p": None if ppm is None else ppm / 1e6,
        "cpu": None if gpu is None or samples is None else samples - gpu,
        "gpu": gpu,
        "fallback": g("decode_gpu_fallback"),
        "ineligible": g("decode_gpu_ineligible"),
        "gpu_busy_s": None if ns is None else ns / 1e9,
        "gpu_wait_s": None if g("decode_gpu_wait_ns") is None else g("decode_gpu_wait_ns") / 1e9,
    }


def decode_delta(before: dict, after: dict, wall_s: float) -> dict:
    """Counter differences over the timed window (None where a key is missing), GPU share and p start → end."""
    out = {}
    for k in DECODE_COUNTERS:
        a, b = _num(before.get(k)), _num(after.get(k))
        out[k] = None if a is None or b is None else round(b - a, 4)
    cpu, gpu = out["cpu"], out["gpu"]
    out["gpu_share"] = (
        round(gpu / (cpu + gpu), 4) if cpu is not None and gpu is not None and cpu + gpu else None
    )
    busy = out["gpu_busy_s"]
    out["gpu_busy_frac"] = round(busy / wall_s, 4) if busy is not None and wall_s > 0 else None
    out["p_start"], out["p_end"] = _num(before.get("p")), _num(after.get("p"))
    out["mode"] = after.get("mode")
    return out


class DecodeTrdataFeed(TrdataFeed):
    """The trdata feed with Loader(decode=MODE); extra() adds the decode dict and its window deltas."""

    def __init__(self, paths, labels, batch, workers, mode: str, source=None):
        super().__init__(paths, labels, batch, workers, "bfloat16", source=source, decode=decode_arg(mode))
        self.mode = mode

    def extra(self, before, after, wall_ns):
        out = super().extra(before, after, wall_ns)
        b, a = decode_stats(before), decode_stats(after)
        out["decode_arg"] = self.mode
        out["decode_stats"] = a if a else "n/a"
        out["decode_delta"] = decode_delta(b, a, wall_ns / 1e9)
        return out
