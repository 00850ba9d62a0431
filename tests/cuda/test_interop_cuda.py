"""trdata's GPU decode next to torchvision's in one process: a user validates with `torchvision.io.decode_jpeg(
device="cuda")` while trdata trains, or after a trdata loader is closed. Both load the same libnvjpeg when trdata
finds torchvision's copy, and both use the GPU's JPEG engines.

Why this test exists: on the H200 `benches/gpu/gpu_feed.py` hung in `rn50/tv-gpu` — torchvision's GPU decode
and per-image GPU crop — after trdata GPU-decode loaders had been closed in the same process, in 4 of 7 runs; with
trdata's decoders kept for the process it did not, in 2 of 2 (docs/design/gpu-decode-log.md §19–20; weak evidence so far).
Each stage runs in a fresh interpreter under a deadline, so a hang fails the test with the stage it hung
in and every thread's Python stack (faulthandler) instead of hanging the suite. Skips without CUDA, libnvjpeg with
hardware engines, or torchvision."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from _fixtures import photo
from PIL import Image
from trdata._cuda_libs import nvjpeg as _nvjpeg

torch = pytest.importorskip("torch")
pytest.importorskip("torchvision")

_probe = _nvjpeg.probe()
pytestmark = pytest.mark.skipif(
    not (torch.cuda.is_available() and _probe["found"] and _probe.get("hardware")),
    reason=f"needs CUDA and libnvjpeg with hardware engines (nvjpeg={_probe['found']}, hw={_probe.get('hardware')})",
)

#: Seconds a stage script may take (a healthy one takes a few); faulthandler fires a little earlier.
DEADLINE_S = 120

#: The script's head: a folder of JPEGs, a trdata loader with GPU decode, torchvision's decoder and its checks.
PRELUDE = (
    f"import faulthandler\nfaulthandler.dump_traceback_later({DEADLINE_S - 20}, exit=True)\n"
    + """
import sys, pathlib
import trdata, torch
from torchvision.io import ImageReadMode, decode_jpeg, read_file
root = pathlib.Path(sys.argv[1])
files = sorted(root.rglob("*.jpg"))
datas = [read_file(str(p)) for p in files]
def stage(name):
    print("stage", name, flush=True)
def tv_batch(n=16):
    out = decode_jpeg(datas[:n], mode=ImageReadMode.RGB, device="cuda")
    torch.cuda.synchronize()
    assert len(out) == n and all(o.is_cuda and o.shape[0] == 3 and o.shape[1] >= 160 for o in out), [o.shape for o in out]
    return out
def tv_each():
    for d in datas:
        o = decode_jpeg(d, mode=ImageReadMode.RGB, device="cuda")
        assert o.is_cuda and o.shape[0] == 3
    torch.cuda.synchronize()
def make_loader(decode=0.5):
    return trdata.Loader(trdata.ImageFolder(str(root)), batch_size=16,
                         transforms=[trdata.RandomResizedCrop(224), trdata.RandomHorizontalFlip()],
                         dtype="uint8", layout="NHWC", device="cuda:0", workers=3, shuffle=True, decode=decode)
def take(it, n, ld):
    for _ in range(n):
        b = next(it)
        x = torch.from_dlpack(b.images)
        assert x.shape == (16, 224, 224, 3) and x.is_cuda
    torch.cuda.synchronize()
    assert ld.stats()["decode_gpu"] > 0, ld.stats()  # trdata's GPU path ran, not only its CPU fallback
"""
)

STAGES = {
    # torchvision decodes while a trdata loader is mid-epoch on the same GPU (validation during training).
    "concurrent": """
ld = make_loader(); it = iter(ld)
take(it, 2, ld); stage("trdata running")
tv_batch(); tv_each(); stage("torchvision while trdata runs")
take(it, 2, ld); stage("trdata again")
ld.close(); stage("closed")
""",
    # gpu_feed's order: a trdata GPU-decode loader closed but still referenced, then torchvision's GPU decode.
    "after-close": """
ld = make_loader(); it = iter(ld)
take(it, 4, ld); ld.close(); stage("closed, still referenced")
tv_each(); tv_batch(); stage("torchvision after close")
del it, ld
import gc; gc.collect(); stage("dropped")
tv_batch(); stage("torchvision after drop")
ld = make_loader(); take(iter(ld), 2, ld); ld.close(); stage("a second trdata loader")
""",
    # The sequence that hung gpu_feed in 4 of 7 runs (docs/design/gpu-decode-log.md §20): two trdata GPU-decode loaders one
    # after the other, both closed and dropped, then torchvision's batched hardware decode with per-image GPU
    # RandomResizedCrop for 40 s (one run passes by chance 3 times in 7 if the hang is back: a signal, not proof). The second loader runs on the first one's decoders (kept for the process).
    "gpu-feed-sequence": """
import gc
from torchvision.transforms import v2
for mode in ("auto", 0.5):
    ld = make_loader(mode); it = iter(ld); take(it, 5, ld); st = ld.stats(); ld.close()
assert st["decode_gpu_decoders_reused"] == st["decode_gpu_decoders"] > 0, st
del it, ld; gc.collect(); stage("two trdata loaders closed and dropped")
crop = v2.Compose([v2.RandomResizedCrop(224, antialias=True), v2.RandomHorizontalFlip()])
import time
t_end = time.time() + 40  # the hang came after ~8–10 s of this in gpu_feed
while time.time() < t_end:
    x = torch.stack([crop(im) for im in decode_jpeg(datas, mode=ImageReadMode.RGB, device="cuda")])
    torch.cuda.synchronize()
assert x.shape == (len(datas), 3, 224, 224)
stage("torchvision decode + crop for 40 s")
""",
}


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("interop")
    for i in range(96):  # 6 batches of 16: an epoch outlasts every stage's batches
        d = root / f"c{i % 3}"
        d.mkdir(exist_ok=True)
        w, h = 200 + 9 * (i % 5), 180 + 7 * (i % 3)
        Image.fromarray(photo(i, w, h)).save(d / f"{i:03d}.jpg", "JPEG", quality=90, subsampling=i % 3)
    return root


@pytest.mark.parametrize("name", sorted(STAGES))
def test_torchvision_gpu_decode_works_beside_a_trdata_gpu_decode_loader(folder, name):
    script = PRELUDE + STAGES[name] + 'stage("done")\n'
    expected = [line.split('stage("')[1].split('")')[0] for line in script.splitlines() if 'stage("' in line]
    try:
        out = subprocess.run(
            [sys.executable, "-c", script, str(folder)],
            env=dict(os.environ),
            capture_output=True,
            text=True,
            timeout=DEADLINE_S,
        )
    except subprocess.TimeoutExpired as e:  # faulthandler should have ended it first
        pytest.fail(f"{name}: no exit after {DEADLINE_S} s; output so far:\n{e.stdout}\n{e.stderr}")
    reached = [line.removeprefix("stage ") for line in out.stdout.splitlines() if line.startswith("stage ")]
    assert out.returncode == 0 and reached == expected, (
        f"{name}: rc {out.returncode}, reached {reached} of {expected}\n--- stderr\n{out.stderr[-6000:]}"
    )
