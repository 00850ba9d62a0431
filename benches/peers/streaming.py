#!/usr/bin/env python3
"""Streaming from object storage on the CPU box: one pack file, the same CPUs and workers, the classification
recipe (RandomResizedCrop 224 + flip + ImageNet normalize → float16 NCHW, batch 64), in one run:

  local       trdata over Packed(partial) of the pack on local disk (the reference)
  s3          the same file as s3://bench/train.trd from an S3 read server on loopback, 20 ms per request and a
              1 Gbit/s link (below): img/s and its ratio to local, GETs and bytes per epoch (counted by the server
              and by the source's own storage counters)
  s3-cache    the same with cache_bytes = half the pack (when this build's Packed takes cache_bytes; the row says
              "skipped" otherwise): bytes fetched in epoch 1 against epoch 2 (no thrashing: epoch 2 ≤ epoch 1)
  filelist    a FileList of one object per image (the pack's records as objects) from the same server: img/s and
              GETs in flight (most and mean, seen by the server)
  parquet-local, parquet-s3
              trdata.Parquet over the same images as one Parquet file in Hugging Face's layout (an Image struct
              with the bytes embedded, a ClassLabel label; row groups of about a block each, written by pyarrow
              when it is installed): on local disk, and as s3://bench/train.parquet from the same server (its
              ratio to parquet-local is the Parquet target, ≥ 0.9)
  litdata     LitData over the same images: litdata.optimize into the served bucket, then StreamingDataset +
              StreamingDataLoader (the same workers) with the equivalent torchvision v2 transforms; a row saying
              why when it is not installed or fails

Each row runs in a fresh process bound to the CPUs, for --epochs epochs; each epoch's img/s is timed over a window
late in the epoch (--window, default from 25% to 95% of its images: no start-up, no tail), and the row's img/s is
all windows' images over their time. The server and the row's loader share the CPUs, as a remote store would not:
the server's CPU over the windows is reported so its share is visible.

The store, and why it costs (nearly) no CPU. The S3 read server (tests/_servers.py ``S3ReadHandler``: HEAD and
ranged GETs answered with sendfile, ETag/If-Match) runs in a process of its own and sleeps --latency-ms before
every answer (a remote store's time to first byte: a sleeping thread, no CPU). The link rate is the kernel's:
the whole run happens in a network namespace of its own (``unshare -n``, made and removed with this process; only
its loopback, so only its own traffic is shaped) whose loopback gets a token-bucket qdisc (``tc qdisc add dev lo
root tbf rate 1gbit``): the kernel paces the bytes at no cost to the processes. netem (per-packet delay) is not in
every kernel (not in this box's), so the delay is the server's sleep, one per request, as S3's first-byte latency
is. Where a namespace or tbf cannot be made (no root and no user namespaces, no tc) the server paces the bodies
itself (sendfile in 256 KiB chunks booked on one shared link: a sleep per chunk) and the report says so.

    PYTHONPATH=python .venv/bin/python benches/peers/streaming.py              # ~4 min; results/streaming.{md,json}
    PYTHONPATH=python .venv/bin/python benches/peers/streaming.py --quick      # < 1 min; bench-results/
    ... [--data DIR] [--repeat 10] [--epochs 2] [--only local,s3] [--latency-ms 20] [--rate-mbit 1000]

Data: --data (default the ImageNet sample beside the repo; the built-in synthetic dataset when that is absent),
re-encoded once to --short-side (default 320; 0 keeps the stored bytes), then packed --repeat times over with no
further re-encoding: from the 1,000-image sample an epoch of 10,000 images and a pack of ~375 MiB, about twice the
core's default partial cache (a window of 16 blocks of 8 MiB, plus 2 per worker), so that half the pack still holds
a window. --quick packs blocks of 1 MiB and a window of 4 blocks for the same reason. Nothing here asserts timings; the
targets (s3 ≥ 0.95× local, epoch 2 ≤ epoch 1 with the half-size cache) are reported as met or not.
"""

from __future__ import annotations

import argparse
import http.server
import inspect
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import trdata
from trdata import _bench
from trdata._bench import Measurement

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benches/: the shared `common` package
from common import (  # noqa: E402
    DEFAULT_DATA,
    REPO,
    RESULTS,
    run_in_child,
    suite_child,
    write_json,
)

ROWS = ("local", "s3", "s3-cache", "filelist", "litdata", "parquet-local", "parquet-s3")
DISPLAY = {
    "local": "trdata, Packed(partial), local file",
    "s3": "trdata, Packed(partial), s3://",
    "s3-cache": "trdata, Packed(partial), s3://, cache = ½ pack",
    "filelist": "trdata, FileList, one object per image, s3://",
    "litdata": "LitData StreamingDataLoader, s3://",
    "parquet-local": "trdata, Parquet (HF layout), local file",
    "parquet-s3": "trdata, Parquet (HF layout), s3://",
}
BUCKET = "bench"
#: The run's settings (endpoints, object keys, window) that each row's process reads, in the work folder.
CONFIG = "streaming.json"
#: The core's block size (``trdata.pack``'s default); LitData's chunks are made the pack's block size, so both
#: fetch the same grain.
DEFAULT_BLOCK_BYTES = 8 << 20
CREDENTIALS = {"aws_access_key_id": "bench", "aws_secret_access_key": "bench", "aws_region": "us-east-1"}


# ----------------------------------------------------------------------------------------------- the link


def shape_loopback(rate_bits: int) -> str | None:
    """In a fresh network namespace: bring its loopback up with a token bucket of ``rate_bits``/s on it. Returns
    why not (None when done)."""
    cmds = [
        ["ip", "link", "set", "lo", "up"],
        ["tc", "qdisc", "replace", "dev", "lo", "root", "tbf", "rate", f"{rate_bits}bit", "burst", "1mb",
         "latency", "200ms"],
    ]  # fmt: skip
    for cmd in cmds:
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, check=False)
        except OSError as e:
            return f"{cmd[0]}: {e}"
        if r.returncode != 0:
            return f"{' '.join(cmd[:3])}: {r.stderr.strip() or r.returncode}"
    return None


def tbf_counters() -> str:
    """What the loopback's token bucket passed and held back over the run (``tc -s qdisc show dev lo``)."""
    r = subprocess.run(
        ["tc", "-s", "qdisc", "show", "dev", "lo"], capture_output=True, text=True, check=False
    )
    return " ".join(line.strip() for line in r.stdout.splitlines()[:2])


def in_namespace(argv: list[str]) -> int | None:
    """Re-run this script in a network namespace of its own (``unshare -n``, or ``-rn`` when not root): returns
    its exit status, or None when no namespace could be made (the caller then runs here, the server pacing)."""
    if shutil.which("unshare") is None or shutil.which("tc") is None:
        return None
    flags = "-n" if os.geteuid() == 0 else "-rn"
    probe = subprocess.run(["unshare", flags, "true"], capture_output=True, check=False)
    if probe.returncode != 0:
        return None
    cmd = ["unshare", flags, sys.executable, os.path.abspath(__file__), *argv, "--in-namespace"]
    return subprocess.run(cmd, check=False).returncode


# ----------------------------------------------------------------------------------------------- the store


def serve_main(argv: list[str]) -> int:
    """``streaming.py serve FOLDER READY_FILE LATENCY_S RATE``: an S3 read server over FOLDER (RATE bytes/s paced
    by the server, 0 = not), and a stats server whose GET answers the counters as JSON (``?reset`` restarts
    the most-in-flight count); both URLs are written to READY_FILE. Runs until its standard input closes."""
    sys.path.insert(0, str(REPO / "tests"))
    from _servers import serve, start_s3_read_server

    folder, ready, latency_s, rate = argv[0], argv[1], float(argv[2]), float(argv[3])
    s3: Any = start_s3_read_server(Path(folder), latency_s=latency_s, rate=rate or None)
    s3.handle_error = lambda *a: None  # a client closing a kept-alive connection: expected

    class Stats(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def do_GET(self) -> None:  # noqa: N802 - http.server's naming
            with s3.lock:
                now = time.monotonic()
                flight_s = s3.in_flight_s + s3.in_flight * (now - s3.in_flight_since)
                doc = {"t": now, "gets": s3.gets, "bytes": s3.bytes, "most_in_flight": s3.most_in_flight,
                       "in_flight_s": flight_s, "cpu_s": sum(os.times()[:2])}  # fmt: skip
                if "reset" in self.path:
                    s3.most_in_flight = s3.in_flight
            body = json.dumps(doc).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    stats = serve(http.server.ThreadingHTTPServer(("127.0.0.1", 0), Stats))
    tmp = ready + ".tmp"
    with open(tmp, "w") as f:
        json.dump({"endpoint": s3.endpoint, "stats": f"http://127.0.0.1:{stats.server_address[1]}"}, f)
    os.replace(tmp, ready)
    sys.stdin.buffer.read()  # until the run closes the pipe, or dies
    return 0


def start_store(
    folder: Path, latency_s: float, rate: float
) -> tuple[subprocess.Popen[bytes], dict[str, str]]:
    ready = folder.parent / "server.json"
    proc = subprocess.Popen(
        [
            sys.executable,
            os.path.abspath(__file__),
            "serve",
            str(folder),
            str(ready),
            str(latency_s),
            str(rate),
        ],
        stdin=subprocess.PIPE,  # closed when this process ends, however it ends: the server then stops
    )
    deadline = time.monotonic() + 30
    while not ready.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError("the S3 read server did not start")
        time.sleep(0.05)
    return proc, json.loads(ready.read_text())


def stop_store(proc: subprocess.Popen[bytes]) -> None:
    if proc.stdin is not None:
        proc.stdin.close()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def server_stats(url: str | None, reset: bool = False) -> dict[str, Any]:
    if url is None:
        return {}
    with urllib.request.urlopen(url + ("/?reset" if reset else "/"), timeout=10) as r:
        return dict(json.loads(r.read()))


def cpu_times(cpus: list[int]) -> dict[str, float]:
    """Seconds the CPUs ``cpus`` spent busy and in softirq (where the kernel's packet work lands), /proc/stat."""
    tick = os.sysconf("SC_CLK_TCK")
    busy = soft = 0
    with open("/proc/stat") as f:
        for line in f:
            name, *v = line.split()
            if name.startswith("cpu") and name[3:].isdigit() and int(name[3:]) in cpus:
                n = [int(x) for x in v]
                busy += sum(n[:8]) - n[3] - n[4]  # all but idle and iowait
                soft += n[6]
    return {"busy_s": busy / tick, "softirq_s": soft / tick}


# ----------------------------------------------------------------------------------------------- the data


def prepare(
    data: Path, work: Path, short_side: int, repeat: int, workers: int, block_bytes: int | None
) -> dict[str, Any]:
    """The re-encoded images as objects (``bucket/bench/objects/…``) and the pack of them ``repeat`` times over
    (``bucket/bench/train.trd``, their bytes as they are, in blocks of ``block_bytes``, default the core's)."""
    t0 = time.perf_counter()
    reencode = trdata.Reencode(short_side=short_side) if short_side else None
    first = work / "reencoded.trd"
    trdata.pack(trdata.ImageFolder(data), first, reencode=reencode, workers=workers, progress=False)
    info = trdata.sources.packed.inspect(first)
    objects = work / "bucket" / BUCKET / "objects"
    keys, labels = [], []
    with open(first, "rb") as f:
        for i, (off, n, label) in enumerate(zip(info["offsets"], info["lengths"], info["labels"])):
            key = f"objects/c{int(label):04d}/{i:06d}.jpg"
            f.seek(int(off))
            (objects.parent / key).parent.mkdir(parents=True, exist_ok=True)
            (objects.parent / key).write_bytes(f.read(int(n)))
            keys.append(key)
            labels.append(int(label))
    first.unlink()
    files = [str(objects.parent / k) for k in keys]
    classes = list(info["classes"]) if info.get("classes") else [f"c{c:04d}" for c in range(max(labels) + 1)]
    pack = work / "bucket" / BUCKET / "train.trd"
    src = trdata.FileList(files * repeat, labels * repeat, classes=classes)
    trdata.pack(src, pack, workers=workers, progress=False, block_bytes=block_bytes)
    parquet = write_parquet(
        files, labels, classes, repeat, work / "bucket" / BUCKET / "train.parquet", block_bytes
    )
    return {
        "parquet_bytes": parquet,
        "images": len(files),
        "repeat": repeat,
        "pack_images": len(files) * repeat,
        "pack_bytes": pack.stat().st_size,
        "short_side": short_side,
        "image_bytes_mean": round(sum(os.path.getsize(p) for p in files) / len(files)),
        "keys": keys,
        "labels": labels,
        "classes": classes,
        "prepare_s": round(time.perf_counter() - t0, 1),
    }


def write_parquet(
    files: list[str], labels: list[int], classes: list[str], repeat: int, out: Path, block_bytes: int | None
) -> int | None:
    """``files`` ``repeat`` times over as one Parquet file in Hugging Face's layout (``image`` struct of bytes and
    path, ``label`` int64 with the ClassLabel names in the ``huggingface`` metadata), row groups of about
    ``block_bytes`` (default the core's 8 MiB): its size, or None without pyarrow (the Parquet rows say so)."""
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        return None
    blobs = [Path(f).read_bytes() for f in files]
    mean = sum(map(len, blobs)) / len(blobs)
    rows = max(1, int((block_bytes or 8 << 20) // mean))
    image_type = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
    features = {"image": {"_type": "Image"}, "label": {"names": classes, "_type": "ClassLabel"}}
    schema = pa.schema([("image", image_type), ("label", pa.int64())]).with_metadata(
        {"huggingface": json.dumps({"info": {"features": features}})}
    )
    images = [{"bytes": b, "path": os.path.basename(f)} for b, f in zip(blobs, files)]
    once = pa.table({"image": images, "label": labels}, schema=schema)
    pq.write_table(pa.concat_tables([once] * repeat), out, row_group_size=rows, compression="none")
    return out.stat().st_size


# ----------------------------------------------------------------------------------------------- timing


def windowed_epochs(
    epoch_batches: Callable[[int], Iterator[int]],
    per_epoch: int,
    epochs: int,
    window: tuple[float, float],
    snap: Callable[[bool], dict[str, Any]],
) -> tuple[Measurement, list[dict[str, Any]]]:
    """Run ``epochs`` epochs; in each, time the images from ``window[0]`` to ``window[1]`` of the epoch's count.
    ``snap(reset)`` reads the counters (store, source, CPU): at each epoch's start and end and the window's."""
    m = Measurement(name="", warmup_epochs=0)
    m.cpu_seconds = 0.0
    rows = []
    for e in range(epochs):
        lo, hi = window[0] * per_epoch, window[1] * per_epoch
        start = snap(False)
        t_start = time.perf_counter()
        seen, a, b = 0, None, None
        for n in epoch_batches(e):
            seen += n
            if a is None and seen >= lo:  # the counters read before the clock starts, after it stops
                at_a = snap(True)
                a = (time.perf_counter(), seen, at_a)
            if b is None and seen >= hi:
                b = (time.perf_counter(), seen, snap(False))
        end = snap(False)
        if a is None or b is None or b[0] <= a[0]:
            raise RuntimeError(f"epoch {e}: {seen} images, too few for the window {window}")
        dt, images = b[0] - a[0], b[1] - a[1]
        m.images += images
        m.seconds += dt
        m.cpu_seconds += (b[2]["tree_cpu_s"] or 0.0) - (a[2]["tree_cpu_s"] or 0.0)
        m.epochs += 1
        rows.append(epoch_row(e, seen, time.perf_counter() - t_start, dt, images, start, a[2], b[2], end))
    return m, rows


def _delta(x: dict[str, Any], y: dict[str, Any], key: str) -> Any:
    return None if key not in x or key not in y else y[key] - x[key]


def epoch_row(
    e: int, seen: int, wall: float, dt: float, images: int, *snaps: dict[str, Any]
) -> dict[str, Any]:
    start, a, b, end = snaps
    row: dict[str, Any] = {"epoch": e + 1, "images": seen, "epoch_s": round(wall, 2), "window_images": images,
                           "window_s": round(dt, 3), "img_per_s": round(images / dt, 1)}  # fmt: skip
    # the whole epoch: what was fetched
    for key in (
        "gets",
        "bytes",
        "source_requests",
        "source_bytes",
        *(k for k in end if k.startswith("loader_")),
    ):
        row[f"epoch_{key}"] = _delta(start, end, key)
    # the window: the CPU each side took, GETs in flight
    row["window_loader_cpu_s"] = round((b["tree_cpu_s"] or 0) - (a["tree_cpu_s"] or 0), 3)
    for key in ("cpu_s", "busy_s", "softirq_s"):
        v = _delta(a, b, key)
        row[f"window_{'server_cpu_s' if key == 'cpu_s' else key}"] = None if v is None else round(v, 3)
    if "in_flight_s" in a:
        row["window_gets_in_flight_mean"] = round(
            (b["in_flight_s"] - a["in_flight_s"]) / (b["t"] - a["t"]), 2
        )
        row["window_gets_in_flight_most"] = b["most_in_flight"]
        row["window_gets"] = b["gets"] - a["gets"]
    return row


# ----------------------------------------------------------------------------------------------- the rows


def trdata_epochs(source: Any, batch_size: int, workers: int) -> tuple[Any, Callable[[int], Iterator[int]]]:
    """The classification recipe over ``source`` (``_bench.trdata_contender``'s loader)."""
    loader = _bench.standard_loader(source, batch_size, workers, "float16")

    def epoch_batches(e: int) -> Iterator[int]:
        loader.set_epoch(e)
        for batch in loader:
            yield int(batch.valid)

    return loader, epoch_batches


def litdata_epochs(cfg: dict[str, Any], work: Path, batch_size: int, workers: int) -> Any:
    """litdata.optimize of the same images (their bytes and labels) into the served bucket, then a
    StreamingDataset over s3:// with a torchvision v2 recipe equal to trdata's, in a StreamingDataLoader."""
    import litdata

    out = work / "bucket" / BUCKET / "litdata"
    objects = work / "bucket" / BUCKET
    if not (out / "index.json").exists():
        t0 = time.perf_counter()
        items = [(str(objects / k), lab) for k, lab in zip(cfg["keys"], cfg["labels"])] * cfg["repeat"]
        litdata.optimize(
            fn=_litdata_item,
            inputs=items,
            output_dir=str(out),
            chunk_bytes=cfg["block_bytes"],
            num_workers=1,  # preparation, untimed: one process starts faster than two here
            mode="overwrite",
            verbose=False,
        )
        cfg["litdata_optimize_s"] = round(time.perf_counter() - t0, 1)
    cache = work / "litdata-cache"
    shutil.rmtree(cache, ignore_errors=True)
    dataset = litdata.StreamingDataset(
        f"s3://{BUCKET}/litdata",
        shuffle=True,
        seed=0,
        cache_dir=str(cache),
        storage_options=litdata_storage_options(cfg["endpoint"]),
        transform=LitdataRecipe(),
    )
    litdata_worker_init(-1)
    loader = litdata.StreamingDataLoader(
        dataset,
        batch_size=batch_size,
        num_workers=workers,
        persistent_workers=True,
        worker_init_fn=litdata_worker_init,
    )

    def epoch_batches(e: int) -> Iterator[int]:
        for _images, labels in loader:
            yield int(labels.shape[0])

    return dataset, epoch_batches


class LitdataRecipe:
    """LitData's item (the JPEG's bytes, its label) → torchvision's decode_jpeg + ``common.peers``' v2 recipe (the
    torch-v2 peer's), built in the worker on first use."""

    def __init__(self) -> None:
        self.transform: Any = None

    def __call__(self, item: dict[str, Any]) -> tuple[Any, int]:
        import torch
        from torchvision.io import ImageReadMode, decode_jpeg

        if self.transform is None:
            from common.peers import torch_v2_transform

            self.transform = torch_v2_transform()
        data = torch.frombuffer(bytearray(item["image"]), dtype=torch.uint8)
        return self.transform(decode_jpeg(data, mode=ImageReadMode.RGB)), item["label"]


def litdata_worker_init(_worker_id: int) -> None:
    """In each LitData worker (spawned): one torch thread, as torch's DataLoader sets; and plain-HTTP endpoints
    allowed for obstore. LitData (0.2.76) streams chunks through an obstore S3Store built with a fixed
    ``client_options`` dict that replaces what the environment (``AWS_ALLOW_HTTP``) would set, so the loopback
    server's http:// endpoint is refused before any request ("builder error", reqwest's BadScheme); the dict is
    LitData's module state, so the flag is added to it here, in every process that downloads."""
    import torch
    from litdata.streaming import downloader

    torch.set_num_threads(1)
    options = getattr(downloader, "_OBSTORE_CLIENT_OPTIONS", None)
    if isinstance(options, dict):
        options["allow_http"] = True


def _litdata_item(item: tuple[str, int]) -> dict[str, Any]:
    path, label = item
    with open(path, "rb") as f:
        return {"image": f.read(), "label": label}


def litdata_storage_options(endpoint: str) -> dict[str, Any]:
    """boto3's client arguments as LitData passes them on (``S3Client(storage_options)``)."""
    return {"endpoint_url": endpoint, **{k: v for k, v in CREDENTIALS.items() if k != "aws_region"}}


def run_contender(
    name: str, root: str, *, batch_size: int = 64, workers: int = 2, **timing: Any
) -> Measurement:
    """One row in this process (``child`` mode); ``root`` is the work folder."""
    work = Path(root)
    cfg = json.loads((work / CONFIG).read_text())
    pack = work / "bucket" / BUCKET / "train.trd"
    options = {"aws_endpoint": cfg["endpoint"], "aws_allow_http": True, **CREDENTIALS}
    stats_url = None if name in ("local", "parquet-local") else cfg["stats"]
    before_open = server_stats(stats_url)
    source: Any = None
    note = ""
    if name == "local":
        source = trdata.Packed(pack, "partial", window_blocks=cfg["window_blocks"])
    elif name in ("s3", "s3-cache"):
        kw: dict[str, Any] = {}
        if cfg.get("prefetch_blocks") is not None:
            kw["prefetch_blocks"] = cfg["prefetch_blocks"]
        if name == "s3-cache":
            if "cache_bytes" not in inspect.signature(trdata.Packed).parameters:
                return Measurement(
                    name=DISPLAY[name], key=name, error="skipped: cache_bytes not in this build"
                )
            kw["cache_bytes"] = pack.stat().st_size // 2
            note = f"cache_bytes {kw['cache_bytes'] / 2**20:.0f} MiB; "
        source = trdata.Packed(
            f"s3://{BUCKET}/train.trd",
            "partial",
            window_blocks=cfg["window_blocks"],
            storage_options=options,
            **kw,
        )
    elif name in ("parquet-local", "parquet-s3"):
        if cfg.get("parquet_bytes") is None:
            return Measurement(name=DISPLAY[name], key=name, error="skipped: pyarrow is not installed")
        if not hasattr(trdata, "Parquet"):
            return Measurement(
                name=DISPLAY[name], key=name, error="skipped: trdata.Parquet not in this build"
            )
        where = work / "bucket" / BUCKET / "train.parquet"
        remote = name == "parquet-s3"
        source = trdata.Parquet(
            f"s3://{BUCKET}/train.parquet" if remote else str(where),
            window_blocks=cfg["window_blocks"],
            storage_options=options if remote else None,
        )
        note = "row groups as units; "
    elif name == "filelist":
        n, times = cfg["filelist_images"], -(-cfg["filelist_images"] // len(cfg["keys"]))
        urls = ([f"s3://{BUCKET}/{k}" for k in cfg["keys"]] * times)[:n]
        labels = (cfg["labels"] * times)[:n]
        source = trdata.FileList(urls, labels, classes=cfg["classes"], storage_options=options)
    if name == "litdata":
        source, epoch_batches = litdata_epochs(cfg, work, batch_size, workers)
        loader = None
        note = (
            f"litdata {_version('litdata')}, {workers} worker processes, torchvision v2, "
            f"chunks of {cfg['block_bytes'] / 2**20:g} MiB kept on local disk once fetched (its cache_dir); "
        )
    else:
        loader, epoch_batches = trdata_epochs(source, batch_size, workers)
        note += f"{workers} workers; "
    opened = server_stats(stats_url)
    # what one epoch's images take in the store: the pack, the objects listed, LitData's chunks
    if name == "filelist":
        data_bytes = sum((work / "bucket" / BUCKET / u.split("/", 3)[3]).stat().st_size for u in urls)
    elif name == "litdata":
        data_bytes = sum(f.stat().st_size for f in (work / "bucket" / BUCKET / "litdata").glob("*.bin"))
    elif name.startswith("parquet"):
        data_bytes = cfg["parquet_bytes"]
    else:
        data_bytes = pack.stat().st_size
    native = getattr(source, "_native", None)
    cpus = sorted(os.sched_getaffinity(0))

    def snap(reset: bool) -> dict[str, Any]:
        s = server_stats(stats_url, reset)
        s["tree_cpu_s"] = _bench.tree_cpu_seconds()
        s.update(cpu_times(cpus))
        storage = getattr(native, "storage_stats", None)
        if storage:
            s["source_requests"], s["source_bytes"] = storage["storage_requests"], storage["storage_bytes"]
        if loader is not None:  # the loader's own storage/cache counters, where this build has them
            s.update(
                (f"loader_{k}", v)
                for k, v in loader.stats().items()
                if ("storage" in k or "cache" in k) and isinstance(v, int)
            )
        return s

    try:
        m, epochs = windowed_epochs(epoch_batches, len(source), timing["epochs"], tuple(cfg["window"]), snap)
        m.extra = {"epochs": epochs, "images_per_epoch": len(source), "data_bytes": data_bytes}
    finally:
        if loader is not None:
            loader.close()
    m.name, m.key = DISPLAY[name], name
    m.note = note + f"window {cfg['window'][0]:.0%}–{cfg['window'][1]:.0%}"
    if opened:  # opening the source (header and index, LitData's index.json), before the first epoch
        m.extra["open_gets"] = opened["gets"] - before_open["gets"]
        m.extra["open_bytes"] = opened["bytes"] - before_open["bytes"]
    if "litdata_optimize_s" in cfg:
        m.extra["litdata_optimize_s"] = cfg["litdata_optimize_s"]
    return m


def _version(module: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(module)
    except PackageNotFoundError:
        return "?"


def run_row(name: str, work: Path, cpus: list[int], epochs: int, workers: int) -> Measurement:
    if name == "litdata":
        missing = [m for m in ("litdata", "torch", "torchvision") if not _importable(m)]
        if missing:
            return Measurement(name=DISPLAY[name], key=name, error=f"not installed ({', '.join(missing)})")
    return run_in_child(
        __file__, name, str(work), cpus, label=DISPLAY[name], epochs=epochs, warmup=0, workers=workers,
        batch_size=64, progress=False,
    )  # fmt: skip


def best_round(runs: list[Measurement]) -> Measurement:
    """A row's fastest round (background load only ever slows a row down), every round's img/s in its extra."""
    ok = [m for m in runs if m.error is None]
    if not ok:
        return runs[-1]
    best = max(ok, key=lambda m: m.img_per_s)
    if len(runs) > 1:  # every round's rate and what each of its epochs fetched (a slow round is no less real)
        best.extra["rounds_img_per_s"] = [round(m.img_per_s, 1) for m in ok]
        best.extra["rounds_epoch_bytes"] = [
            [
                e["epoch_bytes"] if e["epoch_bytes"] is not None else e["epoch_source_bytes"]
                for e in m.extra["epochs"]
            ]
            for m in ok
        ]
    return best


def _importable(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


# ----------------------------------------------------------------------------------------------- the report


def mib(v: Any) -> str:
    return "—" if v is None else f"{v / 2**20:,.1f}"


def report(doc: dict[str, Any]) -> str:
    rows = doc["rows"]
    local = next((r for r in rows if r["key"] == "local" and not r["error"]), None)
    d, store = doc["data"], doc["store"]
    lines = [
        f"CPU box ({doc['machine'].get('cpu_model', '?')}), CPUs {doc['cpus']}, {doc['workers']} workers, batch 64, "
        f"RandomResizedCrop 224 + flip + normalize → float16; {d['pack_images']:,} images per epoch "
        f"({d['images']:,} × {d['repeat']}, short side {d['short_side'] or 'as stored'}), pack {mib(d['pack_bytes'])} MiB, "
        f"mean image {d['image_bytes_mean'] / 1024:.1f} KiB, blocks of {doc['block_bytes'] / 2**20:g} MiB, "
        f"window {doc['window_blocks'] or 'default'} blocks, read-ahead over s3:// "
        f"{doc.get('prefetch_blocks') or 'default'} blocks; {doc['epochs']} epochs, each timed from "
        f"{doc['window'][0]:.0%} to {doc['window'][1]:.0%} of its images"
        + (f"; each row's best of {doc['rounds']} interleaved rounds" if doc.get("rounds", 1) > 1 else "")
        + ". Store: S3 read server on loopback, "
        f"{store['latency_ms']:g} ms per request, {store['rate_mbit']} Mbit/s ({store['shaper']}"
        + (f"; tbf: {store['tbf']}" if store.get("tbf") else "")
        + "). "
        f"Load average at the end: {doc['load_average']}.",
        "",
        "| row | img/s | × local | loader CPU ms / img | store CPU, % of a core | softirq, % of the CPUs "
        "| CPUs busy (anything), % | note |",
        "|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in rows:
        if r["error"]:
            lines.append(f"| {r['name']} | — | — | — | — | — | — | {r['error']} |")
            continue
        ep = r["extra"]["epochs"]
        ratio = f"{r['img_per_s'] / local['img_per_s']:.3f}" if local and r["key"] != "local" else ""
        per_img = f"{1000 * r['cpu_seconds'] / r['images']:.2f}" if r.get("cpu_seconds") else "—"
        lines.append(
            f"| {r['name']} | {r['img_per_s']:,.0f} | {ratio} | {per_img} | {window_share(ep, 'window_server_cpu_s')} "
            f"| {window_share(ep, 'window_softirq_s', len(doc['cpus']))} "
            f"| {window_share(ep, 'window_busy_s', len(doc['cpus']))} | {r['note']}{rounds_note(r)} |"
        )
    lines += [
        "",
        "Per epoch (GETs and MiB: the whole epoch, counted by the server; source: trdata's own storage counters, "
        "reads of the local file included; ÷ data: the bytes fetched (read, for the local file) over the bytes the "
        "epoch's images take in the store; in flight: GETs open at the server during the window, most / "
        "time-weighted mean):",
        "",
        "| row | epoch | img/s (window) | GETs | MiB fetched | ÷ data | source GETs / MiB | GETs in flight |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        if r["error"]:
            continue
        for e in r["extra"]["epochs"]:
            source = (
                "—"
                if e["epoch_source_requests"] is None
                else f"{e['epoch_source_requests']:,} / {mib(e['epoch_source_bytes'])}"
            )
            fetched = e["epoch_bytes"] if e["epoch_bytes"] is not None else e["epoch_source_bytes"]
            share = "—" if fetched is None else f"{fetched / r['extra']['data_bytes']:.2f}"
            gets = "—" if e["epoch_gets"] is None else f"{e['epoch_gets']:,}"
            flight = (
                f"{e['window_gets_in_flight_most']} / {e['window_gets_in_flight_mean']:.1f}"
                if "window_gets_in_flight_most" in e
                else "—"
            )
            lines.append(
                f"| {r['name']} | {e['epoch']} | {e['img_per_s']:,.0f} | {gets} | {mib(e['epoch_bytes'])} "
                f"| {share} | {source} | {flight} |"
            )
    lines += ["", *verdicts(doc)]
    return "\n".join(lines) + "\n"


def rounds_note(row: dict[str, Any]) -> str:
    """Every round's img/s and, when known, the MiB each of its epochs fetched (read, for the local file)."""
    rounds = row["extra"].get("rounds_img_per_s")
    if not rounds:
        return ""
    fetched = [
        " + ".join(mib(b) for b in epochs)
        for epochs in row["extra"].get("rounds_epoch_bytes", [])
        if None not in epochs
    ]
    return f"; rounds {', '.join(f'{v:,.0f}' for v in rounds)} img/s" + (
        f", MiB per epoch {'; '.join(fetched)}" if fetched else ""
    )


def window_share(epochs: list[dict[str, Any]], key: str, cores: int = 1) -> str:
    """``key``'s CPU seconds over the windows' time (× ``cores``), in percent."""
    used = [(e[key], e["window_s"]) for e in epochs if e.get(key) is not None]
    if not used:
        return "—"
    return f"{100 * sum(u for u, _ in used) / sum(t for _, t in used) / cores:.1f}"


def verdicts(doc: dict[str, Any]) -> list[str]:
    by = {r["key"]: r for r in doc["rows"] if not r["error"]}
    out = []
    if "local" in by and "s3" in by:
        ratio = by["s3"]["img_per_s"] / by["local"]["img_per_s"]
        need = by["local"]["img_per_s"] * doc["data"]["pack_bytes"] / doc["data"]["pack_images"] * 8 / 1e6
        out.append(
            f"- s3 / local = {ratio:.3f} (target ≥ 0.95: {'met' if ratio >= 0.95 else 'not met'}); the local rate "
            f"needs {need:,.0f} Mbit/s of the {doc['store']['rate_mbit']} Mbit/s link."
        )
    if "parquet-local" in by and "parquet-s3" in by:
        ratio = by["parquet-s3"]["img_per_s"] / by["parquet-local"]["img_per_s"]
        out.append(
            f"- parquet-s3 / parquet-local = {ratio:.3f} (target ≥ 0.9: {'met' if ratio >= 0.9 else 'not met'})."
        )
    if "s3-cache" in by:
        ep = by["s3-cache"]["extra"]["epochs"]
        if len(ep) >= 2 and ep[0]["epoch_bytes"] is not None:
            ok = ep[1]["epoch_bytes"] <= ep[0]["epoch_bytes"]
            out.append(
                f"- cache = ½ pack: epoch 1 fetched {mib(ep[0]['epoch_bytes'])} MiB, epoch 2 {mib(ep[1]['epoch_bytes'])} MiB "
                f"(no thrashing, epoch 2 ≤ epoch 1: {'yes' if ok else 'no'})."
            )
    elif any(r["key"] == "s3-cache" for r in doc["rows"]):
        out.append(f"- s3-cache: {next(r['error'] for r in doc['rows'] if r['key'] == 's3-cache')}.")
    return out


# ----------------------------------------------------------------------------------------------- main


def main(argv: list[str]) -> int:
    child = suite_child(argv, __file__, run=run_contender, contenders=ROWS)
    if child is not None:
        return child
    if argv[:1] == ["serve"]:
        return serve_main(argv[1:])
    ap = argparse.ArgumentParser(
        prog="benches/peers/streaming.py", description=(__doc__ or "").split("\n\n")[0]
    )
    ap.add_argument(
        "--data",
        default=str(DEFAULT_DATA),
        help="an ImageFolder (default: the ImageNet sample, else synthetic)",
    )
    ap.add_argument("--cpus", default=None, help="default: the first 2 allowed CPUs")
    ap.add_argument("--workers", type=int, default=None, help="default: one per CPU")
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument(
        "--rounds", type=int, default=1, help="the rows run this many times, interleaved; each keeps its best"
    )
    ap.add_argument(
        "--repeat",
        type=int,
        default=None,
        help="the images packed this many times over (default 10; quick 1)",
    )
    ap.add_argument(
        "--block-mib", type=float, default=None, help="the pack's block size (default the core's, 8; quick 1)"
    )
    ap.add_argument(
        "--window-blocks",
        type=int,
        default=None,
        help="Packed's shuffle window (default the core's; quick 4)",
    )
    ap.add_argument(
        "--prefetch-blocks",
        type=int,
        default=None,
        help="Packed's read-ahead over s3:// (default the core's, 4)",
    )
    ap.add_argument("--limit", type=int, default=None, help="use the first N images of --data (quick: 500)")
    ap.add_argument(
        "--short-side", type=int, default=320, help="re-encode to this short side first (0: stored bytes)"
    )
    ap.add_argument(
        "--filelist-images",
        type=int,
        default=None,
        help="images per FileList epoch (default 2,000; quick 500)",
    )
    ap.add_argument(
        "--window", default="0.25,0.95", help="the timed part of each epoch, as fractions of its images"
    )
    ap.add_argument("--latency-ms", type=float, default=20.0)
    ap.add_argument("--rate-mbit", type=int, default=1000)
    ap.add_argument("--shaper", choices=("kernel", "server"), default="kernel",
                    help="kernel: tbf on a private namespace's loopback (server pacing if it cannot); server: the server paces")  # fmt: skip
    ap.add_argument("--only", default=",".join(ROWS), help=f"rows to run, of {','.join(ROWS)}")
    ap.add_argument(
        "--quick",
        action="store_true",
        help="a check in < 1 min: 500 images, 1 repeat, blocks of 1 MiB, window 4",
    )
    ap.add_argument(
        "--out",
        default=None,
        help="FILE.md and FILE.json (default benches/results/streaming; quick: bench-results/streaming-quick)",
    )
    ap.add_argument(
        "--work", default=None, help="keep the pack and objects here (default: a temporary folder)"
    )
    ap.add_argument("--in-namespace", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)

    shaper, why_not = a.shaper, None
    if shaper == "kernel" and not a.in_namespace:
        rc = in_namespace(argv)
        if rc is not None:
            return rc
        shaper, why_not = "server", "no network namespace could be made (unshare)"
    if a.in_namespace:
        why_not = shape_loopback(a.rate_mbit * 1_000_000)
        if why_not:
            shaper = "server"
    shaper_text = (
        "kernel tbf on the namespace's loopback; delay = the server's sleep before each answer"
        if shaper == "kernel"
        else "the server paces bodies and sleeps before each answer" + (f" ({why_not})" if why_not else "")
    )

    cpus = _bench.parse_cpus(a.cpus) if a.cpus else _bench.allowed_cpus()[:2]
    _bench.restrict_cpus(cpus)
    workers = a.workers or len(cpus)
    repeat = a.repeat or (1 if a.quick else 10)
    block_bytes = int(a.block_mib * 2**20) if a.block_mib else (1 << 20 if a.quick else None)
    window_blocks = a.window_blocks or (4 if a.quick else None)
    limit = a.limit or (500 if a.quick else None)
    rows = [r.strip() for r in a.only.split(",") if r.strip()]
    unknown = set(rows) - set(ROWS)
    if unknown:
        ap.error(f"unknown rows {sorted(unknown)}; expected some of {ROWS}")
    lo, hi = (float(x) for x in a.window.split(","))
    out = (
        Path(a.out)
        if a.out
        else (RESULTS / "streaming-quick" if a.quick else REPO / "benches" / "results" / "streaming")
    )

    data = Path(a.data)
    if not data.is_dir():
        from trdata.sources.synthetic import default_dataset

        data = default_dataset(progress=False)
    work = Path(a.work) if a.work else Path(tempfile.mkdtemp(prefix="trdata-streaming-"))
    work.mkdir(parents=True, exist_ok=True)
    for old in ("subset", "bucket", "litdata-cache"):  # a --work folder of an earlier run
        shutil.rmtree(work / old, ignore_errors=True)
    (work / "server.json").unlink(missing_ok=True)
    server = None
    try:
        if limit:
            src = trdata.ImageFolder(data)
            subset = work / "subset"
            for p, lab in list(zip(src.paths, src.labels))[:limit]:
                d = subset / src.classes[lab]
                d.mkdir(parents=True, exist_ok=True)
                (d / os.path.basename(p)).symlink_to(os.path.abspath(p))
            data_used = subset
        else:
            data_used = data
        print(
            f"preparing: {data} → pack of {repeat}× (short side {a.short_side or 'as stored'}) in {work}",
            flush=True,
        )
        info = prepare(data_used, work, a.short_side, repeat, workers, block_bytes)
        rate = a.rate_mbit * 1_000_000 / 8
        server, urls = start_store(work / "bucket", a.latency_ms / 1000, 0 if shaper == "kernel" else rate)
        cfg = {
            **info,
            **urls,
            "window": [lo, hi],
            "filelist_images": a.filelist_images or (500 if a.quick else 2000),
            "block_bytes": block_bytes or DEFAULT_BLOCK_BYTES,
            "window_blocks": window_blocks,
            "prefetch_blocks": a.prefetch_blocks,
        }
        (work / CONFIG).write_text(json.dumps(cfg))
        os.sync()  # the pack and objects just written: their writeback would otherwise land on the first rows
        runs: dict[str, list[Measurement]] = {name: [] for name in rows}
        for r in range(a.rounds):
            for name in rows:
                print(
                    f"  running {name}" + (f" (round {r + 1}/{a.rounds})" if a.rounds > 1 else ""), flush=True
                )
                t0 = time.perf_counter()
                m = run_row(name, work, cpus, a.epochs, workers)
                took = f"{time.perf_counter() - t0:.0f} s"
                print(
                    f"    {m.img_per_s:,.0f} img/s ({took}){' — ' + m.error if m.error else ''}", flush=True
                )
                runs[name].append(m)
        results = [best_round(runs[name]) for name in rows]
        doc = {
            "data": {k: v for k, v in info.items() if k not in ("keys", "labels", "classes")}
            | {"folder": str(data), "limit": limit},
            "cpus": cpus,
            "workers": workers,
            "epochs": a.epochs,
            "rounds": a.rounds,
            "window": [lo, hi],
            "block_bytes": block_bytes or DEFAULT_BLOCK_BYTES,
            "window_blocks": window_blocks,
            "prefetch_blocks": a.prefetch_blocks,
            "store": {"latency_ms": a.latency_ms, "rate_mbit": a.rate_mbit, "shaper": shaper_text},
            "machine": _bench.machine_summary(),
            "load_average": round(_bench.load_average() or 0.0, 2),
            "command": " ".join(["benches/peers/streaming.py", *[x for x in argv if x != "--in-namespace"]]),
            "rows": [m.to_json() for m in results],
        }
        if shaper == "kernel":
            doc["store"]["tbf"] = tbf_counters()
        text = report(doc)
        print("\n" + text)
        write_json(out.with_suffix(".json"), doc)
        out.with_suffix(".md").write_text(f"# {doc['command']}\n\n{text}")
        print(f"wrote {out.with_suffix('.md')} and .json")
    finally:
        if server is not None:
            stop_store(server)
        if not a.work:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
