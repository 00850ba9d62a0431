#!/usr/bin/env python3
"""Per-stage micro-benchmark: where one worker's time goes, per image, for a few pipelines.

One trdata worker on one CPU (no contention between workers), one warm-up epoch, then timed epochs;
``loader.stats()`` splits the worker's time into read / decode (ROI + DCT-scaled) / augment (resample,
flip, normalize, cast, layout). The raw full-size libjpeg-turbo decode on the same CPU is the yardstick:
``decode`` well below it means the ROI/scaling pays off, ``augment`` is what fusing has to keep small.

    .venv/bin/python benches/micro/stages.py                       # ImageNet sample
    .venv/bin/python benches/micro/stages.py --data DIR --epochs 3

Prints a table and writes bench-results/stages.json. No thresholds: numbers to read, not to assert.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import trdata
from trdata import _bench

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benches/: the shared `common` package
from common import DEFAULT_DATA, RESULTS, write_json  # noqa: E402


def pipelines() -> dict[str, dict]:
    """Name → Loader keyword arguments (besides source/workers)."""
    rrc = [trdata.RandomResizedCrop(224), trdata.RandomHorizontalFlip()]
    return {
        "train RRC224+flip f16 NCHW": {"transforms": rrc, "dtype": "float16", "layout": "NCHW"},
        "train RRC224+flip u8 NHWC": {
            "transforms": rrc,
            "dtype": "uint8",
            "layout": "NHWC",
            "normalize": None,
        },
        "train RRC224+flip f32 NCHW": {"transforms": rrc, "dtype": "float32", "layout": "NCHW"},
        "eval Resize256+CenterCrop224 f16": {
            "transforms": [trdata.Resize(256), trdata.CenterCrop(224)],
            "dtype": "float16",
            "layout": "NCHW",
        },
    }


def run_pipeline(root: str, kwargs: dict, epochs: int, batch_size: int) -> dict:
    options = {"normalize": trdata.IMAGENET, **kwargs}
    source = trdata.ImageFolder(root)
    with trdata.Loader(
        source, batch_size=batch_size, workers=1, shuffle=True, seed=0, last_batch="partial", **options
    ) as loader:
        for _ in loader:  # warm-up epoch
            pass
        before = loader.stats()
        images = 0
        start = time.perf_counter()
        for _ in range(epochs):
            for batch in loader:
                images += int(batch.valid)
        seconds = time.perf_counter() - start
        after = loader.stats()
    delta = {k: after[k] - before.get(k, 0) for k in after if isinstance(after[k], (int, float))}
    n = max(1, int(delta.get("samples", images)))
    return {
        "img_per_s": images / seconds if seconds > 0 else 0.0,
        "images": images,
        "seconds": seconds,
        "us_per_image": {k[:-3]: delta[k] / n / 1e3 for k in delta if k.endswith("_ns")},
        "stats": delta,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="per-stage cost of one trdata worker, per image")
    ap.add_argument("--data", default=os.environ.get("TRDATA_BENCH_DATA", str(DEFAULT_DATA)))
    ap.add_argument("--cpu", type=int, default=None, help="CPU to run on (default: the first allowed)")
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--out", default=str(RESULTS / "stages.json"))
    args = ap.parse_args(argv)

    root = os.path.abspath(args.data)
    cpu = args.cpu if args.cpu is not None else _bench.allowed_cpus()[0]
    _bench.restrict_cpus([cpu])
    paths, _ = _bench.image_folder_files(root)
    print(f"stages — {len(paths):,} images from {root}; 1 worker on CPU {cpu}; {args.epochs} timed epochs\n")

    ceiling = _bench.decode_ceiling(paths, 1, repeat=args.epochs)
    full_decode_us = 1e6 / ceiling.img_per_s if ceiling.img_per_s else 0.0
    results: dict[str, dict] = {}
    rows = []
    for name, kwargs in pipelines().items():
        print(f"  {name} …", file=sys.stderr, flush=True)
        r = run_pipeline(root, kwargs, args.epochs, args.batch_size)
        results[name] = r
        us = r["us_per_image"]
        rows.append(
            (
                name,
                _bench.fmt_rate(r["img_per_s"]),
                *(f"{us.get(k, 0.0):,.0f}" for k in ("read", "decode", "augment")),
                f"{us.get('decode', 0.0) / full_decode_us:.2f}" if full_decode_us else "—",
            )
        )
    rows.append(
        (ceiling.name, _bench.fmt_rate(ceiling.img_per_s), "—", f"{full_decode_us:,.0f}", "—", "1.00")
    )
    print(
        _bench.format_table(
            ("pipeline (1 worker)", "img/s", "read µs", "decode µs", "augment µs", "decode ÷ full"), rows
        )
    )
    doc = {
        "benchmark": "stages",
        "data": root,
        "images": len(paths),
        "cpu": cpu,
        "epochs": args.epochs,
        "machine": _bench.machine_summary(),
        "full_decode": ceiling.to_json(),
        "pipelines": results,
    }
    out = write_json(args.out, doc, indent=2, newline=True)
    print(f"\nwrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
