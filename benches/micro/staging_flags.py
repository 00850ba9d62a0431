"""Which pinned-memory flavour should staging use? Measures, on the GPU machine, for one 77 MB batch slab
(256 × 224 × 224 × 3 bf16, the RN50 benchmark's batch):

- CPU write bandwidth into the slab (what the workers do: sequential stores of each sample's rows),
- CPU read-back bandwidth (what reading labels/indices or a debugging view does),
- host-to-device copy bandwidth (cuMemcpyHtoD),

for (a) page-aligned memory registered with cuMemHostRegister (cached; what trdata uses), (b) cuMemHostAlloc
default (cached), (c) cuMemHostAlloc WRITECOMBINED (uncached, write-combined).

    python benches/micro/staging_flags.py [--mb 77] [--reps 10] [--json out.json]
"""

from __future__ import annotations

import argparse
import ctypes
import mmap
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benches/: the shared `common` package
from common import write_json  # noqa: E402


def main() -> int:
    import torch

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--mb", type=float, default=256 * 224 * 224 * 3 * 2 / 1e6)
    p.add_argument("--reps", type=int, default=10)
    p.add_argument("--json", default=None)
    a = p.parse_args()
    size = int(a.mb * 1e6) // 4096 * 4096
    torch.zeros(1, device="cuda")  # primary context current on this thread
    cu = ctypes.CDLL("libcuda.so.1")

    def check(rc, call):
        if rc != 0:
            raise RuntimeError(f"{call} failed with CUresult {rc}")

    chunk = 224 * 224 * 3 * 2
    dev = torch.empty(size, dtype=torch.uint8, device="cuda")
    src = np.random.default_rng(0).integers(0, 255, size, dtype=np.uint8)
    results = {}
    keep = []
    for name in ("registered (cached)", "cuMemHostAlloc (cached)", "cuMemHostAlloc WRITECOMBINED"):
        if name.startswith("registered"):
            buf = mmap.mmap(-1, size)
            addr = ctypes.addressof(ctypes.c_char.from_buffer(buf))
            host = np.frombuffer(buf, dtype=np.uint8)
            host[::4096] = 0  # prefault
            check(
                cu.cuMemHostRegister_v2(ctypes.c_void_p(addr), ctypes.c_size_t(size), 1), "cuMemHostRegister"
            )
            keep.append(buf)
        else:
            ptr = ctypes.c_void_p()
            flags = 1 | (4 if "WRITECOMBINED" in name else 0)
            check(cu.cuMemHostAlloc(ctypes.byref(ptr), ctypes.c_size_t(size), flags), "cuMemHostAlloc")
            addr = ptr.value
            host = np.ctypeslib.as_array((ctypes.c_uint8 * size).from_address(addr))
        t_w = []
        for _ in range(a.reps):
            # Like the workers: one sample (224·224·3 bf16 = 301 KB) at a time, not one huge memcpy (which glibc
            # would turn into non-temporal stores for every memory kind alike).
            t = time.perf_counter()
            for o in range(0, size, chunk):
                host[o : o + chunk] = src[o : o + chunk]
            t_w.append(time.perf_counter() - t)
        t_r = []
        for _ in range(3):
            t = time.perf_counter()
            s = int(host[::64].sum())  # touch one byte per cache line
            t_r.append(time.perf_counter() - t)
        assert s >= 0
        torch.cuda.synchronize()
        t_c = []
        for _ in range(a.reps):
            t = time.perf_counter()
            check(
                cu.cuMemcpyHtoD_v2(
                    ctypes.c_uint64(dev.data_ptr()), ctypes.c_void_p(addr), ctypes.c_size_t(size)
                ),
                "cuMemcpyHtoD",
            )
            t_c.append(time.perf_counter() - t)
        assert torch.equal(dev[:4096].cpu(), torch.from_numpy(src[:4096].copy()))
        results[name] = {
            "cpu_write_GBps": size / min(t_w) / 1e9,
            "cpu_read_GBps": size / 64 * 64 / min(t_r) / 1e9,
            "h2d_GBps": size / min(t_c) / 1e9,
        }
    print(f"slab {size / 1e6:.1f} MB, best of {a.reps}")
    print(f"{'memory':32s} {'CPU write GB/s':>15s} {'CPU read GB/s':>14s} {'H2D GB/s':>9s}")
    for k, v in results.items():
        print(f"{k:32s} {v['cpu_write_GBps']:15.1f} {v['cpu_read_GBps']:14.1f} {v['h2d_GBps']:9.1f}")
    if a.json:
        write_json(a.json, {"bytes": size, "results": results})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
