"""What an epoch restart costs the consumer: the wait for each batch of a few epochs, with a consumer slower than
the loader (a sleep stands in for the model), so that every wait after the pipeline has filled is ~0.

    python benches/tools/epoch_restart.py --data ROOT [--batch 32] [--workers 2] [--repeat 4] [--epochs 3]
        [--model-ms 35] [--device cpu|cuda:0] [--decode cpu|gpu|auto|0.5] [--prefetch 2]

Per epoch it prints the first waits and the sum: a restart costs what the first batches of epochs ≥ 1 wait. First
run (2 cores, CPU, the 1,000-file ImageNet sample × 4, batch 32, 35 ms per step, `--data
../shared/data/imagenet-sample`): epoch 0 waited 86 ms for its first batch (a fresh loader), epochs 1 and 2 27 and
25 ms — one batch's latency — and ≤ 4.1 ms for every later batch. On the GPU with `--decode auto` the restart is a
larger dip (docs/design/gpu-decode-log.md §19); this is the script to isolate it there.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import trdata

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benches/: the shared `common` package
from common import decode_arg  # noqa: E402

EXTS = {".jpg", ".jpeg", ".png", ".webp"}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", required=True, help="a folder of images (searched recursively)")
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--repeat", type=int, default=4, help="the file list repeated this many times per epoch")
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--model-ms", type=float, default=35.0, help="the consumer's time per batch (a sleep)")
    p.add_argument("--device", default="cpu")
    p.add_argument("--decode", default="cpu", help="cpu | gpu | auto | a GPU share")
    p.add_argument("--prefetch", type=int, default=2)
    a = p.parse_args(argv)
    if min(a.batch, a.workers, a.repeat, a.epochs, a.prefetch) < 1 or a.model_ms < 0:
        p.error("--batch, --workers, --repeat, --epochs and --prefetch must be ≥ 1, --model-ms ≥ 0")
    paths = sorted(str(f) for f in Path(a.data).rglob("*") if f.suffix.lower() in EXTS)
    if len(paths) * a.repeat < 4 * a.batch:
        print(
            f"epoch_restart: {len(paths)} files × {a.repeat} is under 4 batches of {a.batch}", file=sys.stderr
        )
        return 2
    decode = decode_arg(a.decode)
    loader = trdata.Loader(
        trdata.FileList(paths * a.repeat, [0] * (len(paths) * a.repeat)),
        batch_size=a.batch,
        transforms=[trdata.RandomResizedCrop(224), trdata.RandomHorizontalFlip()],
        workers=a.workers,
        device=a.device,
        decode=decode,
        prefetch=a.prefetch,
        last_batch="drop",
        shuffle=True,
    )
    with loader:
        for epoch in range(a.epochs):
            waits = []
            it = iter(loader)
            while True:
                t = time.perf_counter()
                try:
                    b = next(it)
                except StopIteration:
                    break
                waits.append(time.perf_counter() - t)
                del b
                time.sleep(a.model_ms / 1000)
            ms = [round(w * 1000, 1) for w in waits]
            print(
                f"epoch {epoch}: {len(ms)} batches; wait ms, first 4: {ms[:4]}; later max {max(ms[4:], default=0)}; "
                f"sum {sum(ms):.0f}",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
