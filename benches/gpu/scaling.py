"""Loader-only (no model) scaling of trdata across worker counts, and the uint8 vs bf16/fp16/fp32 transfer
trade-off, on the same files and cores.

    python benches/gpu/scaling.py --data ROOT [--workers 1,2,4,8,16] [--devices cuda:0,cpu] [--dtypes
        uint8,bfloat16,float16,float32] [--dtype-workers N] [--seconds 5] [--trials 1] [--pin round-robin]
        [--json out.json] [--png out.png] [--plot-only earlier.json]

Scaling: for each device and worker count, a fresh Loader (RandomResizedCrop(224) + flip + IMAGENET
normalize, bfloat16, NHWC, batch 256, shuffle, last_batch='drop') is iterated for ≥ --warmup-seconds and ≥ 3
batches untimed, then for ≥ --seconds and ≥ 8 batches timed (from one batch's arrival to the last one's; the
device path then synchronizes). Efficiency(w) = img/s(w) / (w × img/s(1)).
With --trials K each point is run K times and the median trial is reported (all K img/s kept in the JSON).
Each point also reports the epoch boundaries crossed in the timed window and "stalls": inter-batch gaps over
4× the median gap (count, total excess ms, largest gap), which separates steady-state rate from hiccups. For device='cpu' the batches stay
on the host (no copy), which isolates the worker pool from the transfer station.

Transfer: at --dtype-workers (default: allowed cores) on device='cuda:0', each dtype's bytes per batch, H2D
ms per batch (stats() h2d_ns / h2d_batches: copy issue → completion event), effective GB/s while copying,
img/s, and the consumer's wait. uint8 skips normalization in the workers (the training loop then casts and
normalizes on the GPU; rn50_train.py's trdata-u8 config measures that end to end).

The plot is written with matplotlib when it imports, else with a tiny built-in PNG writer (lines and points,
no text: the JSON carries the numbers)."""

from __future__ import annotations

import argparse
import json
import struct
import sys
import time
import zlib
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benches/: the shared `common` package
from common import allowed_cores, folder_files, write_json  # noqa: E402
from common.recipe import train_loader  # noqa: E402

BATCH = 256


def measure(
    paths, labels, device, workers, dtype, warm_s, seconds, batch=BATCH, layout="NHWC", pin="round-robin"
):

    cuda = device != "cpu"
    if cuda:
        import torch
    ld = train_loader(
        paths, labels, batch=batch, dtype=dtype, layout=layout, workers=workers, device=device, pin=pin
    )
    pc = time.perf_counter
    epochs = 0
    try:
        it = iter(ld)

        def nxt():
            nonlocal it, epochs
            try:
                return next(it)
            except StopIteration:
                epochs += 1
                it = iter(ld)
                return next(it)

        t_begin = pc()
        n = 0
        while n < 3 or pc() - t_begin < warm_s:
            b = nxt()
            n += 1
        b = None
        if cuda:
            torch.cuda.synchronize()
        s0 = ld.stats()
        epochs = 0
        t0 = pc()
        n = 0
        wait = 0.0
        gaps = []
        last = t0
        while n < 8 or pc() - t0 < seconds:
            a = pc()
            b = nxt()
            now = pc()
            wait += now - a
            gaps.append(now - last)
            last = now
            n += 1
            del b  # the batch's buffer goes back to the loader now
        if cuda:
            torch.cuda.synchronize()
        dt = pc() - t0
        s1 = ld.stats()
    finally:
        ld.close()
    d = {
        k: s1.get(k, 0) - s0.get(k, 0)
        for k in set(s1) | set(s0)
        if isinstance(s1.get(k, 0), int)
        and k not in ("buffers_allocated", "device_slots_allocated", "unpinned_host_buffers")
    }
    out = {
        "device": device,
        "workers": workers,
        "dtype": dtype,
        "batches": n,
        "seconds": round(dt, 3),
        "img_per_s": round(n * batch / dt, 1),
        "host_wait_frac": round(wait / dt, 4),
        "pin": pin,
        "epoch_boundaries": epochs,
    }
    gs = sorted(gaps)
    med = gs[len(gs) // 2]
    out.update(
        gap_median_ms=round(med * 1e3, 2),
        gap_max_ms=round(gs[-1] * 1e3, 1),
        stalls=sum(g > 4 * med for g in gaps),
        stall_ms=round(sum(g - med for g in gaps if g > 4 * med) * 1e3, 1),
    )
    for k in ("decode_ns", "augment_ns", "read_ns", "worker_wait_ns", "consumer_wait_ns", "samples"):
        if k in d:
            out[k] = d[k]
    if d.get("samples"):
        out["cpu_us_per_image"] = round(
            (d.get("decode_ns", 0) + d.get("augment_ns", 0) + d.get("read_ns", 0)) / d["samples"] / 1e3, 1
        )
    if cuda and d.get("h2d_batches"):
        out.update(
            h2d_batches=d["h2d_batches"],
            h2d_bytes_per_batch=d["h2d_bytes"] // d["h2d_batches"],
            h2d_ms_per_batch=round(d["h2d_ns"] / d["h2d_batches"] / 1e6, 3),
            h2d_GBps_while_copying=round(d["h2d_bytes"] / max(1, d["h2d_ns"]), 2),
            h2d_wait_host_ms_per_batch=round(d.get("h2d_wait_host_ns", 0) / d["h2d_batches"] / 1e6, 2),
            h2d_wait_slot_ms_per_batch=round(d.get("h2d_wait_slot_ns", 0) / d["h2d_batches"] / 1e6, 2),
        )
    return out


# --------------------------------------------------------------------------------------------- plotting


def plot_matplotlib(curves, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.2))
    for dev, pts in curves.items():
        ws = [p["workers"] for p in pts]
        ax1.plot(ws, [p["img_per_s"] for p in pts], "o-", label=f"trdata {dev}")
        ax2.plot(ws, [100 * p["efficiency"] for p in pts], "o-", label=f"trdata {dev}")
        if pts:
            base = pts[0]["img_per_s"] / pts[0]["workers"]
            ax1.plot(ws, [base * w for w in ws], ":", color="gray", label=f"linear ({dev})")
    ax1.set(xlabel="workers", ylabel="img/s", title="trdata loader-only throughput (RRC224+flip, bf16)")
    ax1.set_xscale("log", base=2)
    ax1.set_xticks([p["workers"] for p in next(iter(curves.values()))])
    ax1.get_xaxis().set_major_formatter(matplotlib.ticker.ScalarFormatter())
    ax2.set(xlabel="workers", ylabel="% of linear", title="scaling efficiency vs 1 worker", ylim=(0, 110))
    ax2.axhline(90, color="red", ls="--", lw=0.8, label="90% target")
    ax2.set_xscale("log", base=2)
    ax2.set_xticks(ax1.get_xticks())
    ax2.get_xaxis().set_major_formatter(matplotlib.ticker.ScalarFormatter())
    for ax in (ax1, ax2):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return "matplotlib"


def plot_fallback(curves, path, w=640, h=400):
    """Minimal PNG: axes, a dotted linear reference, one coloured polyline + dots per device. No text."""
    img = [[(255, 255, 255)] * w for _ in range(h)]
    m = 40
    allpts = [p for pts in curves.values() for p in pts]
    xmax = max(p["workers"] for p in allpts)
    ymax = (
        max(
            max(p["img_per_s"] for p in allpts),
            max(pts[0]["img_per_s"] / pts[0]["workers"] * xmax for pts in curves.values() if pts),
        )
        * 1.05
    )

    def xy(x, y):
        return m + int((x / xmax) * (w - 2 * m)), h - m - int((y / ymax) * (h - 2 * m))

    def put(x, y, c):
        if 0 <= x < w and 0 <= y < h:
            img[y][x] = c

    def line(p, q, c, dotted=False):
        (x0, y0), (x1, y1) = p, q
        n = max(abs(x1 - x0), abs(y1 - y0), 1)
        for i in range(n + 1):
            if dotted and (i // 4) % 2:
                continue
            put(round(x0 + (x1 - x0) * i / n), round(y0 + (y1 - y0) * i / n), c)

    line(xy(0, 0), xy(xmax, 0), (0, 0, 0))
    line(xy(0, 0), xy(0, ymax), (0, 0, 0))
    colours = [(31, 119, 180), (255, 127, 14), (44, 160, 44)]
    for k, pts in enumerate(curves.values()):
        c = colours[k % len(colours)]
        base = pts[0]["img_per_s"] / pts[0]["workers"]
        line(xy(0, 0), xy(xmax, base * xmax), (150, 150, 150), dotted=True)
        prev = None
        for p in pts:
            q = xy(p["workers"], p["img_per_s"])
            if prev:
                line(prev, q, c)
            for dx in range(-2, 3):
                for dy in range(-2, 3):
                    put(q[0] + dx, q[1] + dy, c)
            prev = q
    raw = b"".join(b"\x00" + bytes(v for px in row for v in px) for row in img)

    def chunk(t, data):
        return struct.pack(">I", len(data)) + t + data + struct.pack(">I", zlib.crc32(t + data) & 0xFFFFFFFF)

    with open(path, "wb") as f:
        f.write(
            b"\x89PNG\r\n\x1a\n"
            + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(raw, 9))
            + chunk(b"IEND", b"")
        )
    return "fallback (no text; numbers in the JSON)"


# ------------------------------------------------------------------------------------------------- main


def table(rows, cols):
    cells = [[str(c) for c in cols]] + [[str(r.get(c, "-")) for c in cols] for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(cols))]
    lines = ["  ".join(c.rjust(wd) for c, wd in zip(row, widths)) for row in cells]
    lines.insert(1, "-" * len(lines[0]))
    return "\n".join(lines)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", required=True)
    p.add_argument("--workers", default="1,2,4,8,16")
    p.add_argument("--devices", default="cuda:0", help="comma list: cuda:0 and/or cpu")
    p.add_argument(
        "--dtypes", default="uint8,bfloat16,float16,float32", help="transfer comparison ('' skips)"
    )
    p.add_argument("--dtype-workers", type=int, default=allowed_cores())
    p.add_argument("--seconds", type=float, default=5.0)
    p.add_argument("--warmup-seconds", type=float, default=1.5)
    p.add_argument(
        "--repeat", type=int, default=0, help="file-list repeats per virtual epoch (0: ≥100 batches)"
    )
    p.add_argument("--trials", type=int, default=1, help="runs per scaling point; the median is reported")
    p.add_argument("--pin", default="round-robin", help="worker binding: none, round-robin, numa")
    p.add_argument("--json", default=None)
    p.add_argument("--png", default=None)
    p.add_argument("--plot-only", default=None, help="re-plot an earlier JSON into --png and exit")
    a = p.parse_args(argv)

    if a.plot_only:
        with open(a.plot_only) as f:
            data = json.load(f)
        curves = {}
        for r in data["scaling"]:
            curves.setdefault(r["device"], []).append(r)
        print(plot_png(curves, a.png or "scaling.png"))
        return 0

    import trdata

    paths, labels = folder_files(a.data)
    repeat = a.repeat or max(1, -(-100 * BATCH // len(paths)))
    paths, labels = paths * repeat, labels * repeat
    header = {
        "cores": allowed_cores(),
        "files": len(paths) // repeat,
        "repeat": repeat,
        "batch": BATCH,
        "trdata": trdata.__version__,
        "python": sys.version.split()[0],
        "pipeline": "RandomResizedCrop(224)+flip+IMAGENET normalize, NHWC, shuffle, drop",
    }
    if any(d != "cpu" for d in a.devices.split(",")) or a.dtypes:
        import torch

        header["gpu"] = torch.cuda.get_device_name(0)
        header["torch"] = torch.__version__
    print("scaling", json.dumps(header), flush=True)
    result = {"header": header, "scaling": [], "transfer": []}

    def save():
        if a.json:
            write_json(a.json, result)

    workers = [int(w) for w in a.workers.split(",") if w]
    curves = {}
    for dev in [d for d in a.devices.split(",") if d]:
        pts = []
        for w in workers:
            trials = [
                measure(paths, labels, dev, w, "bfloat16", a.warmup_seconds, a.seconds, pin=a.pin)
                for _ in range(a.trials)
            ]
            trials.sort(key=lambda t: t["img_per_s"])
            r = dict(trials[len(trials) // 2])  # the median trial (upper median for an even count)
            if a.trials > 1:
                r["trials_img_per_s"] = [t["img_per_s"] for t in trials]
            base = pts[0] if pts else r
            r["efficiency"] = round(r["img_per_s"] / (w / base["workers"] * base["img_per_s"]), 4)
            r["img_per_s_per_worker"] = round(r["img_per_s"] / w, 1)
            pts.append(r)
            result["scaling"].append(r)
            print(json.dumps(r), flush=True)
            save()
        curves[dev] = pts
    for dt in [d for d in a.dtypes.split(",") if d]:
        r = measure(paths, labels, "cuda:0", a.dtype_workers, dt, a.warmup_seconds, a.seconds, pin=a.pin)
        result["transfer"].append(r)
        print(json.dumps(r), flush=True)
        save()

    print()
    if result["scaling"]:
        print("scaling (bfloat16, NHWC, batch 256):")
        print(
            table(
                result["scaling"],
                [
                    "device",
                    "workers",
                    "img_per_s",
                    "img_per_s_per_worker",
                    "efficiency",
                    "trials_img_per_s",
                    "cpu_us_per_image",
                    "epoch_boundaries",
                    "stalls",
                    "stall_ms",
                    "gap_max_ms",
                ],
            )
        )
    if result["transfer"]:
        print(f"\ntransfer at {a.dtype_workers} workers, cuda:0:")
        print(
            table(
                result["transfer"],
                [
                    "dtype",
                    "img_per_s",
                    "h2d_bytes_per_batch",
                    "h2d_ms_per_batch",
                    "h2d_GBps_while_copying",
                    "cpu_us_per_image",
                    "epoch_boundaries",
                    "stalls",
                    "stall_ms",
                ],
            )
        )
    if a.png and curves:
        try:
            how = plot_png(curves, a.png)
            result["png"] = {"path": a.png, "how": how}
            print(f"\nplot: {a.png} ({how})")
        except Exception as e:
            print(f"\nplot skipped: {type(e).__name__}: {e}")
            result["png"] = {"skipped": f"{type(e).__name__}: {e}"}
    save()
    return 0


def plot_png(curves, path):
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return plot_fallback(curves, path)
    return plot_matplotlib(curves, path)


if __name__ == "__main__":
    sys.exit(main())
