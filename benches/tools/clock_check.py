"""Is the scaling shortfall at 16 workers the CPU clock rather than the loader?

Per-core clocks drop when every core is busy (all-core turbo is lower than single-core turbo), so "linear
scaling from 1 worker" compares 16 workers at the all-core clock with 1 worker at the single-core clock. This
bench measures one worker twice — with the other allowed CPUs idle, and with a busy-loop process pinned to
each of them (so the package runs at its all-core clock) — and then all workers:

    python benches/tools/clock_check.py --data ROOT [--seconds 5] [--trials 2] [--device cpu] [--json out.json]

Efficiency vs the idle 1-worker rate is the usual scaling number; efficiency vs the loaded 1-worker rate is
the scaling at equal clock, i.e. what the loader itself loses (locks, memory bandwidth, station waits)."""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benches/: the shared `common` package
from common import folder_files, write_json  # noqa: E402
from common.recipe import repeats_for, train_loader  # noqa: E402

BATCH = 256


def spin(cpu: int, stop_at: float) -> None:
    os.sched_setaffinity(0, {cpu})
    x = 1.0
    while time.time() < stop_at:
        for _ in range(10_000):
            x = x * 1.000001 + 1e-9


def rate(paths, labels, workers, cpus, seconds, device) -> float:

    ld = train_loader(
        paths, labels, batch=BATCH, dtype="bfloat16", layout="NHWC", workers=workers, device=device, cpus=cpus
    )
    try:
        it = iter(ld)

        def nxt():
            nonlocal it
            try:
                return next(it)
            except StopIteration:
                it = iter(ld)
                return next(it)

        t = time.perf_counter()
        while time.perf_counter() - t < 1.5:
            nxt()
        n, t0 = 0, time.perf_counter()
        while n < 4 or time.perf_counter() - t0 < seconds:
            nxt()
            n += 1
        return n * BATCH / (time.perf_counter() - t0)
    finally:
        ld.close()


def main() -> int:

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", required=True)
    p.add_argument("--seconds", type=float, default=5.0)
    p.add_argument("--trials", type=int, default=2)
    p.add_argument("--device", default="cpu")
    p.add_argument("--json", default=None)
    a = p.parse_args()
    files, classes = folder_files(a.data)
    repeat = repeats_for(len(files), 100 * BATCH)
    paths, labels = files * repeat, classes * repeat
    cpus = sorted(os.sched_getaffinity(0))
    res: dict[str, list[float]] = {
        "1 worker, others idle": [],
        "1 worker, others busy": [],
        f"{len(cpus)} workers": [],
    }
    for _ in range(a.trials):
        res["1 worker, others idle"].append(rate(paths, labels, 1, cpus[:1], a.seconds, a.device))
        stop_at = time.time() + a.seconds + 4.0
        ctx = mp.get_context("spawn")
        spinners = [ctx.Process(target=spin, args=(c, stop_at)) for c in cpus[1:]]
        for s in spinners:
            s.start()
        time.sleep(0.5)
        res["1 worker, others busy"].append(rate(paths, labels, 1, cpus[:1], a.seconds, a.device))
        for s in spinners:
            s.join()
        res[f"{len(cpus)} workers"].append(rate(paths, labels, len(cpus), cpus, a.seconds, a.device))
    med = {k: statistics.median(v) for k, v in res.items()}
    idle, busy, full = med["1 worker, others idle"], med["1 worker, others busy"], med[f"{len(cpus)} workers"]
    n = len(cpus)
    print(f"device={a.device}  cpus={n}  trials={a.trials} (median)")
    for k, v in res.items():
        print(f"  {k:24s} {med[k]:8.0f} img/s   trials: {', '.join(f'{x:.0f}' for x in v)}")
    print(f"  scaling vs idle 1-worker rate (usual definition): {full / (n * idle):.3f}")
    print(f"  scaling at equal clock (vs 1 worker with all cores busy): {full / (n * busy):.3f}")
    print(f"  1-worker slowdown from the other cores' load alone: {busy / idle:.3f}")
    if a.json:
        write_json(
            a.json,
            {
                "device": a.device,
                "cpus": n,
                "trials": res,
                "median": med,
                "eff_vs_idle": full / (n * idle),
                "eff_equal_clock": full / (n * busy),
            },
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
