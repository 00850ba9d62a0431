"""The training-feed bench: which feeder keeps one H200 busy, and at what CPU cost — one run, same files.

    python benches/gpu/gpu_feed.py --data ROOT [--steps 150] [--warmup 10] [--auto-warmup 150] [--batch 256]
        [--only PATTERNS] [--compile [--compile-mode reduce-overhead]] [--workers N] [--dl-workers 16] [--repeat K]
        [--deadline S] [--config-timeout S] [--json out.json] [--list] [--dry]

Config names are PHASE/FEEDER. Phases: `rn18` and `rn50` (a real training step: torchvision resnet18/50,
weights=None, channels_last, bf16 autocast, batch 256, fused SGD lr 0.1 momentum 0.9, cross entropy), `rn50c`
(ResNet-50 under torch.compile; only with --compile or when --only names it; compiled once before its first
config, the compile time is reported), and `load` (loader-only: batches delivered into cuda:0 and prepared, no
model). Feeders:
  synthetic       4 pre-made bf16 channels_last batches on the GPU, cycled: the ceiling (training phases only)
  trdata-MODE     trdata.Loader(device="cuda:0", decode=MODE, bf16, NHWC → channels_last view, RRC 224 + flip +
                  IMAGENET normalize, shuffled, the loader's default workers); MODE = cpu | gpu | auto | a GPU
                  fraction 0.25 / 0.5 / 0.6 / 0.75. trdata-auto gets --auto-warmup extra untimed steps so its
                  controller has settled before the window opens.
  dataloader      torch DataLoader (--dl-workers processes, pin_memory, persistent, prefetch 2): read_file →
                  decode_jpeg (CPU) → v2 RandomResizedCrop(224, antialias) → RandomHorizontalFlip →
                  ToDtype(f32, scale) → Normalize; .cuda(non_blocking=True)
  tv-gpu          torchvision on the GPU, in the training thread: decode_jpeg(list of 256 byte tensors,
                  device="cuda", mode=RGB) (batched nvJPEG) → per image v2 RandomResizedCrop(224, antialias) +
                  RandomHorizontalFlip on the cuda tensor → stack → ToDtype(f32, scale) + Normalize on the batch.
                  The files' bytes are read into memory once at start (the sample is small; this spares the
                  feeder the file reads the others pay), and files torchvision cannot decode on the GPU (PNGs,
                  CMYK, …) are left out of its list (reported as tv_excluded).
Every feeder's batch is made bf16 channels_last on the GPU outside the data-wait timer (what autocast's first
conv would do anyway), so every config feeds the model the same dtype/layout (and torch.compile one graph).
Default selection: rn50/{synthetic,trdata-auto,trdata-cpu,trdata-0.5,trdata-0.6,tv-gpu,dataloader}, rn18 the same
without the fixed shares, load/trdata-{cpu,0.25,0.5,0.6,0.75,gpu,auto} + load/tv-gpu, and with --compile rn50c/{synthetic,
trdata-auto,trdata-cpu,tv-gpu,dataloader}.
--only takes comma-separated fnmatch patterns over all names (e.g. 'rn50/*,load/trdata-auto'); --list prints them.

Reported per config (one JSON line each, then a markdown table): img/s; × synthetic (same model); × trdata-cpu
(same phase); step ms; data wait (host time in next() over wall, as in rn50_train.py); cores busy = CPU seconds of
this process (utime+stime of all threads, /proc/self/stat) + its descendants (the DataLoader's worker processes,
live ones from /proc/PID/stat, reaped ones from cutime+cstime) over the timed wall time; loader cores = cores
busy minus the synthetic config's (the training thread's own share) of the same model; for trdata the
GPU-decode counters of stats() at the window's end (decode_stats()) and their deltas over the window: GPU share
= gpu / (cpu + gpu) samples, fallback, ineligible, gpu_busy_s; p at the window's start → end. A missing key
prints "n/a". The CPU-busy comparison asked of GPU decode (trdata decode="cpu" vs "auto" at the ResNet-50
eager rate) is the `cores busy` / `loader cores` of rn50/trdata-cpu vs rn50/trdata-auto, rn50/trdata-0.5 and
rn50/trdata-0.6 (fixed shares), summarised at the end.

The sample is small, so each loader iterates the file list repeated --repeat times; the default makes a virtual
epoch of ≥ 1,000 batches (ImageNet's is 5,005 at batch 256), so the timed window, warm-ups included, sits inside
one epoch: every feeder drains and refills its pipeline when an epoch starts (benches/tools/auto_trace.py shows it,
~0.2–0.3 s per restart for ResNet-18), which a 100-batch epoch would put inside the 150-step windows. Windows are
long and, for "auto", late (after --auto-warmup): the bench's earlier defaults (40 steps, 20 warm-up steps for
"auto", so a window at batches 10–70 of a fresh loader) read ResNet-18 "auto" 0.83× and compiled ResNet-50 "auto"
0.78×; these read 0.94× and 0.995× (docs/design/gpu-decode-log.md §19 says what changed and what is not separated). With the
defaults the whole run should take ~4–5 min (an estimate: 248 s was measured for 18 of its configs with --compile;
runs with these defaults hung in rn50/tv-gpu in 4 of 7 processes before trdata kept its nvJPEG decoders for the
process, docs/design/gpu-decode-log.md §20); configs that would
start after --deadline seconds (default 480) are skipped, so the run ends within 9 min unless one config alone
(the compile) runs long; a config still running after --config-timeout seconds (default 240) prints every thread's
stack and ends the run (faulthandler), the JSON of the configs before it kept. Each config's feeder is closed and
dropped before the next one is made.
--dry needs no GPU and no trdata: it checks the arguments and the selection, runs the CPU-busy meter against a
known load (this process + two worker processes, measured while they live and after they are reaped) and
prints the decode line and the markdown table over placeholder rows.

The training loop, the synthetic / trdata / DataLoader feeds, the decode counters and the timing window are
benches/common/train.py's (shared with rn50_train.py and tools/auto_trace.py); this file adds the decode modes, the torchvision GPU feeder, the CPU meter and the report.
"""

from __future__ import annotations

import argparse
import faulthandler
import fnmatch
import gc
import json
import os
import sys
import time
import warnings
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benches/: the shared `common` package
from common import IMAGENET_MEAN, IMAGENET_STD, allowed_cores, folder_files, write_json  # noqa: E402
from common.train import (  # noqa: E402
    DataLoaderFeed,
    DecodeTrdataFeed,
    SyntheticFeed,
    decode_delta,
    decode_stats,
    library_versions,
    make_model,
    prepare,
    run_config,
    train_step,
)

TRAIN_PHASES = {"rn18": "resnet18", "rn50": "resnet50", "rn50c": "resnet50"}
DECODE_MODES = ("cpu", "0.25", "0.5", "0.6", "0.75", "gpu", "auto")
#: trdata over a Parquet file of the same images (--parquet; its units are row groups, read through the partial
#: cache in windows: trdata.Parquet), CPU decode or "auto".
PARQUET_FEEDERS = ("parquet-cpu", "parquet-auto")
TRAIN_FEEDERS = (
    "synthetic",
    *(f"trdata-{m}" for m in DECODE_MODES),
    "dataloader",
    "tv-gpu",
    *PARQUET_FEEDERS,
)
LOAD_FEEDERS = (*(f"trdata-{m}" for m in DECODE_MODES), "tv-gpu", "dataloader", *PARQUET_FEEDERS)
DEFAULT_TRAIN = ("synthetic", "trdata-auto", "trdata-cpu", "tv-gpu", "dataloader")
#: ResNet-50 eager also runs fixed shares of 0.5 and 0.6: the cores a GPU split saves at that rate ("auto" keeps
#: the CPU the main path while it keeps up, so it saves few). 0.5 read 0.51–0.54× "cpu"'s loader cores at 0.97×
#: (docs/design/gpu-decode-log.md §19–20); 0.6 is the share that should need under half.
DEFAULT_RN50 = ("synthetic", "trdata-auto", "trdata-cpu", "trdata-0.5", "trdata-0.6", "tv-gpu", "dataloader")
#: Virtual epoch of the default --repeat, in batches (see the module docs: restarts inside the window).
EPOCH_BATCHES = 1000
DEFAULT_LOAD = (*(f"trdata-{m}" for m in DECODE_MODES), "tv-gpu")
#: run order: the ResNet-50 eager rows first (the CPU-busy comparison), compile last (it may be slow).
PHASE_ORDER = ("rn50", "rn18", "load", "rn50c")
DECODE_KEYS = ("mode", "p", "cpu", "gpu", "fallback", "ineligible", "gpu_busy_s", "gpu_wait_s")


# ------------------------------------------------------------------------------------------ selection


def all_configs() -> list[str]:
    out = []
    for phase in PHASE_ORDER:
        feeders = LOAD_FEEDERS if phase == "load" else TRAIN_FEEDERS
        out += [f"{phase}/{f}" for f in feeders]
    return out


def default_configs(compile_: bool) -> list[str]:
    out = []
    for phase in PHASE_ORDER:
        if phase == "rn50c" and not compile_:
            continue
        feeders = {"load": DEFAULT_LOAD, "rn50": DEFAULT_RN50}.get(phase, DEFAULT_TRAIN)
        out += [f"{phase}/{f}" for f in feeders]
    return out


def select_configs(only: str | None, compile_: bool) -> list[str]:
    """--only patterns (fnmatch, comma-separated) over all names, in run order; else the default set."""
    if not only:
        return default_configs(compile_)
    pats = [p.strip() for p in only.split(",") if p.strip()]
    bad = [p for p in pats if not any(fnmatch.fnmatchcase(c, p) for c in all_configs())]
    if bad:
        raise SystemExit(f"gpu_feed: --only {', '.join(bad)} matches no config (see --list)")
    return [c for c in all_configs() if any(fnmatch.fnmatchcase(c, p) for p in pats)]


# ------------------------------------------------------------------------------------------- CPU meter


def _stat_fields(pid: str) -> list[str] | None:
    """Fields of /proc/PID/stat after the command name (field 3 'state' is index 0), or None if gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read().decode("ascii", "replace")
    except OSError:
        return None
    return raw[raw.rfind(")") + 2 :].split()


def cpu_ticks() -> tuple[int, int]:
    """(clock ticks of CPU time of this process and all its descendants, number of live descendants).

    Own: utime+stime (all threads: trdata's workers, the pin_memory thread, the training thread) + cutime+cstime
    (children already reaped). Live descendants (the DataLoader's worker processes, compile workers): their
    utime+stime+cutime+cstime. A child that exits and is reaped moves from the second sum to our cutime, so a
    before/after difference stays right either way."""
    me = str(os.getpid())
    own = _stat_fields(me)
    assert own is not None
    # after the name: state(0) ppid(1) … utime(11) stime(12) cutime(13) cstime(14)
    total = sum(int(x) for x in own[11:15])
    children: dict[str, list[str]] = {}
    stats: dict[str, list[str]] = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or pid == me:
            continue
        f = _stat_fields(pid)
        if f is None or len(f) < 15:
            continue
        stats[pid] = f
        children.setdefault(f[1], []).append(pid)
    live = 0
    todo = list(children.get(me, []))
    while todo:
        pid = todo.pop()
        live += 1
        total += sum(int(x) for x in stats[pid][11:15])
        todo += children.get(pid, [])
    return total, live


class CpuMeter:
    """snap() → (seconds of CPU of this process tree, wall seconds, live descendants); busy(a, b) = cores."""

    tick = 1.0 / os.sysconf("SC_CLK_TCK")

    def snap(self) -> tuple[float, float, int]:
        t, live = cpu_ticks()
        return t * self.tick, time.perf_counter(), live

    @staticmethod
    def busy(a, b) -> dict:
        cpu, wall = b[0] - a[0], b[1] - a[1]
        return {
            "cpu_s": round(cpu, 2),
            "cores_busy": round(cpu / wall, 2) if wall > 0 else None,
            "descendants": b[2],
        }


# -------------------------------------------------------------------------------------- decode stats


def fmt_val(v) -> str:
    if v is None:
        return "n/a"
    if isinstance(v, float):
        return f"{v:.3g}"
    return str(v)


def decode_line(d: dict) -> str:
    """The stats()["decode"] dict as one line, its known keys first; a missing key reads n/a."""
    parts = [f"{k}={fmt_val(d.get(k))}" for k in DECODE_KEYS]
    parts += [f"{k}={fmt_val(v)}" for k, v in d.items() if k not in DECODE_KEYS]
    return " ".join(parts)


# ------------------------------------------------------------------------------------------- feeders


def to_model_input(x):
    """bf16 channels_last on the GPU: one pass, a no-op for trdata/synthetic (already that)."""
    return x.to(dtype=torch.bfloat16, memory_format=torch.channels_last)


class DLFeed(DataLoaderFeed):
    """common.train's DataLoader feed; the f32 batch becomes bf16 channels_last in one GPU pass."""

    def prepare(self, x):
        return to_model_input(x)


_TV_FILES: dict = {}  # (paths, labels) → (byte tensors torchvision decodes on the GPU, their labels, excluded)


class TvGpuFeed:
    """torchvision GPU decode + per-image GPU RandomResizedCrop/flip + batch normalize, in the calling thread."""

    name = "tv-gpu"

    def __init__(self, paths, labels, batch, repeat, seed=0, device="cuda"):
        """``device="cpu"`` only for --dry (the same code path on torchvision's CPU decoder)."""
        from torchvision.io import ImageReadMode, decode_jpeg, read_file
        from torchvision.transforms import v2

        warnings.filterwarnings("ignore", message=".*deprecat")  # torchvision 0.29+ decode_jpeg notice
        self.decode_jpeg, self.rgb, self.device = decode_jpeg, ImageReadMode.RGB, device
        key = (tuple(paths), tuple(labels), device)
        if key not in _TV_FILES:  # read and checked once per run, shared by the phases
            data, kept, excluded = [], [], 0
            for p, y in zip(paths, labels):
                t = read_file(p)
                try:
                    self.decode_jpeg(t, mode=self.rgb, device=device)
                except Exception:  # PNG, CMYK, … (torchvision raises RuntimeError today)
                    excluded += 1
                    continue
                data.append(t)
                kept.append(y)
            _TV_FILES.clear()
            _TV_FILES[key] = (data, kept, excluded)
        data, kept, excluded = _TV_FILES[key]
        self.data, self.labels = list(data), kept
        if len(self.data) < batch:
            raise RuntimeError(f"tv-gpu: only {len(self.data)} GPU-decodable files, fewer than a batch")
        self.excluded = excluded
        self.order_len = len(self.data) * repeat
        self.batch = batch
        self.crop = v2.Compose([v2.RandomResizedCrop(224, antialias=True), v2.RandomHorizontalFlip()])
        self.mean = torch.tensor(IMAGENET_MEAN, device=device).view(1, 3, 1, 1)
        self.std = torch.tensor(IMAGENET_STD, device=device).view(1, 3, 1, 1)
        self.label_t = torch.tensor(self.labels, dtype=torch.int64)
        self.gen = torch.Generator().manual_seed(seed)
        self.order, self.pos = None, 0

    def __iter__(self):
        return self

    def __next__(self):
        if self.order is None or self.pos + self.batch > self.order_len:  # drop_last; new virtual epoch
            self.order = torch.randperm(self.order_len, generator=self.gen) % len(self.data)
            self.pos = 0
        idx = self.order[self.pos : self.pos + self.batch]
        self.pos += self.batch
        imgs = self.decode_jpeg([self.data[i] for i in idx.tolist()], mode=self.rgb, device=self.device)
        x = torch.stack([self.crop(im) for im in imgs])  # uint8 NCHW on the GPU
        x = (x.float().div_(255) - self.mean).div_(self.std)  # ToDtype(f32, scale) + Normalize, batched
        y = self.label_t[idx]
        if self.device != "cpu":
            y = y.pin_memory().to(self.device, non_blocking=True)
        return x, y

    prepare = staticmethod(to_model_input)

    def snapshot(self):
        return {}

    def extra(self, before, after, wall_ns):
        return {"tv_files": len(self.data), "tv_excluded": self.excluded}

    def close(self):
        self.data = []


class Metered:
    """Wraps a feed: snapshot() adds the CPU meter, extra() adds cores busy over the timed window."""

    def __init__(self, feed, meter: CpuMeter):
        self.feed, self.meter, self.name = feed, meter, feed.name

    def __iter__(self):
        return self

    def __next__(self):
        return next(self.feed)

    def prepare(self, x):
        return getattr(self.feed, "prepare", lambda v: v)(x)

    def snapshot(self):
        return self.feed.snapshot(), self.meter.snap()

    def extra(self, before, after, wall_ns):
        out = self.feed.extra(before[0], after[0], wall_ns)
        out.update(CpuMeter.busy(before[1], after[1]))
        return out

    def close(self):
        self.feed.close()


# -------------------------------------------------------------------------------------------- report


def _by(results):
    return {r["config"]: r for r in results if r.get("status") == "ok"}


def ratio(r, other, key="img_per_s"):
    if not other or r.get(key) is None or not other.get(key):
        return None
    return r[key] / other[key]


def fmt_markdown(results) -> str:
    ok = _by(results)
    head = (
        "config",
        "img/s",
        "× synthetic",
        "× trdata-cpu",
        "step ms",
        "data wait",
        "cores busy",
        "loader cores",
        "GPU share",
        "p start→end",
        "fallback",
        "note",
    )
    rows = [
        "| " + " | ".join(head) + " |",
        "|" + "|".join(["---"] + ["--:"] * (len(head) - 2) + ["---"]) + "|",
    ]
    for r in results:
        phase = r["config"].split("/")[0]
        syn = ok.get(f"{phase}/synthetic")
        cpu = ok.get(f"{phase}/trdata-cpu")
        dd = r.get("decode_delta") or {}
        loader_cores = None
        if syn and r.get("cores_busy") is not None and syn.get("cores_busy") is not None:
            loader_cores = round(r["cores_busy"] - syn["cores_busy"], 1) or 0.0  # no "-0.0"
        if r.get("status") != "ok":
            note = r.get("status", "")
        elif "tv_excluded" in r:
            note = f"{r['tv_excluded']} files not GPU-decodable, left out"
        elif "compile_s" in r:
            note = f"compile {r['compile_s']:.0f} s"
        else:
            note = ""
        cells = (
            r["config"],
            f"{r['img_per_s']:,.0f}" if r.get("img_per_s") is not None else "n/a",
            f"{ratio(r, syn):.3f}" if ratio(r, syn) is not None else "-",
            f"{ratio(r, cpu):.2f}×" if ratio(r, cpu) is not None else "-",
            f"{r['step_ms']:.1f}" if r.get("step_ms") is not None else "n/a",
            f"{100 * r['data_wait_frac']:.1f}%" if r.get("data_wait_frac") is not None else "n/a",
            f"{r['cores_busy']:.1f}" if r.get("cores_busy") is not None else "n/a",
            f"{loader_cores:.1f}" if loader_cores is not None and r is not syn else "-",
            f"{100 * dd['gpu_share']:.1f}%" if dd.get("gpu_share") is not None else ("n/a" if dd else "-"),
            f"{fmt_val(dd.get('p_start'))}→{fmt_val(dd.get('p_end'))}" if dd else "-",
            fmt_val(dd.get("fallback")) if dd else "-",
            note.replace("|", "/"),
        )
        rows.append("| " + " | ".join(cells) + " |")
    return "\n".join(rows)


def summary(results) -> list[str]:
    ok = _by(results)
    lines = []
    for phase in ("rn50", "rn18", "rn50c"):
        syn = ok.get(f"{phase}/synthetic")
        if not syn:
            continue
        if syn.get("img_per_s") is None:
            continue
        xs = [
            (f, ratio(ok[f"{phase}/{f}"], syn))
            for f in TRAIN_FEEDERS
            if f != "synthetic" and f"{phase}/{f}" in ok
        ]
        parts = [f"{f} {'n/a' if x is None else f'{x:.3f}'}" for f, x in xs]
        lines.append(f"{phase}: × synthetic ({syn['img_per_s']:,.0f} img/s): " + ", ".join(parts))
    # The cores comparison at the ResNet-50 eager rate: every trdata row against decode="cpu"'s.
    c, s = ok.get("rn50/trdata-cpu"), ok.get("rn50/synthetic")
    own = s.get("cores_busy") if s else None
    if c and c.get("cores_busy") is not None:
        parts = []
        for m in DECODE_MODES:
            r = ok.get(f"rn50/trdata-{m}")
            if not r or r.get("cores_busy") is None:
                continue
            rate = f"{r['img_per_s']:,.0f} img/s" if r.get("img_per_s") is not None else "n/a img/s"
            part = f"decode={m} {r['cores_busy']:.1f} ({rate}"
            if m != "cpu":
                part += f", frees {c['cores_busy'] - r['cores_busy']:.1f}"
                if own is not None and c["cores_busy"] > own:
                    part += f", loader cores {(r['cores_busy'] - own) / (c['cores_busy'] - own):.2f}× cpu's"
            parts.append(part + ")")
        line = "CPU cores busy at the ResNet-50 eager rate: " + ", ".join(parts)
        if own is not None:
            line += f"; the training thread alone (synthetic) {own:.1f}"
        lines.append(line)
    return lines


# --------------------------------------------------------------------------------------------- dry run


def _burn(seconds: float, q, release) -> None:
    t0 = time.process_time()
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass
    q.put(time.process_time() - t0)
    release.wait(30)


def meter_selftest(seconds: float = 0.5, procs: int = 2) -> list[dict]:
    """This process and `procs` forked workers (as the DataLoader's) each burn `seconds` of CPU; the meter's
    reading is compared with what they report (time.process_time) — while the workers live, then reaped."""
    import multiprocessing as mp

    ctx = mp.get_context("fork")
    meter = CpuMeter()
    q, release = ctx.Queue(), ctx.Event()
    a = meter.snap()
    own0 = time.process_time()
    ws = [ctx.Process(target=_burn, args=(seconds, q, release)) for _ in range(procs)]
    for w in ws:
        w.start()
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass
    reported = [q.get(timeout=30) for _ in ws]  # workers are done burning, still alive
    b = meter.snap()
    expect_live = time.process_time() - own0 + sum(reported)
    release.set()
    for w in ws:
        w.join()
    c = meter.snap()
    expect_reaped = time.process_time() - own0 + sum(reported)
    rows = []
    for name, m, expect in (
        ("live", CpuMeter.busy(a, b), expect_live),
        ("reaped", CpuMeter.busy(a, c), expect_reaped),
    ):
        m.update(
            {"phase": name, "expected_cpu_s": round(expect, 2), "rel_err": round(m["cpu_s"] / expect - 1, 3)}
        )
        rows.append(m)
    return rows


class _CpuBatches(torch.utils.data.Dataset):
    """--dry: small random images made with some CPU work in each item (what a worker process would do)."""

    def __len__(self):
        return 64

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(i)
        x = torch.randn(3, 64, 64, generator=g)
        for _ in range(20):
            x = torch.tanh(x @ torch.randn(64, 64, generator=g) / 8)
        return x, i % 10


class _CpuFeed:
    """--dry: a feed on the CPU — pre-made batches ('synthetic') or a DataLoader with worker processes."""

    def __init__(self, name, workers=0):
        self.name = name
        self.loader = None
        if workers:
            self.loader = torch.utils.data.DataLoader(
                _CpuBatches(), batch_size=8, num_workers=workers, persistent_workers=True, drop_last=True
            )
            self.it = iter(self.loader)
        else:
            self.batches = [(torch.randn(8, 3, 64, 64), torch.randint(0, 10, (8,))) for _ in range(2)]
            self.i = 0

    def __iter__(self):
        return self

    def __next__(self):
        if self.loader is None:
            self.i += 1
            return self.batches[self.i % 2]
        try:
            return next(self.it)
        except StopIteration:
            self.it = iter(self.loader)
            return next(self.it)

    def snapshot(self):
        return {}

    def extra(self, before, after, wall_ns):
        return {}

    def close(self):
        if self.loader is not None:
            self.it._shutdown_workers()


def dry_mini_run(steps: int, data: str | None) -> list[dict]:
    """common.train's timing loop + Metered + the report on the CPU (torch.cuda.synchronize is a no-op here): a tiny
    conv net fed by pre-made batches and by a 2-process DataLoader, so the table's numbers are real ones."""
    torch.cuda.synchronize = lambda *a, **k: None  # dry only: no device to wait for
    warnings.filterwarnings("ignore", message=".*CUDA is not available")  # autocast('cuda') on a CPU box
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3),
        torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1),
        torch.nn.Flatten(),
        torch.nn.Linear(8, 1000),
    )
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    meter, out = CpuMeter(), []
    names = [("dry/synthetic", 0), ("dry/dataloader", 2)] + ([("dry/tv-gpu", -1)] if data else [])
    for name, workers in names:
        if workers >= 0:
            inner = _CpuFeed(name, workers)
        else:  # the torchvision feeder's own code on the CPU decoder, over --data's files
            paths, labels = folder_files(data)
            inner = TvGpuFeed(paths, labels, 8, 1, device="cpu")
            inner.name = name
            inner.prepare = lambda x: x  # the CPU model stays float32
        feed = Metered(inner, meter)
        try:
            r = run_config(feed, model, opt, torch.nn.CrossEntropyLoss(), steps, 2)
        finally:
            feed.close()
        r["status"] = "ok"
        print(json.dumps(r), flush=True)
        out.append(r)
    return out


def dry(a, configs) -> int:
    print(
        "gpu_feed --dry",
        json.dumps(
            {
                "python": sys.version.split()[0],
                "torch": torch.__version__,
                "cores": allowed_cores(),
                "configs": configs,
            }
        ),
        flush=True,
    )
    ok = True
    for row in meter_selftest():
        print("cpu-meter", json.dumps(row), flush=True)
        ok &= abs(row["rel_err"]) < 0.15
    results = dry_mini_run(min(a.steps, 20), a.data)
    dl = results[1]
    ok &= dl["descendants"] == 2 and dl["cores_busy"] > 0 and results[0]["img_per_s"] > 0
    # the decode-dict path with keys missing (the lead may rename one) and with a non-dict value
    before = {"samples": 150, "decode_gpu": 50, "decode_gpu_share_ppm": 250000, "decode_gpu_ns": 10**9}
    after = {"samples": 650, "decode_gpu": 350, "decode_gpu_share_ppm": 500000, "decode_gpu_ns": 2 * 10**9}
    d = decode_delta(decode_stats(before), decode_stats(after), 2.0)
    print("decode:", decode_line(decode_stats(after)))
    print("decode_delta", json.dumps(d))
    ok &= d["gpu_share"] == 0.6 and d["fallback"] is None and d["p_end"] == 0.5 and d["gpu_busy_frac"] == 0.5
    ok &= decode_line(decode_stats({"samples": 3})).count("n/a") == len(DECODE_KEYS)
    results.append({"config": "dry/trdata-auto", "status": "ok", "img_per_s": None, "decode_delta": d})
    results += [{"config": c, "status": "dry: not run"} for c in configs]
    print()
    print(fmt_markdown(results))
    print("\n".join(summary(results)))
    print(f"\ndry run {'passed' if ok else 'FAILED'}", flush=True)
    return 0 if ok else 1


# ------------------------------------------------------------------------------------------------ main


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", help="ImageFolder root (required unless --dry/--list)")
    p.add_argument(
        "--parquet", default=None, help="a Parquet file of --data's images, for the parquet-* feeders"
    )
    p.add_argument("--steps", type=int, default=150, help="timed steps per config")
    p.add_argument("--warmup", type=int, default=10, help="untimed steps per config")
    p.add_argument("--auto-warmup", type=int, default=150, help="extra untimed steps for trdata-auto configs")
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--only", default=None, help="comma-separated fnmatch patterns over PHASE/FEEDER names")
    p.add_argument("--compile", action="store_true", help="add rn50c/*: ResNet-50 under torch.compile")
    p.add_argument(
        "--compile-mode",
        default="default",
        choices=("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs"),
        help="torch.compile mode for rn50c (reduce-overhead: CUDA graphs)",
    )
    p.add_argument(
        "--workers",
        type=int,
        default=None,
        help="trdata workers (default: the loader's own: allowed cores - 1, less one per GPU decode thread)",
    )
    p.add_argument("--dl-workers", type=int, default=16)
    p.add_argument(
        "--repeat",
        type=int,
        default=0,
        help=f"file list repeats per virtual epoch (0: ≥ {EPOCH_BATCHES} batches)",
    )
    p.add_argument(
        "--deadline", type=float, default=480, help="skip configs starting after S seconds (0: never)"
    )
    p.add_argument(
        "--config-timeout",
        type=float,
        default=240,
        help="a config still running after S seconds (its feeder's start included) prints every thread's stack "
        "and ends the run (0: never)",
    )
    p.add_argument("--json", default=None, help="write header + results here (after every config)")
    p.add_argument(
        "--list", action="store_true", help="print all config names (selected ones marked) and exit"
    )
    p.add_argument("--dry", action="store_true", help="no GPU: check args, CPU meter, decode line and table")
    a = p.parse_args(argv)
    for k in ("steps", "batch", "workers", "dl_workers"):
        if getattr(a, k) is not None and getattr(a, k) < 1:
            p.error(f"--{k.replace('_', '-')} must be ≥ 1")
    if a.config_timeout < 0:
        p.error("--config-timeout must be ≥ 0")
    if a.warmup < 1 or a.auto_warmup < 0:
        p.error("--warmup must be ≥ 1 and --auto-warmup ≥ 0")
    if not (a.dry or a.list or a.data):
        p.error("--data is required")
    return a


def header_info(a, paths, repeat) -> dict:
    h = {
        "gpu": torch.cuda.get_device_name(0),
        "torch": torch.__version__,
        "python": sys.version.split()[0],
        "cores": allowed_cores(),
        "files": len(paths),
        "repeat": repeat,
        "virtual_epoch": len(paths) * repeat,
        "batch": a.batch,
        "steps": a.steps,
        "warmup": a.warmup,
        "auto_warmup": a.auto_warmup,
        "workers": a.workers,
        "dl_workers": a.dl_workers,
        "cuda_device_max_connections": os.environ.get("CUDA_DEVICE_MAX_CONNECTIONS"),
        **library_versions(),
    }
    try:
        from trdata._cuda_libs import nvjpeg as _nvjpeg

        h["nvjpeg"] = _nvjpeg.probe()
    except Exception as e:  # report, do not stop: trdata configs will say why they fail
        h["trdata_error"] = f"{type(e).__name__}: {e}"
    return h


def compile_model(model, opt, loss_fn, batch, mode: str = "default") -> tuple[object, float]:
    """torch.compile(model, mode=mode) and 3 steps on bf16 channels_last data (every feeder's input): compile
    seconds. mode "reduce-overhead" runs the model as CUDA graphs (its kernel launches no longer contend with the
    GPU decode threads' driver calls: docs/design/gpu-decode-log.md §18)."""
    cmodel = torch.compile(model, mode=mode)
    feed = SyntheticFeed(batch)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(3):
        x, y = next(feed)
        train_step(cmodel, opt, loss_fn, x, y)
    torch.cuda.synchronize()
    feed.close()
    return cmodel, time.perf_counter() - t0


def main(argv=None) -> int:
    a = parse_args(argv)
    configs = select_configs(a.only, a.compile)
    if a.list:
        for c in all_configs():
            print(("* " if c in configs else "  ") + c)
        return 0
    if a.dry:
        return dry(a, configs)
    t_start = time.time()
    files = prepare(
        "gpu_feed (use --dry to check the script without a GPU)", a.data, a.batch, a.repeat, EPOCH_BATCHES
    )
    if files is None:
        return 2
    paths, labels, rpaths, rlabels, repeat = files
    header = header_info(a, paths, repeat)
    header["configs"] = configs
    print("gpu_feed", json.dumps(header), flush=True)

    meter = CpuMeter()
    loss_fn = torch.nn.CrossEntropyLoss()
    models: dict[str, tuple] = {}  # phase → (model, opt); rn50c shares rn50's parameters and optimizer
    compile_s = None
    results = []
    for name in configs:
        phase, feeder = name.split("/", 1)
        if a.deadline and time.time() - t_start > a.deadline:
            print(f"[skip {name}: past --deadline {a.deadline:g}s]", flush=True)
            results.append({"config": name, "status": f"skipped (past {a.deadline:g} s)"})
            continue
        t0 = time.time()
        r = None
        if a.config_timeout:  # a hung config ends the run with every thread's stack (the JSON so far is kept)
            faulthandler.dump_traceback_later(a.config_timeout, exit=True)
        try:
            model = opt = None
            if phase != "load":
                base = "rn50" if phase == "rn50c" else phase
                if base not in models:
                    m, o = make_model(fused=True, arch=TRAIN_PHASES[base])
                    m.train()
                    models[base] = (m, o)
                model, opt = models[base]
                if phase == "rn50c":
                    if "rn50c" not in models:
                        print("[compiling ResNet-50 …]", flush=True)
                        cm, compile_s = compile_model(model, opt, loss_fn, a.batch, a.compile_mode)
                        models["rn50c"] = (cm, opt)
                        print(f"[compiled in {compile_s:.1f} s]", flush=True)
                    model = models["rn50c"][0]
            warmup = a.warmup
            if feeder == "synthetic":
                feed = SyntheticFeed(a.batch)
            elif feeder.startswith("trdata-"):
                mode = feeder.removeprefix("trdata-")
                feed = DecodeTrdataFeed(rpaths, rlabels, a.batch, a.workers, mode)
                if mode == "auto":
                    warmup += a.auto_warmup
            elif feeder.startswith("parquet-"):
                if not a.parquet:
                    raise ValueError(f"{name} needs --parquet FILE")
                mode = feeder.removeprefix("parquet-")
                import trdata

                source = trdata.Parquet(
                    [a.parquet] * repeat, extras=()
                )  # the file repeated: the same virtual epoch
                feed = DecodeTrdataFeed(rpaths, rlabels, a.batch, a.workers, mode, source=source)
                if mode == "auto":
                    warmup += a.auto_warmup
            elif feeder == "dataloader":
                feed = DLFeed(rpaths, rlabels, a.batch, a.dl_workers)
            elif feeder == "tv-gpu":
                feed = TvGpuFeed(paths, labels, a.batch, repeat)
            else:  # pragma: no cover - names come from all_configs()
                raise ValueError(f"unknown feeder {feeder!r}")
            feed.name = name
            mfeed = Metered(feed, meter)
            try:
                r = run_config(mfeed, model, opt, loss_fn, a.steps, warmup)
            finally:
                mfeed.close()
            r.update({"status": "ok", "phase": phase, "feeder": feeder, "warmup": warmup})
            if model is not None:
                r["model"] = TRAIN_PHASES[phase] + (
                    f" (torch.compile, {a.compile_mode})" if phase == "rn50c" else ""
                )
            if phase == "rn50c":
                r["compile_s"] = round(compile_s, 1)
        except Exception as e:
            import traceback

            traceback.print_exc()
            msg = f"{type(e).__name__}: {e}".splitlines()[0][:160]
            print(f"[{name} failed: {msg}]", flush=True)
            r = {"config": name, "status": f"failed: {msg}"}
        finally:
            faulthandler.cancel_dump_traceback_later()
        # The next config starts with this one's feeder gone, not just closed (also when it failed: the traceback
        # that held it is gone once the except block ended).
        feed = mfeed = None
        gc.collect()
        r["config_seconds_total"] = round(time.time() - t0, 1)
        results.append(r)
        print(json.dumps(r), flush=True)
        if "decode_stats" in r:
            print(
                f"  {name} decode: {decode_line(r['decode_stats'] if isinstance(r['decode_stats'], dict) else {})}"
            )
        if a.json:  # after every config, so a cut-short run keeps its numbers
            write_json(a.json, {"header": header, "results": results})

    print(
        f"\n## GPU feed: {header['gpu']}, {header['cores']} cores, batch {a.batch}, "
        f"CUDA_DEVICE_MAX_CONNECTIONS={header['cuda_device_max_connections']}, "
        f"{a.steps} timed steps/config, {time.time() - t_start:.0f} s in all\n"
    )
    print(fmt_markdown(results))
    print()
    for line in summary(results):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
