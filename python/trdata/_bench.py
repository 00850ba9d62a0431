"""What ``trdata bench`` (cli.py) measures with, shared with the scripts under ``benches/``: CPU binding,
the progress bar, timing, the two built-in contenders (the trdata Loader and the raw libjpeg-turbo decode
ceiling), process isolation, suites and the report tables. The peers (torch DataLoader, Pillow, DALI) are
not part of the package: they live in ``benches/peers.py`` and plug in through ``run_suite(runner=...)``.

Rules every measurement here follows (DESIGN.md §5):
- same files, same CPUs (``restrict_cpus``) and the same pipeline for every contender;
- warm-up epoch(s) first, untimed (thread/process start, page cache, buffer growth);
- the clock covers the timed epochs only, consumer side: from asking for the first batch to receiving the
  last one; images are counted as the batches' valid rows;
- results are img/s plus ratios; nothing here asserts on time.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ._args import allowed_cpus as allowed_cpus  # the harness's CPU helpers (benches use _bench.allowed_cpus)
from ._progress import ProgressBar

if TYPE_CHECKING:
    from .loader import DTypeName

#: The standard training pipeline every contender runs.
PIPELINE = "RandomResizedCrop(224) + RandomHorizontalFlip + ImageNet normalize → float16 NCHW"
CROP = 224


# ----------------------------------------------------------------------------------------------------------
# CPUs
# ----------------------------------------------------------------------------------------------------------


def restrict_cpus(cpus: Sequence[int]) -> None:
    """Bind this process (and every thread/process it starts later) to ``cpus``."""
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, set(cpus))


def parse_cpus(text: str) -> list[int]:
    """``"0-3,6"`` → ``[0, 1, 2, 3, 6]``."""
    cpus: set[int] = set()
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        if "-" in part:
            lo, hi = part.split("-", 1)
            cpus.update(range(int(lo), int(hi) + 1))
        else:
            cpus.add(int(part))
    if not cpus:
        raise ValueError(f"no CPUs in {text!r}")
    return sorted(cpus)


def load_average() -> float | None:
    """1-minute load average (other work on the machine skews every number)."""
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):  # pragma: no cover
        return None


# ----------------------------------------------------------------------------------------------------------
# Timing
# ----------------------------------------------------------------------------------------------------------


@dataclass
class Measurement:
    """Outcome of one contender."""

    name: str
    key: str = ""
    images: int = 0
    seconds: float = 0.0
    epochs: float = 0.0
    warmup_epochs: int = 0
    note: str = ""
    #: CPU time (user + system) the contender's process tree spent in the timed phase, when known.
    cpu_seconds: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    error: str | None = None

    @property
    def img_per_s(self) -> float:
        return self.images / self.seconds if self.seconds > 0 else 0.0

    @property
    def img_per_cpu_s(self) -> float | None:
        """Images per CPU-second: efficiency, far less sensitive to other load on the machine than img/s."""
        return self.images / self.cpu_seconds if self.cpu_seconds else None

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "key": self.key,
            "img_per_s": round(self.img_per_s, 1),
            "images": self.images,
            "seconds": round(self.seconds, 4),
            "epochs": round(self.epochs, 3),
            "warmup_epochs": self.warmup_epochs,
            "cpu_seconds": None if self.cpu_seconds is None else round(self.cpu_seconds, 4),
            "img_per_cpu_s": None if self.img_per_cpu_s is None else round(self.img_per_cpu_s, 1),
            "note": self.note,
            "error": self.error,
            "extra": self.extra,
        }


def time_epochs(
    name: str,
    epoch_batches: Callable[[int], Iterable[int]],
    images_per_epoch: int,
    *,
    epochs: int = 2,
    warmup: int = 1,
    seconds: float | None = None,
    progress: bool = True,
    on_timed_start: Callable[[], None] | None = None,
) -> Measurement:
    """Time a contender. ``epoch_batches(e)`` runs epoch ``e`` and yields the number of valid images of each
    batch as the consumer receives it. ``warmup`` epochs run untimed; then ``epochs`` timed epochs, or, with
    ``seconds``, timed epochs until that much time has passed (stopping mid-epoch at a batch boundary).
    ``on_timed_start`` runs just before the clock starts (e.g. to snapshot counters)."""
    m = Measurement(name=name, warmup_epochs=warmup)
    stream = progress_stream(progress)
    for e in range(warmup):
        bar = ProgressBar(images_per_epoch, f"{name}: warm-up", stream=stream, clock=time.perf_counter)
        for n in epoch_batches(e):
            bar.update(n)
        bar.close()
    timed_epochs = epochs if seconds is None else 10**9
    bar_total = images_per_epoch * epochs if seconds is None else images_per_epoch
    bar = ProgressBar(bar_total, f"{name}: timed", stream=stream, clock=time.perf_counter)
    if on_timed_start is not None:
        on_timed_start()
    cpu_start = tree_cpu_seconds()
    start = time.perf_counter()
    bar.start = start  # the bar's rate is the measurement's: same clock, same images
    for e in range(warmup, warmup + timed_epochs):
        epoch_images = 0
        iterator = iter(epoch_batches(e))
        stopped = False
        for n in iterator:
            m.images += n
            epoch_images += n
            # with --seconds the bar shows the epoch's progress, its rate the run's (all timed images)
            bar.update_to(epoch_images if seconds is not None else m.images, counted=m.images)
            if seconds is not None and time.perf_counter() - start >= seconds:
                stopped = True
                break
        m.seconds = time.perf_counter() - start  # read before any teardown
        cpu_end = tree_cpu_seconds()
        if cpu_start is not None and cpu_end is not None:
            m.cpu_seconds = cpu_end - cpu_start
        m.epochs += epoch_images / images_per_epoch if images_per_epoch else 0.0
        if stopped:
            close = getattr(iterator, "close", None)
            if close is not None:
                close()
            break
    bar.close()
    return m


def tree_cpu_seconds() -> float | None:
    """User + system CPU seconds of this process and all its live descendants (threads included), from /proc.
    Counts torch DataLoader worker processes as well as in-process thread pools; None off Linux."""
    try:
        ticks = os.sysconf("SC_CLK_TCK")
        children: dict[int, list[int]] = {}
        cpu: dict[int, int] = {}
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                with open(f"/proc/{entry}/stat", "rb") as f:
                    stat = f.read()
            except OSError:
                continue  # exited meanwhile
            fields = stat[stat.rindex(b")") + 2 :].split()
            pid, ppid = int(entry), int(fields[1])
            children.setdefault(ppid, []).append(pid)
            cpu[pid] = int(fields[11]) + int(fields[12])  # utime + stime
    except (OSError, ValueError, AttributeError):
        return None
    total, todo = 0, [os.getpid()]
    while todo:
        pid = todo.pop()
        total += cpu.get(pid, 0)
        todo.extend(children.get(pid, ()))
    return total / ticks


class _NullStream:
    def write(self, _s: str) -> None:
        pass

    def flush(self) -> None:
        pass

    def isatty(self) -> bool:
        return False


def progress_stream(enabled: bool) -> Any:
    return sys.stderr if enabled else _NullStream()


# ----------------------------------------------------------------------------------------------------------
# Contenders implemented by trdata itself
# ----------------------------------------------------------------------------------------------------------


def image_folder_files(root: str | os.PathLike[str]) -> tuple[list[str], list[int]]:
    """(paths, labels) of an ImageFolder tree, in trdata's order (used so every contender reads the same files)."""
    from . import _core

    paths, labels, _classes = _core.scan_image_folder(os.fspath(root))
    return list(paths), list(labels)


def standard_loader(source: Any, batch_size: int, workers: int, dtype: str = "float16") -> Any:
    """The standard pipeline's CPU loader over ``source``: RandomResizedCrop(CROP) + flip, ImageNet normalization,
    NCHW ``dtype``, shuffled; what every trdata row of the benches times."""
    import trdata

    return trdata.Loader(
        source,
        batch_size=batch_size,
        transforms=[trdata.RandomResizedCrop(CROP), trdata.RandomHorizontalFlip()],
        normalize=trdata.IMAGENET,
        dtype=dtype,
        layout="NCHW",
        workers=workers,
        shuffle=True,
        seed=0,
        reproducible=False,
        last_batch="partial",
        device="cpu",
        on_error="raise",
    )


def trdata_contender(
    root: str | os.PathLike[str],
    *,
    batch_size: int = 64,
    workers: int = 2,
    dtype: DTypeName = "float16",
    epochs: int = 2,
    warmup: int = 1,
    seconds: float | None = None,
    progress: bool = True,
    name: str = "trdata Loader",
    source: Any = None,
    before_epoch: Callable[[int], None] | None = None,
) -> Measurement:
    """The trdata Loader on the standard pipeline over ``ImageFolder(root)`` or ``source`` (any trdata
    source); ``before_epoch(e)`` runs before each epoch (e.g. to drop a file from the page cache).
    ``extra['stats']`` holds ``loader.stats()`` deltas over the timed epochs."""
    import trdata

    if source is None:
        source = trdata.ImageFolder(root)
    loader = standard_loader(source, batch_size, workers, dtype)
    before: dict[str, Any] = {}

    def snapshot() -> None:
        before.update(loader.stats())

    def epoch_batches(e: int) -> Iterator[int]:
        if before_epoch is not None:
            before_epoch(e)
        loader.set_epoch(e)
        for batch in loader:
            yield int(batch.valid)

    with loader:
        m = time_epochs(
            name,
            epoch_batches,
            len(source),
            epochs=epochs,
            warmup=warmup,
            seconds=seconds,
            progress=progress,
            on_timed_start=snapshot,
        )
        after = loader.stats()
    m.extra["stats"] = {
        k: (v - before.get(k, 0) if isinstance(v, (int, float)) else v) for k, v in after.items()
    }
    m.extra["workers"] = workers
    m.note = f"{workers} pinned Rust threads; ROI + DCT-scaled decode fused with augment"
    return m


def decode_ceiling(
    paths: Sequence[str], threads: int, repeat: int = 2, name: str | None = None
) -> Measurement:
    """Raw libjpeg-turbo full decode (no ROI, no scaling, no augmentation) of in-memory files on ``threads``
    pinned threads, ``repeat`` passes (the first image per thread is an untimed warm-up)."""
    from . import _core

    r = _core.decode_ceiling(list(paths), threads, repeat)
    m = Measurement(name=name or display_name(f"decode-{threads}"))
    m.images = int(r["images"])
    m.seconds = float(r["seconds"])
    m.cpu_seconds = r.get("cpu_seconds")
    m.epochs = float(repeat)
    m.note = "full-size decode to RGB, files in memory"
    m.extra = {k: r[k] for k in ("failed", "megapixels_per_s", "threads", "repeat", "first_error")}
    return m


# ----------------------------------------------------------------------------------------------------------
# Reporting
# ----------------------------------------------------------------------------------------------------------


def format_table(headers: Sequence[str], rows: Sequence[Sequence[Any]], align: str | None = None) -> str:
    """A plain-text table; ``align`` is one char per column, 'l' or 'r' (default: first left, rest right)."""
    cells = [[str(h) for h in headers]] + [["" if c is None else str(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    align = align or ("l" + "r" * (len(headers) - 1))

    def fmt(row: Sequence[str]) -> str:
        return "  ".join(
            c.ljust(w) if a == "l" else c.rjust(w) for c, w, a in zip(row, widths, align)
        ).rstrip()

    sep = "  ".join("-" * w for w in widths)
    return "\n".join([fmt(cells[0]), sep] + [fmt(r) for r in cells[1:]])


def fmt_rate(v: float) -> str:
    return f"{v:,.0f}"


def fmt_ratio(v: float | None) -> str:
    return "—" if v is None else f"{v:.2f}×"


def stats_breakdown(stats: dict[str, Any], wall_s: float, workers: int) -> str:
    """Human-readable table of ``loader.stats()`` deltas: per-stage CPU time, per image and as a share of the
    workers' available time (wall × workers), plus the counters."""
    samples = int(stats.get("samples", 0)) or 1
    budget_ns = wall_s * 1e9 * max(1, workers)
    rows = []
    for key, value in stats.items():
        if not key.endswith("_ns") or not isinstance(value, (int, float)):
            continue
        label = key[:-3].replace("_", " ")
        if key == "consumer_wait_ns":
            share = f"{value / (wall_s * 1e9) * 100:5.1f}% of wall (consumer)" if wall_s > 0 else ""
        else:
            share = f"{value / budget_ns * 100:5.1f}% of worker time" if budget_ns > 0 else ""
        rows.append((label, f"{value / 1e9:.3f} s", f"{value / samples / 1e3:,.1f} µs", share))
    counters = [
        f"{k}={v:,}" if isinstance(v, int) else f"{k}={v}" for k, v in stats.items() if not k.endswith("_ns")
    ]
    out = format_table(("stage", "total", "per image", "share"), rows, "lrrl") if rows else "(no timers)"
    if counters:
        out += "\ncounters: " + ", ".join(counters)
    return out


def machine_summary() -> dict[str, Any]:
    """Facts that explain a number: CPU model, CPUs allowed, load, versions."""
    import platform

    cpu_model = ""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu_model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return {
        "cpu_model": cpu_model,
        "cpus_online": os.cpu_count(),
        "cpus_allowed": allowed_cpus(),
        "load_average_1m": load_average(),
        "python": platform.python_version(),
        "platform": platform.platform(),
    }


# ----------------------------------------------------------------------------------------------------------
# Contenders by key, each in a fresh process
# ----------------------------------------------------------------------------------------------------------

#: Contender keys of ``run_contender`` (``decode-N``: the ceiling on N threads, any N ≥ 1).
CONTENDERS = ("trdata", "decode-N")


def display_name(key: str) -> str:
    """Table name of contender ``key``."""
    if key.startswith("decode-"):
        n = int(key.split("-", 1)[1])
        return f"decode-only libjpeg-turbo ({n} thread{'s' if n > 1 else ''})"
    return "trdata Loader" if key == "trdata" else key


def run_contender(
    name: str,
    root: str,
    *,
    batch_size: int = 64,
    workers: int = 2,
    dtype: DTypeName = "float16",
    epochs: int = 2,
    warmup: int = 1,
    seconds: float | None = None,
    progress: bool = True,
) -> Measurement:
    """Run one contender in this process (call it in a fresh process: see ``run_isolated``)."""
    if name == "trdata":
        return trdata_contender(
            root,
            batch_size=batch_size,
            workers=workers,
            dtype=dtype,
            epochs=epochs,
            warmup=warmup,
            seconds=seconds,
            progress=progress,
        )
    if name.startswith("decode-"):
        paths, _labels = image_folder_files(root)
        return decode_ceiling(paths, int(name.split("-", 1)[1]), repeat=max(1, epochs))
    raise ValueError(f"unknown contender {name!r}; expected one of {CONTENDERS}")


#: The command ``run_isolated`` starts for one contender: this module's ``child_main``.
CHILD = (sys.executable, "-m", "trdata._bench")


def run_isolated(
    name: str,
    root: str,
    cpus: Sequence[int],
    *,
    child: Sequence[str] = CHILD,
    label: str | None = None,
    timeout_s: float = 900,
    **options: Any,
) -> Measurement:
    """Run contender ``name`` in a fresh Python process bound to ``cpus`` (so no contender inherits another's
    threads, imports or page-cache warmth beyond the files themselves) and return its Measurement. ``child``
    is the command that runs one contender (``child_main``'s arguments follow it); ``label`` names the row
    when the child fails (default ``display_name(name)``). Crashes and timeouts become a row with ``error``
    set instead of an exception."""
    import json
    import subprocess
    import tempfile

    label = label or display_name(name)
    with tempfile.TemporaryDirectory(prefix="trdata-bench-") as tmp:
        out = os.path.join(tmp, "result.json")
        cmd = [
            *child,
            name,
            "--data",
            root,
            "--out",
            out,
            "--cpus",
            ",".join(map(str, cpus)),
        ]
        for key, value in options.items():
            if value is None:
                continue
            if isinstance(value, bool):
                if not value:
                    cmd.append(f"--no-{key.replace('_', '-')}")
                continue
            cmd += [f"--{key.replace('_', '-')}", str(value)]
        try:
            proc = subprocess.run(
                cmd, check=False, timeout=timeout_s, stdout=subprocess.PIPE, stderr=None, text=True
            )
        except subprocess.TimeoutExpired:
            return Measurement(name=label, key=name, error=f"timed out after {timeout_s:.0f} s")
        if proc.returncode != 0 or not os.path.exists(out):
            tail = (proc.stdout or "").strip().splitlines()[-1:] or [f"exit code {proc.returncode}"]
            return Measurement(name=label, key=name, error=f"failed: {tail[0]}")
        with open(out) as f:
            d = json.load(f)
    m = Measurement(
        name=d["name"],
        key=name,
        images=d["images"],
        seconds=d["seconds"],
        cpu_seconds=d.get("cpu_seconds"),
        epochs=d["epochs"],
        warmup_epochs=d["warmup_epochs"],
        note=d["note"],
        extra=d["extra"],
        error=d["error"],
    )
    return m


# ----------------------------------------------------------------------------------------------------------
# Suites: several contenders, each isolated, optionally in interleaved rounds
# ----------------------------------------------------------------------------------------------------------


def add_suite_arguments(ap: Any, default_data: str) -> None:
    """The options every CPU-box suite script shares (benches/packed.py, benches/recipes.py): --data, --cpus,
    --workers, --epochs, --rounds; :func:`suite_cpus` applies the first three."""
    ap.add_argument("--data", default=default_data)
    ap.add_argument("--cpus", default=None, help="default: the first 2 allowed CPUs")
    ap.add_argument("--workers", type=int, default=None, help="default: one per CPU")
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=1)


def suite_cpus(args: Any) -> tuple[list[int], int]:
    """(CPUs, workers) from :func:`add_suite_arguments`' options; this process is bound to those CPUs."""
    cpus = parse_cpus(args.cpus) if args.cpus else allowed_cpus()[:2]
    restrict_cpus(cpus)
    return cpus, args.workers or len(cpus)


def run_suite(
    names: Sequence[str],
    root: str,
    cpus: Sequence[int],
    *,
    rounds: int = 1,
    stat: str = "best",
    log: Callable[[str], None] | None = None,
    runner: Callable[..., Measurement] = run_isolated,
    **options: Any,
) -> list[Measurement]:
    """Run ``names`` one after another, each in a fresh process bound to ``cpus``. With ``rounds`` > 1 the
    whole sequence repeats, interleaved (so a burst of background load hits every contender alike), and each
    contender reports its ``stat`` round: ``best`` (default: background load only ever slows a contender
    down, so the fastest round is the least disturbed estimate of what it can do) or ``median``. All rounds
    stay in ``extra['rounds_img_per_s']``. ``runner(name, root, cpus, **options)`` runs one contender
    (``run_isolated`` knows trdata and decode-N; ``benches/peers.py`` brings its own); ``options`` reach the
    contender (decode ceilings: repeat = epochs)."""
    import statistics

    if stat not in ("best", "median"):
        raise ValueError(f"stat must be 'best' or 'median', got {stat!r}")
    per_name: dict[str, list[Measurement]] = {n: [] for n in names}
    for r in range(rounds):
        for name in names:
            if log is not None:
                log(f"[{r + 1}/{rounds}] {name}" if rounds > 1 else f"{name}")
            per_name[name].append(runner(name, root, cpus, **options))
    results = []
    for name in names:
        runs = per_name[name]
        ok = [m for m in runs if m.error is None]
        if not ok:
            results.append(runs[-1])
            continue
        rates = [m.img_per_s for m in ok]
        pick = max(rates) if stat == "best" else statistics.median_low(rates)
        chosen = next(m for m in ok if m.img_per_s == pick)
        if len(runs) > 1:
            chosen.extra["rounds_img_per_s"] = [round(m.img_per_s, 1) for m in ok]
            chosen.extra["rounds_stat"] = stat
        results.append(chosen)
    return results


def results_table(results: Sequence[Measurement], reference: Measurement | None) -> str:
    """Rows: contender, img/s, every round's img/s (when several), images per CPU-second, reference ÷
    contender (how many times faster the reference is, by img/s), note."""
    multi = any(m.extra.get("rounds_img_per_s") for m in results)
    rows = []
    for m in results:
        rounds = (", ".join(fmt_rate(v) for v in m.extra.get("rounds_img_per_s", [])),) if multi else ()
        if m.error is not None:
            rows.append((m.name, "—", *(("",) if multi else ()), "—", "—", m.error))
            continue
        usable = reference is not None and reference.error is None and m.img_per_s > 0
        ratio = reference.img_per_s / m.img_per_s if usable and reference is not None else None
        per_cpu = "—" if m.img_per_cpu_s is None else fmt_rate(m.img_per_cpu_s)
        rows.append((m.name, fmt_rate(m.img_per_s), *rounds, per_cpu, fmt_ratio(ratio), m.note))
    ref = reference.name if reference else "reference"
    stat = next((m.extra["rounds_stat"] for m in results if m.extra.get("rounds_stat")), "")
    headers = ("contender", f"img/s ({stat})" if multi else "img/s", *(("rounds",) if multi else ()))
    headers += ("img/CPU-s", f"{ref} ÷ it", "note")
    return format_table(headers, rows, "lr" + ("l" if multi else "") + "rrl")


# ----------------------------------------------------------------------------------------------------------
# The child process of run_isolated
# ----------------------------------------------------------------------------------------------------------


def child_main(
    argv: Sequence[str] | None = None,
    *,
    run: Callable[..., Measurement] = run_contender,
    prog: str = "python -m trdata._bench",
    contenders: Sequence[str] = CONTENDERS,
) -> int:
    """``PROG CONTENDER --data DIR --out FILE [...]``: run one contender with ``run`` (``run_contender``
    signature) in this process and write its result as JSON (what ``run_isolated`` starts)."""
    import argparse
    import json
    import traceback

    ap = argparse.ArgumentParser(prog=prog)
    ap.add_argument("contender", help=f"one of {', '.join(contenders)}")
    ap.add_argument("--data", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--cpus", default=None)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--dtype", default="float16")
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--seconds", type=float, default=None)
    ap.add_argument("--no-progress", dest="progress", action="store_false")
    args = ap.parse_args(argv)
    if args.cpus:
        restrict_cpus(parse_cpus(args.cpus))
    try:
        m = run(
            args.contender,
            args.data,
            batch_size=args.batch_size,
            workers=args.workers,
            dtype=args.dtype,
            epochs=args.epochs,
            warmup=args.warmup,
            seconds=args.seconds,
            progress=args.progress,
        )
    except Exception as e:
        traceback.print_exc()
        print(f"{type(e).__name__}: {e}")
        return 1
    with open(args.out, "w") as f:
        json.dump(m.to_json(), f)
    return 0


if __name__ == "__main__":
    sys.exit(child_main())
