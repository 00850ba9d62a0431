"""decode="auto" step by step: the GPU share, the delivered rate and the data wait every 16 steps while a model
trains, after a sweep of fixed shares (the rate landscape the controller moves on).

    python benches/tools/auto_trace.py --data ROOT [--model resnet18] [--shares 0.4,0.5,...] [--steps 480]
        [--epoch-batches 100] [--json out.json]

The training step, the trdata feed and the files are benches/common/train.py's (as in gpu/gpu_feed.py): bf16 autocast,
channels_last, batch 256, the loader's default workers. `--epoch-batches` sets the virtual epoch (the file list
repeated until an epoch holds that many batches); the default, 100, puts epoch restarts inside the trace — they
show as windows where the rate halves and the data wait jumps (first run on the H200, docs/design/gpu-decode-log.md §19:
ResNet-18, ~0.3 s lost per restart; between restarts 12–14k img/s against 13.2k synthetic).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benches/: the shared `common` package
from common import write_json  # noqa: E402
from common.train import DecodeTrdataFeed, make_model, prepare, train_step  # noqa: E402

BATCH = 256
WINDOW = 16  # steps per printed line


def run(feed, model, opt, loss_fn, steps: int, warmup: int, trace: bool):
    """(img/s, data-wait fraction, [(t, wait, share)] per step when `trace`)."""
    for _ in range(warmup):
        x, y = next(feed)
        train_step(model, opt, loss_fn, x, y)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    wait, rows = 0.0, []
    for _ in range(steps):
        a = time.perf_counter()
        x, y = next(feed)
        b = time.perf_counter()
        wait += b - a
        train_step(model, opt, loss_fn, x, y)
        ppm = feed.loader.stats().get("decode_gpu_share_ppm", 0)  # every run pays the same stats() call
        if trace:
            rows.append((b - t0, b - a, ppm / 1e6))
    torch.cuda.synchronize()
    wall = time.perf_counter() - t0
    return steps * BATCH / wall, wait / wall, rows


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", required=True, help="ImageFolder root")
    p.add_argument("--model", default="resnet18", help="torchvision model name")
    p.add_argument(
        "--shares", default="0.4,0.5,0.6,0.7,0.75,0.8,0.9,1.0", help="fixed shares to sweep ('' none)"
    )
    p.add_argument("--fixed-steps", type=int, default=40, help="timed steps per fixed share")
    p.add_argument("--steps", type=int, default=480, help="traced steps of decode='auto' (0: none)")
    p.add_argument("--epoch-batches", type=int, default=100, help="batches per virtual epoch")
    p.add_argument("--json", default=None)
    a = p.parse_args(argv)
    try:
        shares = [float(s) for s in a.shares.split(",") if s.strip()]
    except ValueError:
        p.error(f"--shares {a.shares!r}: comma-separated numbers in [0, 1]")
    if any(not 0.0 <= s <= 1.0 for s in shares) or a.fixed_steps < 1 or a.steps < 0 or a.epoch_batches < 1:
        p.error("shares must lie in [0, 1]; --fixed-steps ≥ 1, --steps ≥ 0, --epoch-batches ≥ 1")
    files = prepare("auto_trace", a.data, BATCH, 0, a.epoch_batches)
    if files is None:
        return 2
    _, _, rpaths, rlabels, _ = files
    model, opt = make_model(fused=True, arch=a.model)
    model.train()
    loss_fn = torch.nn.CrossEntropyLoss()
    out = {"model": a.model, "epoch_batches": a.epoch_batches, "fixed": {}, "auto": None}

    def feed_for(mode):
        return DecodeTrdataFeed(rpaths, rlabels, BATCH, None, mode)

    for s in shares:
        feed = feed_for(str(s))
        try:
            rate, wait, _ = run(feed, model, opt, loss_fn, a.fixed_steps, 10, trace=False)
        finally:
            feed.close()
        out["fixed"][s] = {"img_per_s": round(rate), "data_wait": round(wait, 3)}
        print(f"fixed {s:.2f}: {rate:8,.0f} img/s, data wait {wait:.3f}", flush=True)
    if a.steps:
        feed = feed_for("auto")
        try:
            rate, wait, rows = run(feed, model, opt, loss_fn, a.steps, 10, trace=True)
        finally:
            feed.close()
        out["auto"] = {"img_per_s": round(rate), "data_wait": round(wait, 3), "steps": rows}
        print(f"auto: {rate:8,.0f} img/s, data wait {wait:.3f}; every {WINDOW} steps:", flush=True)
        for i in range(0, len(rows) - WINDOW, WINDOW):
            dt = rows[i + WINDOW][0] - rows[i][0]
            w = sum(r[1] for r in rows[i + 1 : i + WINDOW + 1]) / dt
            print(f"  step {i:4d}  share {rows[i][2]:.3f}  {WINDOW * BATCH / dt:7,.0f} img/s  wait {w:.2f}")
    if a.json:
        write_json(a.json, out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
