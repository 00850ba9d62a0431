"""How fast nvJPEG's hardware backend decodes while a model trains on the same GPU, per output format.

    python benches/gpu/nvjpeg_under_load.py --data DIR [--batch 64] [--seconds 3] [--model resnet50]

Why (docs/design/gpu-decode-log.md §17): trdata's GPU decode path makes ~14.5k img/s into cuda:0 on its own but only
~4.3k while ResNet-50 trains (~9k under ResNet-18), with the decode threads mostly waiting in nvJPEG's own
`cudaEventSynchronize`. This bench isolates nvJPEG from trdata: one `nvjpegDecodeBatched` call after another on
the 4:4:4 files of DIR (ctypes on the libnvjpeg trdata finds), alone and while the model trains on synthetic data
in the main thread, for interleaved RGB output and for YCbCr planes at several pitches. It also prints the GPU
activities nvJPEG issues per call (torch.profiler): per image, one bitstream upload and either a CUDA kernel
(`rgba2rgb`, interleaved RGB) or three device-to-device copies (planes) on nvJPEG's own streams, whatever the
destination pitch — the engines never write the caller's buffer directly.

Measured on the H200 (2026-12-01, 228 4:4:4 files of the ImageNet sample, batch 64, one decode thread): alone RGB
15.1–15.4k img/s, planes 13.8–14.1k; while ResNet-50 trains RGB 2.7–3.5k, planes 4.3–4.5k; ResNet-50 itself
loses 2–3 % (4,710 → 4,570–4,600). The decode thread is a Python thread here (ctypes releases the GIL during the
calls; the switch interval is set to 0.5 ms), so the absolute rates under load are lower bounds. Those numbers
came from `devcarry/yuvprobe.py`, of which this file is the cleaned-up form.

This file's own first run (H200, 2026-12-01, `devcarry/run23.sh`, one process per setting): with CUDA's default 8
hardware work queues alone RGB 15,272 img/s, while ResNet-50 trains RGB 3,616 / planes 3,704–4,133; with
`CUDA_DEVICE_MAX_CONNECTIONS=32` alone 16,234, while ResNet-50 trains RGB **10,618** / planes 8,643–9,511
(ResNet-50 4,530 vs 4,599 alone-ish): nvJPEG's streams shared the 8 queues with the model's (docs/design/gpu-decode-log.md
§18). `import trdata` now sets 32 unless the variable is set; run this file with the variable set explicitly to
compare.
"""

from __future__ import annotations

import argparse
import collections
import ctypes as C
import glob
import os
import sys
import threading
import time


class Image(C.Structure):
    """nvjpegImage_t."""

    _fields_ = [("channel", C.c_void_p * 4), ("pitch", C.c_size_t * 4)]


OUTPUT_YUV, OUTPUT_RGBI, BACKEND_HARDWARE, CSS_444 = 1, 5, 3, 0


def up(v: int, a: int) -> int:
    return (v + a - 1) // a * a


def open_nvjpeg():
    from trdata._cuda_libs import wheel_candidates

    for c in wheel_candidates("nvidia/cu13/lib/libnvjpeg.so.13", "torchvision.libs/libnvjpeg*.so*") + [
        "libnvjpeg.so.13"
    ]:
        try:
            return C.CDLL(c), c
        except OSError:
            pass
    sys.exit("libnvjpeg not found")


def ok(st: int, what: str) -> None:
    if st != 0:
        raise RuntimeError(f"{what}: NVJPEG status {st}")


class BatchDecode:
    """One nvJPEG state decoding the same `batch` files per call into preallocated outputs (format, pitch
    alignment `pa`, plane-height alignment `ha`)."""

    def __init__(self, lib, handle, files, fmt: int, pa: int = 1, ha: int = 1):
        import torch

        self.lib, self.h, self.fmt, self.n = lib, handle, fmt, len(files)
        self.state = C.c_void_p()
        ok(lib.nvjpegJpegStateCreate(handle, C.byref(self.state)), "nvjpegJpegStateCreate")
        self.stream = torch.cuda.Stream()
        self.bufs, self.imgs = [], (Image * self.n)()
        for i, (_b, w, h) in enumerate(files):
            if fmt == OUTPUT_RGBI:
                t = torch.empty(h * w * 3, dtype=torch.uint8, device="cuda")
                self.bufs.append(t)
                self.imgs[i].channel[0], self.imgs[i].pitch[0] = t.data_ptr(), w * 3
            else:
                for c in range(3):
                    t = torch.empty(up(h, ha) * up(w, pa) + 512, dtype=torch.uint8, device="cuda")
                    self.bufs.append(t)
                    self.imgs[i].channel[c], self.imgs[i].pitch[c] = up(t.data_ptr(), 512), up(w, pa)
        self.keep = [b for b, _, _ in files]
        self.data = (C.c_void_p * self.n)(*[C.cast(C.c_char_p(b), C.c_void_p) for b in self.keep])
        self.lens = (C.c_size_t * self.n)(*[len(b) for b in self.keep])

    def once(self) -> None:
        lib = self.lib
        ok(lib.nvjpegDecodeBatchedInitialize(self.h, self.state, self.n, 1, self.fmt), "initialize")
        st = lib.nvjpegDecodeBatched(
            self.h, self.state, self.data, self.lens, self.imgs, C.c_void_p(self.stream.cuda_stream)
        )
        ok(st, "nvjpegDecodeBatched")
        self.stream.synchronize()

    def rate(self, seconds: float) -> float:
        n, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            self.once()
            n += self.n
        return n / (time.perf_counter() - t0)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", required=True, help="folder of JPEGs (searched recursively)")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--seconds", type=float, default=3.0)
    p.add_argument("--model", default="resnet50")
    a = p.parse_args(argv)
    import torch
    import torchvision

    sys.setswitchinterval(0.0005)
    lib, path = open_nvjpeg()
    torch.zeros(1, device="cuda")
    handle = C.c_void_p()
    ok(lib.nvjpegCreateEx(BACKEND_HARDWARE, None, None, 0, C.byref(handle)), "nvjpegCreateEx(hardware)")
    files = []
    names = sorted(glob.glob(os.path.join(a.data, "**", "*.*"), recursive=True))
    for f in names:
        b = open(f, "rb").read()
        nc, ss, w, h = C.c_int(), C.c_int(), (C.c_int * 4)(), (C.c_int * 4)()
        st = lib.nvjpegGetImageInfo(handle, b, C.c_size_t(len(b)), C.byref(nc), C.byref(ss), w, h)
        if st == 0 and ss.value == CSS_444 and nc.value == 3:
            files.append((b, w[0], h[0]))
    if not files:
        sys.exit(f"no 4:4:4 JPEGs under {a.data}")
    conns = os.environ.get("CUDA_DEVICE_MAX_CONNECTIONS")
    print(
        f"libnvjpeg {path}; {len(files)} 4:4:4 files of {len(names)}; batch {a.batch}; "
        f"CUDA_DEVICE_MAX_CONNECTIONS={conns}",
        flush=True,
    )
    batch = (files * (a.batch // len(files) + 1))[: a.batch]
    variants = {
        "RGB interleaved": (OUTPUT_RGBI,),
        "planes, pitch = width": (OUTPUT_YUV,),
        "planes, pitch 256-aligned": (OUTPUT_YUV, 256, 16),
        "planes, pitch 512, rows 64-aligned": (OUTPUT_YUV, 512, 64),
    }
    decs = {name: BatchDecode(lib, handle, batch, *v) for name, v in variants.items()}
    for name, d in decs.items():
        d.once()
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            d.once()
            torch.cuda.synchronize()
        acts = collections.Counter(
            e.name[:48] for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA
        )
        print(
            f"{name}: alone {d.rate(a.seconds / 2):,.0f} img/s; GPU activities per call {dict(acts)}",
            flush=True,
        )

    model = getattr(torchvision.models, a.model)().cuda().to(memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(256, 3, 224, 224, device="cuda").to(memory_format=torch.channels_last)
    y = torch.randint(0, 1000, (256,), device="cuda")

    def train(seconds: float) -> float:
        steps, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = torch.nn.functional.cross_entropy(model(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            steps += 1
        torch.cuda.synchronize()
        return steps * 256 / (time.perf_counter() - t0)

    train(1.0)
    print(f"{a.model} alone {train(a.seconds):,.0f} img/s", flush=True)
    for name in ("RGB interleaved", "planes, pitch = width", "planes, pitch 256-aligned"):
        out: dict = {}
        th = threading.Thread(target=lambda d=decs[name], o=out: o.setdefault("r", d.rate(a.seconds)))
        th.start()
        r = train(a.seconds)
        th.join()
        print(
            f"{name} while {a.model} trains: decode {out['r']:,.0f} img/s, {a.model} {r:,.0f} img/s",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
